"""Which runs the benchmark makes, with which flags, and how many optimizer steps make whole generation cycles."""

import functools
import math
import subprocess
import sys

from bench import ROOT

RUNS = ("grpo_trl_settings", "trl_grpo", "grpo", "grpo_lora", "grpo_vllm", "grpo_vllm_lora", "trl_grpo_lora", "ppo",
        "ppo_lora", "ppo_chunk16", "ppo_chunk64")
# PPO's prompts per generate call and no-grad pass of a rollout (--local_rollout_forward_batch_size), fixed by name
PPO_CHUNKS = {"ppo_chunk16": 16, "ppo_chunk64": 64}
TRL_SETTINGS = ("grpo_trl_settings", "trl_grpo", "trl_grpo_lora")  # one generation per step, TRL's precision
LORA = ["--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj"]
RUN_DESCRIPTIONS = {
    "grpo_trl_settings": "train_grpo.py at trl grpo's settings (1 generation/step, TRL's precision)",
    "trl_grpo": "trl grpo, the same flags",
    "trl_grpo_lora": "trl grpo --use_peft, the same flags",
    "grpo": "train_grpo.py, our defaults",
    "grpo_lora": "train_grpo.py --use_peft, our defaults",
    "grpo_vllm": "train_grpo.py --use_vllm (colocate), our defaults",
    "grpo_vllm_lora": "train_grpo.py --use_vllm --use_peft, our defaults",
    "ppo": "train_ppo.py, our defaults",
    "ppo_lora": "train_ppo.py --use_peft, our defaults",
    "ppo_chunk16": "train_ppo.py, rollouts generated 16 prompts at a time",
    "ppo_chunk64": "train_ppo.py, rollouts generated 64 prompts at a time",
}
# Our flags that `trl grpo` spells otherwise. The one place the benchmark translates: once the scripts take TRL's
# names, this table empties and `trl grpo` runs the very flags of ours.
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
        chunk = ["--local_rollout_forward_batch_size", PPO_CHUNKS[name]] if name in PPO_CHUNKS else []
        return [sys.executable, str(ROOT / "train_ppo.py"), *common,
                "--reward_model_name_or_path", paths["reward_model"],
                *(["--use_peft", *LORA] if lora else []), *chunk]
    grpo = [*common, "--num_generations", args.num_generations, "--temperature", "0.7", "--top_p", "0.9",
            "--beta", "0.04", "--per_device_train_batch_size", args.per_device_train_batch_size]
    # TRL's batch flags: TRL then generates once per optimizer step (steps_per_generation = accumulation steps).
    if trl_settings:
        grpo += ["--gradient_accumulation_steps", completions // args.per_device_train_batch_size]
    if name.startswith("trl_grpo"):
        # `python -m trl.cli.main` is the `trl` command itself, found the same way on Linux and Windows.
        ours = [*grpo, "--reward_model_name_or_path", paths["reward_model"], *(["--use_peft", *LORA] if lora else [])]
        return [sys.executable, "-m", "trl.cli.main", "grpo", *ours]  # the same flags: the scripts take TRL's names
    script = [sys.executable, str(ROOT / "train_grpo.py"), *grpo, "--reward_model_name_or_path", paths["reward_model"]]
    if trl_settings:  # the reward model in the dtype `trl grpo` loads it in (ours: bfloat16 on a GPU by default)
        return [*script, "--prompts_per_step", "0", "--reward_model_dtype", args.dtype]
    script += ["--prompts_per_step", args.prompts_per_step, *(["--use_peft", *LORA] if lora else [])]
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
            **shape, "steps": total, "warmup": cycles["warmup_steps"] * steps_per_cycle,
            "measured": cycles["steps"] * steps_per_cycle, "prompts_needed": total * shape["prompts_per_step"],
            "skipped": skip}


def plan_runs(args, paths, cuda):
    """Every run of `args.runs` x `args.variants`, `args.repeats` times in ABBA order (listed, reversed, listed...: no
    run always goes first, and a pair's drift cancels), each with its `repeat`."""
    return [{**plan_run(name, label, flags, args, paths, cuda), "repeat": repeat} for repeat in range(args.repeats)
            for name in (args.runs if repeat % 2 == 0 else args.runs[::-1]) for label, flags in args.variants]


def plan_memory_run(name, args, paths, cuda, flags=()):
    """A run for its peak memory alone, untimed: one generation and two optimizer steps (the second one with AdamW's
    state: every shape a longer run has); PPO: one rollout, whose mini-batches take an optimizer step each."""
    plan = plan_run(name, "", list(flags), args, paths, cuda)
    ppo = name.startswith("ppo")
    steps = 1 if ppo else 2
    count = ["--total_episodes", plan["prompts_per_step"]] if ppo else ["--max_steps", steps]
    return {**plan, "command": [*plan["command"][:-2], *map(str, count)], "steps": steps, "warmup": 0, "measured": 0,
            "prompts_needed": steps * plan["prompts_per_step"]}


def batch_shape(name, command, cuda):
    """Prompts per step, steps per generation (or rollout) and completions per generation of a run, as the script
    it runs will resolve them on the device planned for (`cuda`): our scripts' flags are parsed by the package's
    own parser, with its device defaults (`rlhf.processes.cuda_available`) answering for that device, so that a dry run
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

    from config import (
        GRPOTrainingConfig,
        ModelArguments,
        PPOModelArguments,
        PPOTrainingConfig,
        PromptDataArguments,
        RewardArguments,
    )
    from rlhf import processes
    from rlhf.cli import parse_args as parse_script_args
    from rlhf.processes import launched_processes

    flags, dropping = [], False
    for part in command[2:]:
        if part.startswith("--"):
            dropping = part in ("--bf16", "--tf32")  # with its value
        if not dropping and part != "--use_vllm":
            flags.append(part)
    types = ((PPOModelArguments, PromptDataArguments, PPOTrainingConfig) if name.startswith("ppo") else
             (ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig))
    with mock.patch.object(processes, "cuda_available", lambda: cuda):
        config = parse_script_args(types, flags)[-1]
    if name.startswith("ppo"):
        # One rollout (one logged step) generates prompts_per_rollout prompts, summed over processes (64 on a GPU:
        # several mini-batches, one optimizer step each, see rlhf/ppo/trainer.py; one mini-batch of per_device x
        # accumulation on a CPU).
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
