"""The whole pipeline on the real SmolLM2-135M-Instruct, offline, on a CPU, in about 13 minutes.

    python quickstart.py            # bundled SmolLM2 + the shipped preference data (data/preferences.jsonl)
    python quickstart.py --tiny     # the same pipeline on tiny random models, in about a minute

Stages: reward model -> GRPO -> PPO -> evaluation of base vs GRPO vs PPO on held-out prompts -> plots.
Each stage runs the package's own script as a subprocess; the command is printed first, so you can re-run or
change any stage by hand. The first 320 of the 400 shipped pairs train; the last 80 are held out for
evaluation. Re-running continues: finished stages are skipped, an interrupted one resumes.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "preferences.jsonl"
TRAIN_ROWS = 320  # the rest of the 400 shipped rows are held out for evaluation

# Settings chosen so that the real run fits in ~15 minutes on 2 CPU cores and GRPO still learns (see README).
REAL = {
    "reward": ["--max_steps", "12", "--learning_rate", "3e-5", "--per_device_train_batch_size", "8",
               "--eval_samples", "40", "--logging_steps", "2", "--no_gradient_checkpointing"],
    "grpo": ["--max_steps", "16", "--learning_rate", "3e-5", "--num_generations", "4", "--prompts_per_step", "2",
             "--per_device_train_batch_size", "8", "--max_completion_length", "64", "--beta", "0.04",
             "--save_steps", "4", "--no_gradient_checkpointing"],
    "ppo": ["--total_episodes", "16", "--learning_rate", "1e-5", "--per_device_train_batch_size", "4",
            "--num_ppo_epochs", "2", "--max_completion_length", "64", "--save_steps", "2",
            "--no_gradient_checkpointing"],
    "evaluate": ["--num_prompts", "20", "--num_completions", "4", "--max_new_tokens", "64", "--batch_size", "16"],
}
TINY = {
    "reward": ["--max_steps", "4", "--per_device_train_batch_size", "4", "--eval_samples", "20", "--logging_steps", "1"],
    "grpo": ["--max_steps", "4", "--num_generations", "2", "--prompts_per_step", "2", "--per_device_train_batch_size",
             "4", "--max_completion_length", "12", "--save_steps", "2"],
    "ppo": ["--total_episodes", "8", "--per_device_train_batch_size", "2", "--num_ppo_epochs", "1",
            "--max_completion_length", "12", "--save_steps", "2"],
    "evaluate": ["--num_prompts", "6", "--num_completions", "2", "--max_new_tokens", "12"],
}


def run_stage(name, command, timings):
    print(f"\n=== {name} ===\n$ {' '.join(str(part) for part in command)}", flush=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *map(str, command)], cwd=ROOT)
    timings[name] = round(time.perf_counter() - start, 1)
    if result.returncode != 0:
        print(f"error: the {name} stage failed (exit code {result.returncode}); see its output above. Re-running "
              "`python quickstart.py` resumes from where it stopped.", file=sys.stderr)
        sys.exit(result.returncode)


def finished(output_dir):
    from rlhf.run import read_manifest

    return bool(read_manifest(output_dir).get("finished_at"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", "--output-dir", default="./quickstart_output", help="where everything goes")
    parser.add_argument("--tiny", action="store_true", help="tiny random models instead of SmolLM2 (~1 minute)")
    args = parser.parse_args()
    out = Path(args.output_dir).resolve()
    settings = TINY if args.tiny else REAL
    timings, begin = {}, time.perf_counter()

    print("=== models ===", flush=True)
    start = time.perf_counter()
    if args.tiny:
        from rlhf import tiny

        base = out / "tiny" / "policy"
        if not (base / "config.json").exists():
            tiny.build_all(out / "tiny")
    else:
        from rlhf.bundled import BUNDLED_NAME, ensure_bundled

        base = ensure_bundled(ROOT / BUNDLED_NAME)
    timings["models"] = round(time.perf_counter() - start, 1)
    print(f"policy and reward models start from {base}")

    reward, grpo, ppo = out / "reward_model", out / "grpo", out / "ppo"
    common = ["--model_name_or_path", base, "--dataset_name", DATA, "--max_samples", TRAIN_ROWS]
    stages = [
        ("reward model", reward, ["train_reward_model.py", *common, "--output_dir", reward, *settings["reward"]]),
        ("GRPO", grpo, ["train_grpo.py", *common, "--reward_model_path", reward, "--output_dir", grpo,
                        *settings["grpo"]]),
        ("PPO", ppo, ["train_ppo.py", *common, "--reward_model_path", reward, "--output_dir", ppo, *settings["ppo"]]),
    ]
    for name, output_dir, command in stages:
        if finished(output_dir):
            print(f"\n=== {name} === already done in {output_dir}")
        else:
            run_stage(name, command, timings)

    evaluation = out / "evaluation.json"
    run_stage("evaluation", ["evaluate_generations.py", "--model_path", base, grpo, ppo, "--reward_model_path", reward,
                             "--dataset_name", DATA, "--train_samples", TRAIN_ROWS, "--output_file", evaluation,
                             *settings["evaluate"]], timings)
    run_stage("plots", ["plot_training_progress.py", "--log_dir", grpo, ppo, "--output", out / "training_progress.png",
                        "--csv", out / "training_metrics.csv"], timings)
    timings["total"] = round(time.perf_counter() - begin, 1)
    summarize(out, reward, evaluation, timings)


def summarize(out, reward, evaluation, timings):
    accuracy = json.loads((reward / "reward_accuracy.json").read_text())
    report = json.loads(evaluation.read_text())
    lines = ["", "=== summary ===",
             f"reward model: held-out pairwise accuracy {accuracy['accuracy']:.2f} on {accuracy['num_pairs']} pairs"]
    for model in report["models"]:
        s = model["summary"]
        lines.append(f"{Path(model['model_path']).name:>24}: mean reward {s['mean_reward']:+.3f} "
                     f"(std {s['std_reward']:.3f}), EOS rate {s['eos_rate']:.0%}, {s['mean_length']:.0f} tokens")
    for c in report["comparison"]:
        lines.append(f"{Path(c['model_path']).name:>24} vs base: win rate {c['win_rate']:.2f} "
                     f"(95% CI {c['ci_low']:.2f}-{c['ci_high']:.2f}), mean reward {c['mean_reward_delta']:+.3f}")
    lines.append("stage times (s): " + ", ".join(f"{name} {seconds}" for name, seconds in timings.items()))
    lines.append(f"files: {reward} (reward model), {out / 'grpo'}, {out / 'ppo'}, {evaluation}, "
                 f"{out / 'training_progress.png'}, {out / 'training_metrics.csv'}")
    print("\n".join(lines))
    (out / "quickstart_summary.json").write_text(json.dumps(
        {"reward_accuracy": accuracy, "comparison": report["comparison"], "timings_s": timings}, indent=2) + "\n")


if __name__ == "__main__":
    main()
