"""What the benchmark prints and writes: the environment, progress, medians over repeats, ratios to `trl grpo`,
the table."""

import os
import platform
import shlex
import statistics
import subprocess
import time
from pathlib import Path

from bench import ROOT


def describe_environment(torch, cuda, args):
    """Device, versions and machine load: printed and written with the figures."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for package in ("transformers", "trl", "peft", "accelerate", "datasets", "vllm"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    if cuda:
        device = (f"{torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} "
                  f"GiB, driver {gpu_driver()}), {os.cpu_count()} CPU cores")
    else:
        device = f"CPU: {cpu_model()}, {os.cpu_count()} cores, {args.threads} threads per run"
    return {"device": device, "suite": args.suite, "versions": versions, "commit": commit(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "load_average_start": os.getloadavg() if hasattr(os, "getloadavg") else None}


def gpu_driver():
    """The NVIDIA driver's version, from nvidia-smi (None without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


def commit():
    """The commit measured (short hash, "+changes" where the tree differs from it); None where git cannot tell."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)

    try:
        head, status = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if status.stdout.strip() else "")


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown processor"


def print_header(environment, args):
    versions = ", ".join(f"{name} {value}" for name, value in environment["versions"].items() if value)
    load = environment["load_average_start"]
    print(f"benchmark{f' --suite {args.suite}' if args.suite else ''} on {environment['device']}\n{versions}\n"
          f"model {args.model}; GRPO {args.prompts_per_step} prompts x {args.num_generations} completions per "
          f"optimizer step, up to {args.max_completion_length} tokens; warm-up >= {args.warmup_steps} and measured >= "
          f"{args.steps} steps, in whole generation cycles; {args.repeats} repeat(s)"
          + (f"; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" if load else ""), flush=True)


def print_plans(plans, on_gpu, cuda):
    """A dry run: each run's command and step counts, as they would run (on a GPU for `on_gpu`)."""
    if on_gpu and not cuda:
        print("(no GPU here: the commands and step counts below are those of a CUDA GPU, for which the package "
              "resolves its defaults)")
    for plan in plans:
        skipped = f"; skipped here: {plan['skipped']}" if plan["skipped"] else ""
        steps = "PPO rollouts" if plan["command"][1].endswith("train_ppo.py") else "optimizer steps"
        print(f"\n{plan['run']}: {plan['about']}\n  {plan['warmup']} warm-up + {plan['measured']} measured "
              f"{steps}, {plan['steps_per_generation']} per generation of {plan['prompts_per_generation']} "
              f"prompts{skipped}\n  " + shlex.join(plan["command"]))


def format_progress(result):
    """One line per run: its time per step (a run for its memory alone has none), peak memory and wall time."""
    if result.get("skipped"):
        return f"{result['run']}: skipped: {result['skipped']}"
    if result.get("not_started"):
        return f"{result['run']}: not started: {result['not_started']}"
    if result.get("returncode") != 0 and not result.get("stopped"):
        why = result.get("error") or f"exit code {result.get('returncode')}"
        return f"{result['run']}: failed ({why})"
    timed = (f"{result['seconds_per_step']:.2f} s/step over {result['measured']} steps (cycles "
             f"{result['cycle_seconds']} s), {result['completion_tokens_per_s']:.1f} tok/s, "
             if "seconds_per_step" in result else "")
    stopped = ", stopped at its part's end" if result.get("stopped") else ""
    return f"{result['run']}: {timed}peak {_memory(result)}, wall {result['wall_s']:.0f} s{stopped}"


def _memory(result):
    if result.get("peak_cuda_reserved_gb"):
        return (f"{result['peak_cuda_allocated_gb']} GB allocated / {result['peak_cuda_reserved_gb']} GB reserved "
                "on the GPU")
    return f"{result['peak_rss_gb']} GB RSS"


def summarize(results, scoring, args, environment):
    """Medians over repeats, the ratios to `trl grpo`, one table; returns the JSON report."""
    by_run = {}
    for result in results:
        by_run.setdefault(result["run"], []).append(result)
    medians = {run: run_medians(rs) for run, rs in by_run.items()}
    print()
    for dtype, figures in scoring.items():
        print(f"reward model scoring ({dtype}): {figures['sequences_per_s']} sequences/s ({figures['tokens_per_s']} "
              f"tokens/s), {figures['sequences']} sequences of ~{figures['mean_tokens']} tokens in batches of "
              f"{figures['batch_size']}")
    ratios = {}
    for ours, theirs, what in PAIRS:
        if medians.get(ours, {}).get("ok") and medians.get(theirs, {}).get("ok"):
            per_token = medians[ours]["seconds_per_token"] / medians[theirs]["seconds_per_token"]
            pairs = pair_ratios(by_run[ours], by_run[theirs])
            ratios[f"{ours}/{theirs}"] = {"seconds_per_token": round(per_token, 3), "settings": what,
                                          "per_pair": pairs}
            spread = (f"; per ABBA pair {', '.join(f'{r:.3f}' for r in pairs)} (spread {max(pairs) - min(pairs):.3f})"
                      if len(pairs) > 1 else "")
            print(f"{ours} / {theirs} ({what}), seconds per generated token: {per_token:.3f}{spread} "
                  f"(<= 1.0: the first costs no more per token)")
    print_table(medians, args, environment)
    return {**environment, "settings": dict(vars(args)), "results": results,
            "medians": medians, "ratios": ratios, "reward_model_scoring": scoring}


# The pairs whose ratio the report gives: (first, second, what differs).
PAIRS = (("grpo_trl_settings", "trl_grpo", "identical settings"),
         ("grpo", "trl_grpo", "our defaults vs trl grpo's"),
         ("ppo_chunk64", "ppo_chunk16", "PPO generating 64 prompts at a time vs 16"))


def pair_ratios(first, second):
    """Seconds per generated token of `first` over `second`, repeat by repeat (the runs of one repeat ran next to
    each other: ABBA order), where both finished."""
    second_by_repeat = {r["repeat"]: r for r in second if r.get("returncode") == 0}
    return [round(seconds_per_token(r) / seconds_per_token(second_by_repeat[r["repeat"]]), 4)
            for r in first if r.get("returncode") == 0 and r["repeat"] in second_by_repeat]


def seconds_per_token(result):
    """Seconds per generated completion token over the measured window of one run."""
    return result["seconds_per_step"] * result["measured"] / result["completion_tokens"]


def run_medians(results):
    ok = [r for r in results if r.get("returncode") == 0]
    first = results[0]
    summary = {"ok": bool(ok), "about": first["about"], "repeats": len(ok),
               "prompts_per_step": first["prompts_per_step"], "steps_per_generation": first["steps_per_generation"],
               "skipped": first.get("skipped"),
               "failed": sum(1 for r in results if r.get("returncode") not in (0, None))}
    if ok:
        for key in ("seconds_per_step", "completion_tokens_per_s", "epoch_hours", "wall_s"):
            summary[key] = statistics.median(r[key] for r in ok)
        summary["seconds_per_token"] = statistics.median(seconds_per_token(r) for r in ok)
        for key in ("peak_rss_gb", "peak_cuda_allocated_gb", "peak_cuda_reserved_gb"):
            values = [r[key] for r in ok if r[key] is not None]
            summary[key] = max(values) if values else None
    return summary


def print_table(medians, args, environment):
    versions = ", ".join(f"{name} {value}" for name, value in environment["versions"].items() if value)
    loads = [environment[key] and f"{environment[key][0]:.2f}" for key in ("load_average_start", "load_average_end")]
    print(f"\n{environment['device']}; {versions}; {environment['date']}; load average (1 min) {loads[0]} at the "
          f"start, {loads[1]} at the end")
    width = max(20, *(len(run) for run in medians))
    print(f"{'run':<{width}} {'s/step':>7} {'prompts/':>8} {'steps/':>6} {'tok/s':>7} {'peak RSS':>9} "
          f"{'peak CUDA':>14} {f'{args.epoch_prompts:,}-prompt':>14}\n{'':<{width}} {'':>7} {'step':>8} {'gen':>6} "
          f"{'':>7} {'GB':>9} {'alloc/resv GB':>14} {'epoch':>14}")
    for run, m in medians.items():
        if not m["ok"]:
            reason = f"skipped: {m['skipped']}" if m["skipped"] else f"failed ({m['failed']} run(s); see log.txt)"
            print(f"{run:<{width}} {reason}")
            continue
        cuda = (f"{m['peak_cuda_allocated_gb']}/{m['peak_cuda_reserved_gb']}" if m["peak_cuda_allocated_gb"]
                else "-")
        hours = m["epoch_hours"]
        epoch = f"{hours * 60:.0f} min" if hours < 2 else f"{hours:.1f} h"
        rss = f"{m['peak_rss_gb']}" if m["peak_rss_gb"] else "n/a"
        print(f"{run:<{width}} {m['seconds_per_step']:>7.2f} {m['prompts_per_step']:>8} "
              f"{m['steps_per_generation']:>6} {m['completion_tokens_per_s']:>7.1f} {rss:>9} {cuda:>14} {epoch:>14}")
    print("s/step: measured time / optimizer steps over whole generation cycles (PPO: per rollout, one logged step); "
          "median over repeats")


def check_markdown(report):
    """The GPU check's figures as markdown (bench/gpu_check.py): the device and versions, then a table per part."""
    versions = ", ".join(f"{name} {value}" for name, value in report["versions"].items() if value)
    lines = ["# GPU check", "", f"{report['device']}; {versions}; commit {report['commit'] or 'unknown'}; "
             f"{report['date']}; {report['elapsed_s']} s of the {report['budget_s']} s budget.", ""]
    for name, record in report["parts"].items():
        took = f" in {record['wall_s']} s" if "wall_s" in record else ""
        lines += [f"## {name}: {record['about']}", "", f"{record['status']}{took} (budget {record['budget_s']} s, "
                  f"estimated {record['estimate_s']} s)", ""]
        if record["results"]:
            lines += (quickstart_table if name == "quickstarts" else runs_table)(record["results"]) + [""]
        if record.get("ratio"):
            ratio = record["ratio"]
            pairs = ", ".join(f"{r:.3f}" for r in ratio["per_pair"])
            lines += [f"{ratio['runs']}, seconds per generated token: **{ratio['seconds_per_token']:.3f}**"
                      + (f" (per pair: {pairs})" if pairs else ""), ""]
    return "\n".join(lines)


def quickstart_table(results):
    rows = ["| task | seed | results (95% CIs) | peak memory per stage (GiB, run_report.json) | time (s) | status |",
            "|---|---|---|---|---|---|"]
    for r in results:
        memory = ", ".join(f"{stage} {(figures['peak_memory'] or {}).get('gb', '-')}"
                           for stage, figures in r["stages"].items())
        seconds = r["timings_s"]["total"] if "timings_s" in r else r["wall_s"]
        rows.append(f"| {r['task']} | {r['seed']} | {quickstart_results(r) or '-'} | {memory or '-'} | {seconds} | "
                    f"{quickstart_status(r)} |")
    return rows


def quickstart_status(result):
    if result["returncode"] == 0:
        return "ok"
    if result.get("stopped"):
        finished = [stage for stage, figures in result["stages"].items() if figures["finished"]]
        return f"stopped at its part's end; stages finished: {', '.join(finished) or 'none'}"
    return f"failed (exit code {result['returncode']})"


def quickstart_results(result):
    """A quickstart's results in one cell: the win rates (reward-model task) or accuracy gains (math task)."""
    from rlhf.evaluation.report import gain_interval, win_interval

    parts = []
    if result.get("reward_accuracy"):
        parts.append(f"reward model accuracy {result['reward_accuracy']['accuracy']:.2f}")
    for c in result.get("comparison", []):
        if "accuracy_delta" in c:
            base = result["models"][Path(c["baseline"]).name]["verifier_accuracy"]
            accuracy = result["models"][c["model"]]["verifier_accuracy"]
            parts.append(f"{c['model']} accuracy {accuracy:.1%} (base {base:.1%}): gain {c['accuracy_delta']:+.1%} "
                         f"({gain_interval(c['accuracy_delta_ci_low'], c['accuracy_delta_ci_high'], ' to ')})")
        else:
            parts.append(f"{c['model']} vs base: win rate {c['win_rate']:.2f} "
                         f"({win_interval(c['ci_low'], c['ci_high'], '-')})")
    return "; ".join(parts)


def runs_table(results):
    rows = ["| run | repeat | s/step | completion tokens/s | peak GPU memory, allocated / reserved (GB) | peak RSS "
            "(GB) | wall (s) | note |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        timed = "-", "-"
        if "seconds_per_step" in r:
            timed = f"{r['seconds_per_step']:.3f}", f"{r['completion_tokens_per_s']:.1f}"
        gpu = "-"
        if r.get("peak_cuda_allocated_gb"):
            gpu = f"{r['peak_cuda_allocated_gb']} / {r['peak_cuda_reserved_gb']}"
        rows.append(f"| {r['run']} | {r.get('repeat', 0)} | {' | '.join(timed)} | {gpu} | "
                    f"{r.get('peak_rss_gb') or '-'} | {r.get('wall_s', '-')} | {run_note(r)} |")
    return rows


def run_note(result):
    """What a row of the check's tables needs said: a run not started, stopped at its part's end, or failed."""
    if result.get("not_started"):
        return f"not started: {result['not_started']}"
    if result.get("stopped"):
        measured = result["measured"] if "seconds_per_step" in result else 0
        return f"stopped at its part's end: {measured} steps measured"
    if result.get("returncode") != 0:
        why = result.get("error") or f"exit code {result.get('returncode')}"
        return f"failed: {why}"
    return ""
