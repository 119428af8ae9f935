r"""Sample completions from one or more models, score them with the reward model, rank and compare them.

Usage:

    python evaluate_generations.py --model-path ./ppo_training_output
    python evaluate_generations.py --model_path HuggingFaceTB/smollm2-135M-SFT-Only ./grpo_training_output \
        ./ppo_training_output --num_prompts 50 --output_file comparison.json

The first model is the baseline: every other model gets the same prompts and sampling seed, and its win rate
against the baseline under the reward model (ties count half) is reported with a 95% bootstrap interval.
Prompts are drawn from the rows after the first `--train_samples` (the rows training used), so they are
held out by default. See the README for the JSON layout.
"""

import functools
import json
import logging
import random
from pathlib import Path

from config import EvalArguments, RewardArguments
from rlhf.cli import UserError, exit_on_user_error, parse_args
from rlhf.data import build_prompt_dataset, load_rows
from rlhf.evaluation import compare, generate, rank_labels, summarize
from rlhf.models import check_model_source, load_causal_lm, load_tokenizer, reward_model_dtype
from rlhf.reward import REWARD_HINT, reward_model_scorer
from rlhf.reward_funcs import check_reward_weights, load_reward_funcs
from rlhf.run import versions


def main(args, rewards):
    if not args.model_path:
        raise UserError("pass at least one model with --model_path (a folder or a Hub id)")
    for path in args.model_path:
        check_model_source(path, "model", "--model_path")
    if "reward_model" in rewards.reward_funcs:
        check_model_source(rewards.reward_model_path, "reward model", "--reward_model_path", REWARD_HINT)
    check_reward_weights(args.reward_weights, rewards.reward_funcs)
    weights = args.reward_weights or [1.0] * len(rewards.reward_funcs)

    import torch
    from tqdm.auto import tqdm

    ################
    # Held-out prompts, the same for every model
    ################
    baseline = args.model_path[0]
    tokenizer = load_tokenizer(baseline, args.trust_remote_code)
    rows = load_rows(args.dataset_name, args.dataset_split)
    if len(rows) <= args.train_samples:
        raise UserError(
            f"dataset {args.dataset_name} has {len(rows)} rows, all within the first --train_samples "
            f"{args.train_samples} that training used; pass the --max_samples you trained with as --train_samples"
        )
    held_out = rows.select(range(args.train_samples, len(rows)))
    prompts, _, _ = build_prompt_dataset(held_out, tokenizer, args.max_prompt_length, args.system_prompt)
    picked = sorted(random.Random(args.seed).sample(range(len(prompts)), min(args.num_prompts, len(prompts))))
    rows = [prompts[i] for i in picked]  # the prompt and every other column (e.g. ground_truth for boxed_answer)
    prompts = [row["prompt"] for row in rows]

    ################
    # Generate and score, one model at a time
    ################
    device = "cuda" if torch.cuda.is_available() else "cpu"

    scorer_dtype = reward_model_dtype(rewards.reward_model_dtype, args.dtype, bf16=False)
    load_scorer = functools.partial(reward_model_scorer, rewards.reward_model_path, scorer_dtype,
                                    args.trust_remote_code, device, args.batch_size)
    funcs = load_reward_funcs(rewards.reward_funcs, load_scorer, rewards.boxed_rewards)
    results = []
    for path in args.model_path:
        model, model_tokenizer = load_causal_lm(path, args.dtype, args.trust_remote_code)
        model.to(device)
        with tqdm(total=len(prompts) * args.num_completions, desc=f"Generating with {path}") as progress:
            completions = generate(model, model_tokenizer, prompts, args.num_completions, args.max_new_tokens,
                                   args.temperature, args.top_p, args.batch_size, args.seed, progress)
        del model
        score(funcs, weights, rows, completions)
        for cs in completions:
            for completion, rank in zip(cs, rank_labels([c["reward"] for c in cs])):
                completion["rank"] = rank
        summary = summarize([c for cs in completions for c in cs])
        if "boxed_answer" in rewards.reward_funcs:  # share of completions the verifier rewarded as correct
            verdicts = [c["rewards"]["boxed_answer"] == rewards.boxed_correct_reward for cs in completions for c in cs]
            summary["verifier_accuracy"] = sum(verdicts) / len(verdicts)
        results.append({
            "model_path": path,
            "summary": summary,
            "prompts": [{"prompt": p, "completions": cs} for p, cs in zip(prompts, completions)],
        })

    ################
    # Compare with the baseline, report
    ################
    def rewards_per_prompt(result):
        return [[c["reward"] for c in p["completions"]] for p in result["prompts"]]

    comparison = [
        {"model_path": r["model_path"], "baseline": baseline,
         **compare(rewards_per_prompt(r), rewards_per_prompt(results[0]), seed=args.seed)}
        for r in results[1:]
    ]
    report = {
        "config": {**vars(args), "prompt_rows": [args.train_samples + i for i in picked],
                   "versions": versions()},
        "models": results,
        "comparison": comparison,
    }
    Path(args.output_file).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output_file).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_table(results, comparison)
    print(f"Wrote {args.output_file}")


def score(funcs, weights, rows, completions):
    """Give every completion its `rewards` per function and their weighted sum `reward`."""
    flat = [(row, c) for row, cs in zip(rows, completions) for c in cs]
    columns = {key: [row[key] for row, _ in flat] for key in rows[0] if key != "prompt"}
    prompts = [row["prompt"] for row, _ in flat]
    messages = [[{"role": "assistant", "content": c["text"]}] for _, c in flat]
    per_func = {func.__name__: func(prompts=prompts, completions=messages, **columns) for func in funcs}
    for i, (_, completion) in enumerate(flat):
        completion["rewards"] = {name: values[i] for name, values in per_func.items()}
        completion["reward"] = sum(w * values[i] for w, values in zip(weights, per_func.values()))


def print_table(results, comparison):
    wins = {c["model_path"]: c for c in comparison}
    print(f"\n{'model':<40} {'reward mean±std':>16} {'EOS':>5} {'tokens':>7} {'corr(len)':>9}  win rate vs baseline")
    for r in results:
        s, c = r["summary"], wins.get(r["model_path"])
        corr = "n/a" if s["reward_length_correlation"] is None else f"{s['reward_length_correlation']:+.2f}"
        win = "(baseline)" if c is None else (
            f"{c['win_rate']:.2f} [{c['ci_low']:.2f}, {c['ci_high']:.2f}]  Δreward {c['mean_reward_delta']:+.3f}")
        print(f"{r['model_path'][-40:]:<40} {s['mean_reward']:>8.3f}±{s['std_reward']:<7.3f} "
              f"{s['eos_rate']:>5.0%} {s['mean_length']:>7.1f} {corr:>9}  {win}")
    for r in results:
        if "verifier_accuracy" in r["summary"]:
            print(f"verifier accuracy of {r['model_path']}: {r['summary']['verifier_accuracy']:.1%}")


@exit_on_user_error
def cli(args=None):
    main(*parse_args((EvalArguments, RewardArguments), args, __doc__))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
