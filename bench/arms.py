"""One quickstart stage with other settings beside it: each arm trains from the base at the quickstart's settings plus
its own flags, then one evaluation compares the base and every arm (the quickstart's evaluation settings).

    python bench/arms.py --task math --stage grpo --seed 5 --arm none= \
        --arm dynamic_sampling="--use_dynamic_sampling" --equal_time
    python bench/arms.py --task math --stage ppo --seed 42 --arm today= \
        --arm warmup="--lam 0.95 --value_head_init random --whiten_advantages true --critic_warmup 2 --value_lam 1.0"

`--equal_time`: the first arm runs its steps; every later arm runs until it has trained as long (wall-clock), then
is stopped as Ctrl-C stops a run (it finishes its step and saves a checkpoint), and that checkpoint is evaluated.
The reward-model task trains its reward model once, as the quickstart does, into `--output_dir`. Each arm's time, its
process's peak memory and the evaluation's figures go to `arms.json` there and are printed.
"""

import argparse
import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import quickstart  # noqa: E402  (the quickstart's settings are the arms' starting point)
from rlhf.bundled import MATH_TEST, MATH_TRAIN, PREFERENCES, ensure_bundled  # noqa: E402
from rlhf.lifecycle.checkpoints import last_checkpoint  # noqa: E402


def run(command, seconds=None):
    """Run a script; after `seconds`, stop it as Ctrl-C does (it saves after its step). Returns wall-clock seconds."""
    print("$", shlex.join(map(str, command)), flush=True)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, *map(str, command)], cwd=ROOT)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        process.wait()
    elapsed = time.perf_counter() - start
    if process.returncode not in (0, 130):
        sys.exit(f"error: {command[0]} failed (exit code {process.returncode}); see its output above")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("rm", "math"), default="math")
    parser.add_argument("--stage", choices=("grpo", "ppo"), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--arm", action="append", required=True, help="NAME=FLAGS (FLAGS added to the stage's)")
    parser.add_argument("--equal_time", action="store_true", help="later arms train as long as the first")
    parser.add_argument("--output_dir", help="default: bench_output/arms_<task>_<stage>_seed<seed>")
    args = parser.parse_args()
    out = Path(args.output_dir or f"bench_output/arms_{args.task}_{args.stage}_seed{args.seed}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = ensure_bundled(install=True)
    settings = quickstart.SETTINGS[(args.task, "cpu")]
    seed = ["--seed", args.seed]
    if args.task == "math":
        rewards = [*quickstart.MATH_REWARDS, "--system_prompt", quickstart.MATH_SYSTEM_PROMPT]
        common = ["--model_name_or_path", base, "--dataset_name", MATH_TRAIN, "--max_samples", 0, *rewards, *seed,
                  *quickstart.ONE_CHECKPOINT]
        data = ["--dataset_name", MATH_TEST, "--train_samples", 0, *rewards]
    else:
        reward = out / "reward_model"
        rm_common = ["--model_name_or_path", base, "--dataset_name", PREFERENCES, "--max_samples",
                     quickstart.PREFERENCE_TRAIN_ROWS, *seed]
        if not (reward / "config.json").exists():
            run(["train_reward_model.py", *rm_common, "--output_dir", reward, *settings["reward"]])
        common = [*rm_common, "--reward_model_name_or_path", reward]
        data = ["--reward_model_name_or_path", reward, "--dataset_name", PREFERENCES, "--train_samples",
                quickstart.PREFERENCE_TRAIN_ROWS]
    script = {"grpo": "train_grpo.py", "ppo": "train_ppo.py"}[args.stage]
    arms, budget = {}, None
    for spec in args.arm:
        name, _, flags = spec.partition("=")
        folder = out / name
        elapsed = run([script, *common, "--output_dir", folder, *settings[args.stage], *shlex.split(flags)],
                      seconds=budget)
        if args.equal_time and budget is None:
            budget = elapsed
        model = folder if (folder / "config.json").exists() or (folder / "adapter_config.json").exists() \
            else last_checkpoint(folder)
        report = json.loads((folder / "run_report.json").read_text()) if (folder / "run_report.json").exists() else {}
        arms[name] = {"flags": flags, "seconds": round(elapsed, 1), "model": str(model),
                      "peak_memory_gb": report.get("peak_memory", {}).get("gb")}
    evaluation = out / "evaluation.json"
    run(["evaluate_generations.py", "--model_path", base, *[a["model"] for a in arms.values()], *data, *seed,
         "--output_file", evaluation, *settings["evaluate"]])
    result = {"task": args.task, "stage": args.stage, "seed": args.seed, "equal_time": args.equal_time,
              "arms": arms, "evaluation": json.loads(evaluation.read_text())}
    (out / "arms.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(arms, indent=2))


if __name__ == "__main__":
    main()
