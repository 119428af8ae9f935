r"""Sample completions from one or more models, score them with the reward model, rank and compare them.

Usage:

    python evaluate_generations.py --model-path ./ppo_training_output
    python evaluate_generations.py --model_path HuggingFaceTB/smollm2-135M-SFT-Only ./grpo_training_output \
        ./ppo_training_output --num_prompts 50 --output_file comparison.json

    python evaluate_generations.py --model_path bundled/SmolLM2-135M-Instruct ./grpo_math \
        --reward_funcs boxed_answer boxed_format --reward_weights 1 0 --dataset_name data/math_test.jsonl \
        --train_samples 0 --num_prompts 100

The first model is the baseline: every other model gets the same prompts and sampling seed, and its win rate
against the baseline under the reward model (ties count half) is reported with a 95% bootstrap interval; with
`--judge_model_name_or_path`, its win rate under that second reward model too (a judge the policies never trained
against), and a line where the two disagree. With the math verifier (`boxed_answer`), each model's format rate and
verifier accuracy (95% interval) and each model's accuracy gain over the baseline (paired 95% interval) are reported
too.
Prompts are drawn from the rows after the first `--train_samples` (the rows training used), so they are
held out by default. The JSON records the prompts' dataset rows and what scored them, and is saved after each
model: Ctrl-C (or SIGTERM) keeps the models already finished, marked `"complete": false`, and exits with 130.
See docs/evaluation.md for the JSON layout.
"""

import functools
import logging
import sys
from pathlib import Path

from rlhf import preflight
from rlhf.checks import prompt_room
from rlhf.cli import UserError, exit_on_user_error, parse_args
from rlhf.data import load_rows
from rlhf.errors import INTERRUPTED_EXIT_CODE, NON_FINITE_EXIT_CODE, NonFiniteError
from rlhf.evaluation.generation import draw_prompts, generate, held_out_prompts, judge, score
from rlhf.evaluation.report import (
    ReportNotWritten,
    format_table,
    interrupted_report,
    save_report,
    scoring_record,
)
from rlhf.evaluation.stats import compare, summarize
from rlhf.lifecycle.manifest import LIBRARIES, hidden, read_manifest, versions
from rlhf.lifecycle.signals import Interrupted, StopOnSignal
from rlhf.models import load_causal_lm, load_tokenizer, reward_model_dtype, sampling_note, stop_token_ids
from rlhf.processes import on_gpu
from rlhf.rewards.functions import check_reward_columns, load_reward_funcs
from rlhf.rewards.reward_model import reward_model_scorer


def main(args, rewards):
    preflight.evaluation(args, rewards)  # every check before any model loads

    # The report fills in as models finish and is saved after each: Ctrl-C, SIGTERM or an error keeps them.
    report = {"complete": False, "config": {}, "models": [], "comparison": []}
    finished, total = report["models"], len(args.model_path)

    def kept():
        return f"{len(finished)} of {total} models finished: saved in {args.output_file}, marked \"complete\": false"

    try:
        with StopOnSignal() as stop:
            evaluate(args, rewards, report, stop)
    except Interrupted as interrupted:
        if not finished:
            print(f"\n{interrupted.name} received before the first model finished: nothing saved.")
        else:
            report["interrupted_by"] = interrupted.name
            save_report(args.output_file, report)
            print(f"\n{interrupted.name} received: partial results ({len(finished)} of {total} models) saved to "
                  f"{args.output_file}, marked \"complete\": false; re-run the same command for all of them.")
        sys.exit(INTERRUPTED_EXIT_CODE)
    except UserError as error:
        if finished and not isinstance(error, ReportNotWritten):  # e.g. a reward function raising on a later model
            raise UserError(f"{error} ({kept()})") from None
        raise
    except NonFiniteError as error:  # a reward that is NaN or infinite: the scorer is broken, its mean meaningless
        print(f"\nerror: {error}{f' ({kept()})' if finished else ''}; check the model or function it names",
              file=sys.stderr)
        sys.exit(NON_FINITE_EXIT_CODE)
    print(format_table(report["models"], report["comparison"]))
    print(f"Wrote {args.output_file}: {report['config']['num_prompts']} prompts x {args.num_completions} "
          "completions per model.")


def evaluate(args, rewards, report, stop):
    from tqdm.auto import tqdm

    ################
    # Held-out prompts, the same for every model
    ################
    baseline = args.model_path[0]
    tokenizer = load_tokenizer(baseline, args.trust_remote_code)
    for path in args.model_path[1:]:  # a model that cannot load fails now, not after the models before it ran
        load_tokenizer(path, args.trust_remote_code)
    dataset = load_rows(args.dataset_name, args.dataset_train_split)
    check_reward_columns(rewards.reward_funcs, args.dataset_name, dataset.column_names)
    if len(dataset) <= args.train_samples and "train_samples" not in vars(args).get("_given", ()):
        # the default (training's default --max_samples) cannot hold any row out of a small data set: all are drawn
        print(f"note: --train_samples {args.train_samples} -> 0 ({args.dataset_name} has {len(dataset)} rows, all "
              "within the default; prompts are drawn from all of them, which a run trained on this data set has "
              "seen: pass the --max_samples it trained with as --train_samples to hold its prompts out)", flush=True)
        args.train_samples = 0
    if len(dataset) <= args.train_samples:
        raise UserError(
            f"dataset {args.dataset_name} has {len(dataset)} rows, all within the first --train_samples "
            f"{args.train_samples} that training used; pass the --max_samples you trained with as --train_samples"
        )
    prompts, numbers, dropped = held_out_prompts(dataset, tokenizer, args.train_samples, args.max_prompt_length,
                                                 args.system_prompt,
                                                 prompt_room(args.model_path, "--max_new_tokens", args.max_new_tokens,
                                                             args.trust_remote_code),
                                                 args.append_system_prompt)
    rows, row_numbers = draw_prompts(prompts, numbers, args.num_prompts, args.seed)
    prompts = [row["prompt"] for row in rows]  # rows keep every other column (e.g. ground_truth for boxed_answer)
    where = f"rows after --train_samples {args.train_samples}" + (
        f"; {dropped} dropped as longer than --max_prompt_length {args.max_prompt_length}" if dropped else "")
    if args.num_prompts > len(prompts):
        print(f"Evaluating all {len(prompts)} held-out prompts, not --num_prompts {args.num_prompts} ({where}).")
    else:
        print(f"Evaluating {len(prompts)} prompts drawn from {len(numbers)} held-out ones ({where}).")

    ################
    # Generate and score, one model at a time; the report is saved after each
    ################
    device = "cuda" if on_gpu() else "cpu"
    scorer_dtype = reward_model_dtype(rewards.reward_model_dtype, args.dtype, on_gpu=device == "cuda")
    weights = args.reward_weights or [1.0] * len(rewards.reward_funcs)
    load_scorer = functools.partial(reward_model_scorer, rewards.reward_model_name_or_path, scorer_dtype,
                                    args.trust_remote_code, device, args.batch_size)
    funcs = load_reward_funcs(rewards.reward_funcs, load_scorer, rewards.boxed_rewards)
    judge_scorer = None if args.judge_model_name_or_path is None else reward_model_scorer(
        args.judge_model_name_or_path, scorer_dtype, args.trust_remote_code, device, args.batch_size, "judge")
    libraries = (*LIBRARIES, "math-verify") if "boxed_answer" in rewards.reward_funcs else LIBRARIES
    flags = {name: value for name, value in vars(args).items() if not name.startswith("_")}  # not the parser's
    report["config"] = {**flags, "num_prompts": len(prompts), "num_prompts_requested": args.num_prompts,
                        "prompt_rows": row_numbers,
                        "scoring": scoring_record(rewards, weights, scorer_dtype, args.judge_model_name_or_path),
                        "versions": versions(libraries)}
    results = report["models"]
    earlier = interrupted_report(args.output_file, report["config"])
    done = [model["model_path"] for model in earlier["models"]] if earlier else []
    if done and done == args.model_path[: len(done)]:  # kept as they were: each model's sampling is seeded alone
        results += earlier["models"]
        report["comparison"] += earlier["comparison"]
        print(f"note: {len(done)} of {len(args.model_path)} models already evaluated in {args.output_file} by an "
              "interrupted run with these settings: kept, not generated again")
    for path in args.model_path[len(results):]:
        model, model_tokenizer = load_causal_lm(path, args.dtype, args.trust_remote_code)
        model.to(device)
        stops, stops_note = run_stops(path, model, model_tokenizer)
        notes = (stops_note, sampling_note("the evaluation", path, model.generation_config,
                                           {"temperature": args.temperature, "top_p": args.top_p}))
        for note in filter(None, notes):
            print(note, flush=True)
        with tqdm(total=len(prompts) * args.num_completions, desc=f"Generating with {path}") as progress:
            completions = generate(model, model_tokenizer, prompts, args.num_completions, args.max_new_tokens,
                                   args.temperature, args.top_p, args.batch_size, args.seed, progress, stop, stops)
        del model
        score(funcs, weights, rows, completions)
        if judge_scorer is not None:
            judge(judge_scorer, rows, completions)
        results.append({
            "model_path": path,
            "summary": summarize(completions, seed=args.seed),
            "prompts": [{"prompt": p, "completions": cs} for p, cs in zip(prompts, completions)],
        })
        if len(results) > 1:  # against the baseline, on the same prompts and sampling seed
            report["comparison"].append({"model_path": path, "baseline": baseline,
                                         **compare(per_prompt(results[-1]), per_prompt(results[0]), seed=args.seed)})
        report["complete"] = len(results) == len(args.model_path)
        save_report(args.output_file, report)
        stop.check()


def run_stops(path, model, tokenizer):
    """The ids where the completions of the model in `path` end, as its training ended them: PPO's `--stop_token none
    --stop_token_id X` (read from the run's run_manifest.json, which an adapter folder has too), else the tokenizer's
    EOS and every end the model's generation config declares; and the note line that says a run's own, or None."""
    trained = read_manifest(path).get("config", {}).get("PPOTrainingConfig", {}) if Path(path).is_dir() else {}
    stop_token = trained.get("stop_token", "eos")
    if hidden("stop_token", stop_token):  # not recorded: --stop_token_id is given only with --stop_token none
        stop_token = "eos" if trained.get("stop_token_id") is None else None
    if stop_token == "eos":
        return stop_token_ids(tokenizer, model), None
    stops = stop_token_ids(tokenizer, model, None, trained.get("stop_token_id"))
    ending = f"--stop_token_id {stops[0]} alone" if stops else "no token (to the length limit)"
    return stops, (f"note: {path} was trained with its completions ending at {ending} (its run_manifest.json): "
                   "evaluated so")


def per_prompt(result):
    return [p["completions"] for p in result["prompts"]]


def configs():
    """The config classes, imported after the flag table is read (`rlhf.cli.parse_args`): config.py loads TRL."""
    from config import EvalArguments, RewardArguments

    return EvalArguments, RewardArguments


@exit_on_user_error
def cli(args=None):
    main(*parse_args(configs, args, __doc__, preflight.quick_evaluation))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
