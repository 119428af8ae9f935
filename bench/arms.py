"""One quickstart stage with other settings beside it, compared fairly: each arm trains from the base at the
quickstart's settings plus its own flags, then one evaluation compares the base and every arm (the quickstart's
evaluation settings).

    python bench/arms.py --task math --stage grpo --seed 5 --budget_s 600 --arm none= \
        --arm dynamic_sampling="--use_dynamic_sampling"
    python bench/arms.py --task math --stage ppo --seed 42 --arm today= \
        --arm warmup="--lam 0.95 --value_head_init random --whiten_advantages true --critic_warmup 2 --value_lam 1.0"
    python bench/arms.py --report bench_output/arms_math_grpo_seed*     # the arms against the first, over seeds

`--budget_s S`: every arm gets the same S seconds of wall-clock, counted from its training process's start. Each run
keeps every checkpoint (one per held-out evaluation, `--save_steps`), is stopped at S as Ctrl-C stops it, and is
evaluated at its last checkpoint whose save finished within S (its `trainer_state.json`, written last, against the
run's start), or with `--end_on_best_checkpoint` (the quickstart's PPO) at the best checkpoint by the held-out
evaluation up to that one, where it would have ended; a run that finishes its steps within S is evaluated at its
final model. Without it each arm runs its steps. Every arm evaluates held-out prompts while it trains (the
quickstart's `grpo_eval` / `ppo_eval`), so each has a curve: `python plot_training_progress.py --log_dir
<output_dir>/<arm> ...`.
Arms run in the order given for an even seed and reversed for an odd one (the machine warms, other jobs come and go).
Each arm's order, time, evaluated step, generated completion tokens up to it (rlhf.evaluation.metrics.generated_tokens:
counted for PPO, estimated for GRPO), peak memory and the evaluation's figures go to `arms.json` in `--output_dir`.
The reward-model task trains its reward model once, as the quickstart does, into `--output_dir`.

`--report DIR ...` (arms folders, one seed each): per seed, each arm's evaluated metric (math: verifier accuracy;
reward-model task: win rate against the base), and for each arm against the first, the mean over seeds of the paired
difference with a 95% interval (Student's t, n - 1 degrees of freedom over the n seeds; none under 2 seeds).
"""

import argparse
import json
import math
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import quickstart  # noqa: E402  (the quickstart's settings are the arms' starting point)
from rlhf.bundled import MATH_TEST, MATH_TRAIN, MATH_VALIDATION, PREFERENCES, PREFERENCES_VALIDATION  # noqa: E402
from rlhf.evaluation.metrics import (  # noqa: E402
    at_step,
    completions_per_step,
    generated_tokens,
    group_size,
    series_of_log_history,
)
from rlhf.lifecycle.checkpoints import CHECKPOINT_RE, is_complete, last_checkpoint  # noqa: E402
from rlhf.lifecycle.manifest import read_manifest  # noqa: E402

KEEP_ALL = ["--save_total_limit", "none"]  # every checkpoint: the budget picks one after the run


def run(command, budget_s=None):
    """Run a script; at `budget_s` seconds after its start, stop it as Ctrl-C does. Returns (start time, seconds,
    whether it was stopped)."""
    print("$", shlex.join(map(str, command)), flush=True)
    started = time.time()
    process = subprocess.Popen([sys.executable, *map(str, command)], cwd=ROOT)
    stopped = False
    try:
        process.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        stopped = True
        process.wait()
    seconds = time.time() - started
    if process.returncode not in (0, 130):
        sys.exit(f"error: {command[0]} failed (exit code {process.returncode}); see its output above")
    return started, seconds, stopped


def arm_order(arms, seed):
    """The arms in the order they run: as given for an even seed, reversed for an odd one."""
    return list(arms) if seed % 2 == 0 else list(reversed(arms))


def within_budget(folder, started, budget_s, stopped, best=False):
    """(The model to evaluate, seconds from the run's start to its save): the final model of a run that finished on
    its own (not `stopped`; seconds None), else the last complete checkpoint whose `trainer_state.json` (written
    last) was saved within `budget_s` of `started` (a time.time()); (None, None) where none was. `best` (a run with
    `--end_on_best_checkpoint`, stopped): the best checkpoint by the held-out evaluation as that last checkpoint's
    state names it (`best_model_checkpoint`: the best of those evaluated up to it), what the run would have ended on
    had it ended there."""
    folder = Path(folder)
    final = (folder / "config.json").exists() or (folder / "adapter_config.json").exists()
    if final and not stopped:
        return folder, None
    saved = {}
    for child in folder.iterdir():
        if CHECKPOINT_RE.match(child.name) and child.is_dir() and is_complete(child):
            seconds = (child / "trainer_state.json").stat().st_mtime - started
            if budget_s is None or seconds <= budget_s:
                saved[int(child.name.split("-")[1])] = seconds, child
    if not saved:
        return None, None
    seconds, checkpoint = saved[max(saved)]
    if best:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        named = state.get("best_model_checkpoint")
        match = CHECKPOINT_RE.match(Path(named).name) if named else None
        step = int(match.group(1)) if match else None
        if step in saved:  # the best's own save finished within the budget too: it was saved earlier
            seconds, checkpoint = saved[step]
    return checkpoint, seconds


def tokens_up_to(folder, model):
    """(Step, generated completion tokens up to it, "exact" / "estimate") of the evaluated `model` of the run in
    `folder`, from the log_history of its checkpoint (the final model: of the newest checkpoint)."""
    checkpoint = model if CHECKPOINT_RE.match(Path(model).name) else last_checkpoint(folder)
    if checkpoint is None:
        return None, None, None
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    manifest = read_manifest(folder)
    tokens, tokens_from = generated_tokens(series_of_log_history(state["log_history"]),
                                           completions_per_step(manifest), group_size(manifest))
    return state["global_step"], at_step(tokens, state["global_step"]), tokens_from


def t_quantile(degrees, level=0.95):
    """Student's t quantile with P(|T| < t) = `level`, for whole `degrees` of freedom: bisection on the exact CDF.

    P(|T| < t) with theta = atan(t / sqrt(nu)), c = cos(theta): for odd nu, (2 / pi) (theta + sin(theta) c
    (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ... up to c^(nu-3))); for even nu, sin(theta) (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ...
    up to c^(nu-2)) (Abramowitz & Stegun 26.7.3-4).
    """
    odd = degrees % 2

    def inside(t):
        theta = math.atan(t / math.sqrt(degrees))
        c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
        for j in range(1, degrees // 2):  # odd nu: the terms up to c^(nu-3), even nu: up to c^(nu-2)
            term *= c2 * (2 * j - 1 + odd) / (2 * j + odd)
            total += term
        if odd:
            return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if degrees > 1 else 0))
        return math.sin(theta) * total

    low, high = 0.0, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if inside(middle) < level else (low, middle)
    return (low + high) / 2


def paired(differences):
    """{n, mean, low, high}: the mean of per-seed paired differences and its 95% Student t interval over seeds
    (low, high None under 2 seeds)."""
    n, mean = len(differences), statistics.fmean(differences)
    if n < 2:
        return {"n": n, "mean": mean, "low": None, "high": None}
    half = t_quantile(n - 1) * statistics.stdev(differences) / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half}


def arm_metric(result, name):
    """The evaluated metric of one arm of an arms.json: the verifier accuracy (math), else the win rate against the
    base."""
    model, evaluation = result["arms"][name]["model"], result["evaluation"]
    if result["task"] == "math":
        return next(m["summary"]["verifier_accuracy"] for m in evaluation["models"] if m["model_path"] == model)
    return next(c["win_rate"] for c in evaluation["comparison"] if c["model_path"] == model)


def report(folders, output):
    """Per seed, each arm's metric; each arm against the first, paired over seeds. Printed and written to `output`."""
    missing = [str(folder) for folder in folders if not (Path(folder) / "arms.json").is_file()]
    if missing:
        sys.exit(f"error: no arms.json in {', '.join(missing)}; pass folders that bench/arms.py finished")
    results = [json.loads((Path(folder) / "arms.json").read_text(encoding="utf-8")) for folder in folders]
    names = list(results[0]["arms"])  # the first arm of the first folder is the reference
    other = [str(folder) for folder, result in zip(folders, results) if sorted(result["arms"]) != sorted(names)]
    if other:
        sys.exit(f"error: {', '.join(other)} ran other arms than {folders[0]} ({', '.join(names)}); compare one "
                 "set of arms at a time")
    metric = "verifier accuracy" if results[0]["task"] == "math" else "win rate vs the base"
    lines, seeds = [f"{metric} per seed (arm: value, step, seconds to its checkpoint, generated tokens)"], []
    for result in results:
        figures = {name: arm_metric(result, name) for name in names}
        seeds.append({"seed": result["seed"], "order": result.get("order", names), "figures": figures})
        lines.append(f"seed {result['seed']}: " + "; ".join(
            f"{name} {figures[name]:.3f} (step {arm.get('step')}, {arm.get('saved_s')} s, "
            f"{arm.get('generated_tokens')} tokens)" for name, arm in result["arms"].items()))
    against = {}
    for name in names[1:]:
        against[name] = paired([seed["figures"][name] - seed["figures"][names[0]] for seed in seeds])
        a = against[name]
        interval = f"[{a['low']:+.3f}, {a['high']:+.3f}]" if a["low"] is not None else "(no interval under 2 seeds)"
        lines.append(f"{name} - {names[0]}: {a['mean']:+.3f} {interval}, n = {a['n']} seeds")
    print("\n".join(lines))
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps({"metric": metric, "reference": names[0], "seeds": seeds,
                                        "against_reference": against}, indent=2) + "\n")
    print(f"Wrote {output}")


def stage_commands(args, out):
    """(The policy's starting model, the training flags every arm shares, the evaluation's data flags)."""
    if args.tiny:
        from rlhf import tiny

        base = out / "tiny" / "policy"
        if not (base / "config.json").exists():
            tiny.build_all(out / "tiny")
        settings = quickstart.TINY
    else:
        from rlhf.bundled import ensure_bundled

        base, settings = ensure_bundled(install=True), quickstart.SETTINGS[(args.task, "cpu")]
    seed = ["--seed", args.seed]
    held_out = [*settings[f"{args.stage}_eval"], *KEEP_ALL]
    if args.task == "math":
        rewards = [*quickstart.MATH_REWARDS, "--system_prompt", quickstart.MATH_SYSTEM_PROMPT]
        common = ["--model_name_or_path", base, "--dataset_name", MATH_TRAIN, "--max_samples", 0, *rewards, *seed,
                  *held_out, "--eval_dataset_name", MATH_VALIDATION]  # as the quickstart: apart from the test set
        data = ["--dataset_name", MATH_TEST, "--train_samples", 0, *rewards]
    else:
        reward = out / "reward_model"
        rm_common = ["--model_name_or_path", base, "--dataset_name", PREFERENCES, "--max_samples",
                     quickstart.PREFERENCE_TRAIN_ROWS, *seed]
        if not (reward / "config.json").exists():
            run(["train_reward_model.py", *rm_common, "--output_dir", reward, *settings["reward"]])
        common = [*rm_common, "--reward_model_name_or_path", reward, *held_out, "--eval_dataset_name",
                  PREFERENCES_VALIDATION]
        data = ["--reward_model_name_or_path", reward, "--dataset_name", PREFERENCES, "--train_samples",
                quickstart.PREFERENCE_TRAIN_ROWS]
    return base, settings, common, data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("rm", "math"), default="math")
    parser.add_argument("--stage", choices=("grpo", "ppo"))
    parser.add_argument("--seed", type=int)
    parser.add_argument("--arm", action="append", help="NAME=FLAGS (FLAGS added to the stage's)")
    parser.add_argument("--budget_s", type=float, help="wall-clock seconds each arm's training process gets")
    parser.add_argument("--output_dir", help="default: bench_output/arms_<task>_<stage>_seed<seed>; with --report, "
                        "where arms_report.json goes (default bench_output)")
    parser.add_argument("--tiny", action="store_true", help="tiny random models and the quickstart's tiny settings")
    parser.add_argument("--report", nargs="+", metavar="DIR", help="compare the arms of these arms folders")
    parser.add_argument("--equal_time", action="store_true", help=argparse.SUPPRESS)  # replaced: said below
    args = parser.parse_args(argv)
    if args.equal_time:
        parser.error("--equal_time gave later arms the first arm's time plus the rest of their step; pass "
                     "--budget_s SECONDS instead (one budget for every arm, fixed before the runs)")
    if args.report:
        return report(args.report, Path(args.output_dir or "bench_output") / "arms_report.json")
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error(f"--budget_s must be > 0 seconds, got {args.budget_s}")
    if args.stage is None or args.seed is None or not args.arm:
        parser.error("--stage, --seed and at least one --arm are needed (or --report DIR ...)")
    out = Path(args.output_dir or f"bench_output/arms_{args.task}_{args.stage}_seed{args.seed}").resolve()
    names = [spec.partition("=")[0] for spec in args.arm]
    taken = [name for name in names if (out / name).exists()]
    if taken or len(set(names)) < len(names):
        sys.exit(f"error: arm folders must be new and arm names distinct: {', '.join(taken or names)} in {out}; "
                 "remove them or choose another --output_dir")
    out.mkdir(parents=True, exist_ok=True)
    base, settings, common, data = stage_commands(args, out)
    script = {"grpo": "train_grpo.py", "ppo": "train_ppo.py"}[args.stage]
    order = arm_order(args.arm, args.seed)
    arms = {}
    for spec in order:
        name, _, flags = spec.partition("=")
        folder = out / name
        command = [script, *common, "--output_dir", folder, *settings[args.stage], *shlex.split(flags)]
        started, seconds, stopped = run(command, budget_s=args.budget_s)
        ends_on_best = "--end_on_best_checkpoint" in command  # a stopped run is judged as it would have ended
        model, saved_s = within_budget(folder, started, args.budget_s, stopped, best=ends_on_best)
        if model is None:
            sys.exit(f"error: arm {name} saved no checkpoint within --budget_s {args.budget_s}; raise it, or pass "
                     "a smaller --save_steps in the arm's flags")
        run_report = json.loads((folder / "run_report.json").read_text()) if (folder / "run_report.json").exists() \
            else {}
        taken_from = (run_report.get("final_model") or {}).get("checkpoint") if model == folder else None
        # A final model taken from the best checkpoint counts that checkpoint's step and tokens
        step, tokens, tokens_from = tokens_up_to(folder, taken_from or model)
        arms[name] = {"flags": flags, "seconds": round(seconds, 1), "stopped": stopped, "model": str(model),
                      "step": step, "saved_s": round(seconds if saved_s is None else saved_s, 1),
                      "generated_tokens": tokens, "generated_tokens_from": tokens_from,
                      "peak_memory_gb": run_report.get("peak_memory", {}).get("gb")}
    evaluation = out / "evaluation.json"
    run(["evaluate_generations.py", "--model_path", base, *[a["model"] for a in arms.values()], *data,
         "--seed", args.seed, "--output_file", evaluation, *settings["evaluate"]])
    arms = {name: arms[name] for name in names}  # in the order given, whatever order they ran in
    result = {"task": args.task, "stage": args.stage, "seed": args.seed, "budget_s": args.budget_s,
              "order": [spec.partition("=")[0] for spec in order], "arms": arms,
              "evaluation": json.loads(evaluation.read_text())}
    (out / "arms.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, arm in arms.items():
        prune(out / name, Path(arm["model"]))
    print(json.dumps(arms, indent=2))


def prune(folder, evaluated):
    """Once evaluated, an arm keeps its logs, its final model and the evaluated checkpoint's weights: its other
    checkpoints and every optimizer state go (SmolLM2's GRPO checkpoint is 1.6 GB, most of it AdamW's state; an arm
    saves one every --save_steps)."""
    import shutil

    for checkpoint in Path(folder).glob("checkpoint-*"):
        if checkpoint != evaluated:
            shutil.rmtree(checkpoint)
            continue
        for state in [*checkpoint.rglob("optimizer*.pt"), *checkpoint.rglob("global_step*")]:
            shutil.rmtree(state) if state.is_dir() else state.unlink()


if __name__ == "__main__":
    main()
