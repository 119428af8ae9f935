"""Which distributed engine a launch runs on (one process, DDP, DeepSpeed, FSDP): refused before anything loads where
accelerate would silently train as something else, and described from the prepared model once it runs."""

import os
import sys
from pathlib import Path

from rlhf.errors import UserError


def engine_settings(configs):
    """accelerate's distributed type and process count, from the TrainingArguments (which set accelerate up, as the
    Trainer is about to). FSDP shows once the Trainer's Accelerator exists:
    `rlhf.lifecycle.manifest.checkpoint_recorder` records what ran."""
    from transformers import TrainingArguments

    training = next((config for config in configs if isinstance(config, TrainingArguments)), None)
    if training is None:
        return {}
    device = training.device
    state = training.distributed_state
    kind = getattr(getattr(state, "distributed_type", None), "value", "NO")
    # The state's count, not `world_size`: PPO's config declares its own `world_size` field, set once training starts
    return {"device": device.type, "distributed_type": kind, "num_processes": getattr(state, "num_processes", 1)}


ENGINE_CONFIGS = "configs/accelerate/"


def check_engine_launch():
    """Refuse, before anything loads, a launch whose accelerate config would silently train as something else:
    - FSDP without a CUDA GPU: accelerate 1.15 sets FSDP up on GPUs only; CPU processes would train as plain DDP;
    - `accelerate launch --cpu` with an engine config: `--cpu` takes accelerate's one-process launcher, which starts
      one process without the engine (the config's other settings ignored);
    - any `accelerate launch` that asked for several processes (`--num_processes N` or its config) and started one:
      `--cpu`, or `--num_processes N` alone where there are not N GPUs, takes that launcher too, and the run would
      train alone, saying nothing."""
    from rlhf import processes

    if processes.launched_engine() == "FSDP" and not processes.cuda_available():
        raise UserError(
            f"{ENGINE_CONFIGS}fsdp.yaml (FSDP) needs CUDA GPUs: accelerate runs FSDP on GPUs only, and these CPU "
            f"processes would train as plain DDP; on CPU use {ENGINE_CONFIGS}deepspeed_zero3.yaml (parameters "
            "sharded) with DS_ACCELERATOR=cpu, see docs/multi-gpu.md"
        )
    launch = _one_process_launch()
    if launch is None:
        return
    config_file, config, processes_asked = launch
    cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true"
    if cpu and config_file and config.get("distributed_type", "NO") != "NO":
        raise UserError(
            f"accelerate launch --cpu --config_file {config_file} started one process without its "
            f"{config.get('distributed_type')} (--cpu takes accelerate's one-process launcher): drop --cpu; a machine "
            "without a GPU trains on the CPU anyway (DeepSpeed: DS_ACCELERATOR=cpu), see docs/multi-gpu.md"
        )
    if processes_asked > 1:
        script = Path(sys.argv[0]).name
        n = processes_asked
        why = "--cpu takes" if cpu else f"without --multi_gpu and {n} GPUs, --num_processes {n} takes"
        raise UserError(
            f"accelerate launch asked for {n} processes and started one ({why} accelerate's one-process launcher); "
            f"`accelerate launch --multi_gpu --num_processes {n} --mixed_precision no {script} ...` (or `torchrun "
            f"--nproc_per_node {n} {script} ...`) starts {n} processes, which train on the CPU where there is no "
            "GPU (docs/multi-gpu.md)"
        )


def _one_process_launch():
    """What an `accelerate launch` whose one-process launcher started this process asked for: (its --config_file or
    None, that file's settings, the processes asked for: --num_processes, else the config's); None for any other
    start. That launcher hands its arguments to no one: its command line says."""
    import psutil
    import yaml

    if "WORLD_SIZE" in os.environ:  # a multi-process launcher (torchrun, accelerate's, DeepSpeed's) started it
        return None
    try:
        command = psutil.Process().parent().cmdline()
    except (psutil.Error, AttributeError):
        return None
    launcher = next((i for i, part in enumerate(command)
                     if part == "launch" or part.endswith("accelerate.commands.launch")), None)
    if launcher is None:
        return None
    options = command[launcher + 1:]  # the launcher's options: up to the script, whose own flags follow it
    options = options[:next((i for i, part in enumerate(options) if part.endswith(".py")), len(options))]

    def option(*names):
        for i, part in enumerate(options):
            name, _, value = part.partition("=")
            if name in names:
                return value or (options[i + 1] if i + 1 < len(options) else None)
        return None

    config_file, config = option("--config_file", "--config-file"), {}
    if config_file:
        try:
            config = yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            config = {}
    asked = option("--num_processes", "--num-processes") or config.get("num_processes", 1)
    try:
        return config_file, config, int(asked)
    except ValueError:
        return config_file, config, 1


def describe_engine(model):
    """What accelerate made of the launch, seen on the prepared `model`: ({distributed_type, num_processes, what is
    sharded}, one line to say). Sharded parameters are checked on the model itself (ZeRO-3: DeepSpeed's partitioned
    parameters; FSDP2: DTensors); an engine the launcher asked for but accelerate did not set up is a UserError."""
    from accelerate.state import AcceleratorState

    from rlhf import processes

    state = AcceleratorState()
    kind, count = state.distributed_type.value, state.num_processes
    asked = processes.launched_engine()
    if asked and kind != asked:
        raise UserError(f"accelerate launch asked for {asked} but accelerate set up {kind}; check the --config_file "
                        "and see docs/multi-gpu.md")
    parameters = list(model.parameters())
    engine = {"distributed_type": kind, "num_processes": count, "sharded": []}
    if kind == "DEEPSPEED":
        stage = state.deepspeed_plugin.zero_stage
        engine["zero_stage"] = stage
        engine["sharded"] = ["optimizer state", "gradients", "parameters"][:stage]
        name = f"DeepSpeed ZeRO-{stage}"
    elif kind == "FSDP":
        engine["fsdp_version"] = state.fsdp_plugin.fsdp_version
        engine["sharded"] = ["optimizer state", "gradients", "parameters"]
        name = f"FSDP{state.fsdp_plugin.fsdp_version}"
    else:
        name = "DDP" if count > 1 else "one process"
    if "parameters" in engine["sharded"] and not all(_is_sharded(p) for p in parameters):
        raise UserError(f"{name} was asked for, but the model's parameters are not sharded over the {count} "
                        "processes; check the --config_file and see docs/multi-gpu.md")
    if engine["sharded"]:
        line = f"engine: {name} ({' and '.join(engine['sharded'])} sharded over {count} processes)"
    else:
        line = f"engine: {name}" + (f" ({count} processes, each with the whole model)" if count > 1 else "")
    return engine, line


def _is_sharded(parameter):
    from torch.distributed.tensor import DTensor

    return isinstance(parameter, DTensor) or hasattr(parameter, "ds_id")  # FSDP2; DeepSpeed ZeRO-3


def resolve_machine(training):
    """What the launch makes of the machine, in one place, before transformers sets its devices up from `training`
    (the training arguments): [(field, value, why, said always)], `why` None for a value set without a note.
    Refuses an engine launch that would train as something else (`check_engine_launch`), and --bf16 where the
    machine has no bfloat16 (transformers' own refusal names no flag). DeepSpeed on CPU processes compiles no kernel
    that training does not use (`skip_deepspeeds_shared_memory_kernel`)."""
    from rlhf import processes

    check_engine_launch()
    changes = []
    if processes.launched_processes() > 1 and not training.use_cpu and not processes.cuda_available():
        if processes.launched_engine() == "DEEPSPEED":
            # DeepSpeed on CPU processes (DS_ACCELERATOR=cpu): accelerate keeps DeepSpeed off its CPU path
            # (use_cpu would train as plain DDP), and its other path finds no backend without a GPU unless told.
            if training.ddp_backend is None:
                changes.append(("ddp_backend", "gloo", "DeepSpeed on CPU processes: they talk over gloo", True))
            from rlhf.trl_compat import skip_deepspeeds_shared_memory_kernel

            skip_deepspeeds_shared_memory_kernel()  # compiled at start, for inference only
        else:
            # Several processes on a machine without a GPU (torchrun / accelerate launch on CPU): without use_cpu,
            # transformers starts no process group and every process would train alone on all the data.
            changes.append(("use_cpu", True, "several processes and no GPU: each trains its share on the CPU", True))
    use_cpu = training.use_cpu or any(name == "use_cpu" for name, *_ in changes)
    if training.bf16 and not use_cpu and not _bf16_available():
        raise UserError("--bf16 needs a GPU with bfloat16 support, and this machine has none; drop --bf16 (or add "
                        "--use_cpu for bf16 autocast on the CPU).")
    if training.tf32 is None:  # on where the GPU has it (Ampere and newer)
        changes.append(("tf32", _cuda_supports_tf32() and not use_cpu, None, False))
    if not processes.cuda_available() and training.dataloader_pin_memory:
        changes.append(("dataloader_pin_memory", False, "pinned memory helps a GPU only, and there is none", False))
    if processes.on_gpu(use_cpu):
        changes += _gpu_generation(training, processes.launched_processes())
    return changes


def launch_notes(training):
    """What the launch makes of a flag the user gave, said in one `note:` line each where given: [(field, line)].
    PPO (as TRL's) clips gradients only under DeepSpeed, whose config takes --max_grad_norm."""
    from rlhf import processes

    if hasattr(training, "num_ppo_epochs") and processes.launched_engine() != "DEEPSPEED":
        return [("max_grad_norm", f"note: --max_grad_norm {training.max_grad_norm} does nothing here: PPO (as TRL's) "
                 "clips gradients only under DeepSpeed, whose config takes it")]
    return []


def _gpu_generation(training, count):
    """On a GPU, where decoding is launch-bound, GRPO's and PPO's default prompts generated at once
    (`rlhf.batches.generation_prompts`): GRPO's --prompts_per_generation, PPO's --prompts_per_rollout, where the user
    set neither it nor (PPO) TRL's --num_mini_batches."""
    from rlhf.batches import generation_prompts, grpo_step_prompts, ppo_update_prompts

    if getattr(training, "prompts_per_generation", 0) is None:  # GRPO
        step = grpo_step_prompts(training.prompts_per_step, training.batch_size, training.gradient_accumulation_steps,
                                 training.generation_batch_size, training.steps_per_generation, count)
        return [("prompts_per_generation", generation_prompts(step, True), None, False)] if step else []
    if getattr(training, "prompts_per_rollout", 0) is None and training.num_mini_batches is None:  # PPO
        update = ppo_update_prompts(training.per_device_train_batch_size, training.gradient_accumulation_steps, count)
        return [("prompts_per_rollout", generation_prompts(update, True), None, False)]
    return []


def _cuda_supports_tf32():
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


def _bf16_available():
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

    return is_torch_bf16_gpu_available() or is_torch_xla_available()
