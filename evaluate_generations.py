r"""Sample completions from one or more models, score them with the reward model, rank and compare them.

Usage:

    python evaluate_generations.py --model-path ./ppo_training_output
    python evaluate_generations.py --model_path HuggingFaceTB/smollm2-135M-SFT-Only ./grpo_training_output \
        ./ppo_training_output --num_prompts 50 --output_file comparison.json

    python evaluate_generations.py --model_path bundled/SmolLM2-135M-Instruct ./grpo_math \
        --reward_funcs boxed_answer boxed_format --dataset_name data/math_test.jsonl --train_samples 0 --num_prompts 100

The first model is the baseline: every other model gets the same prompts and sampling seed, and its win rate
against the baseline under the reward model (ties count half) is reported with a 95% bootstrap interval. With
the math verifier (`boxed_answer`), each model's format rate and verifier accuracy (95% interval) and each model's
accuracy gain over the baseline (paired 95% interval) are reported too.
Prompts are drawn from the rows after the first `--train_samples` (the rows training used), so they are
held out by default. See the README for the JSON layout.
"""

import functools
import json
import logging
from pathlib import Path

from config import EvalArguments, RewardArguments
from rlhf.cli import UserError, exit_on_user_error, parse_args
from rlhf.data import build_prompt_dataset, load_rows
from rlhf.evaluation import compare, draw_prompts, format_table, generate, score, summarize
from rlhf.models import check_model_source, check_policy, load_causal_lm, load_tokenizer, reward_model_dtype
from rlhf.reward import REWARD_HINT, reward_model_scorer
from rlhf.reward_funcs import check_reward_weights, load_reward_funcs
from rlhf.run import versions


def main(args, rewards):
    if not args.model_path:
        raise UserError("pass at least one model with --model_path (a folder or a Hub id)")
    for path in args.model_path:
        check_model_source(path, "model", "--model_path")
        check_policy(path, "--model_path", {"--max_prompt_length": args.max_prompt_length,
                                            "--max_new_tokens": args.max_new_tokens}, args.trust_remote_code)
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
    rows, row_numbers = draw_prompts(prompts, args.train_samples, args.num_prompts, args.seed)
    prompts = [row["prompt"] for row in rows]  # rows keep every other column (e.g. ground_truth for boxed_answer)

    ################
    # Generate and score, one model at a time
    ################
    device = "cuda" if torch.cuda.is_available() else "cpu"
    scorer_dtype = reward_model_dtype(rewards.reward_model_dtype, args.dtype, on_gpu=device == "cuda")
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
        results.append({
            "model_path": path,
            "summary": summarize(completions, seed=args.seed),
            "prompts": [{"prompt": p, "completions": cs} for p, cs in zip(prompts, completions)],
        })

    ################
    # Compare with the baseline, report
    ################
    def per_prompt(result):
        return [p["completions"] for p in result["prompts"]]

    comparison = [{"model_path": r["model_path"], "baseline": baseline,
                   **compare(per_prompt(r), per_prompt(results[0]), seed=args.seed)} for r in results[1:]]
    report = {
        "config": {**vars(args), "prompt_rows": row_numbers, "versions": versions()},
        "models": results,
        "comparison": comparison,
    }
    Path(args.output_file).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output_file).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(format_table(results, comparison))
    print(f"Wrote {args.output_file}")


@exit_on_user_error
def cli(args=None):
    main(*parse_args((EvalArguments, RewardArguments), args, __doc__))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
