"""Which distributed engine a launch runs on (one process, DDP, DeepSpeed, FSDP): refused before anything loads where
accelerate would silently train as something else, and described from the prepared model once it runs."""

import os
from pathlib import Path

from rlhf.errors import UserError


def engine_settings(configs):
    """accelerate's distributed type and process count, from the TrainingArguments (which set accelerate up, as the
    Trainer is about to). FSDP shows once the Trainer's Accelerator exists: `rlhf.manifest.checkpoint_recorder`
    records what ran."""
    training = next((config for config in configs if hasattr(type(config), "_setup_devices")), None)
    if training is None:
        return {}
    device = training.device
    state = training.distributed_state
    kind = getattr(getattr(state, "distributed_type", None), "value", "NO")
    return {"device": device.type, "distributed_type": kind, "num_processes": training.world_size}


ENGINE_CONFIGS = "configs/accelerate/"


def check_engine_launch():
    """Refuse, before anything loads, a launch whose accelerate config would silently train as something else:
    - FSDP without a CUDA GPU: accelerate 1.15 sets FSDP up on GPUs only; CPU processes would train as plain DDP;
    - `accelerate launch --cpu` with a config of several processes or an engine: `--cpu` takes accelerate's
      one-process launcher, which starts one process without the engine (the config's other settings ignored)."""
    from rlhf import processes

    if processes.launched_engine() == "FSDP" and not processes.cuda_available():
        raise UserError(
            f"{ENGINE_CONFIGS}fsdp.yaml (FSDP) needs CUDA GPUs: accelerate runs FSDP on GPUs only, and these CPU "
            f"processes would train as plain DDP; on CPU use {ENGINE_CONFIGS}deepspeed_zero3.yaml (parameters "
            "sharded) with DS_ACCELERATOR=cpu, see docs/multi-gpu.md"
        )
    config_file, config = _accelerate_config_of_cpu_launch()
    if config and (config.get("distributed_type", "NO") != "NO" or int(config.get("num_processes", 1)) > 1):
        raise UserError(
            f"accelerate launch --cpu --config_file {config_file} started one process without its "
            f"{config.get('distributed_type')} (--cpu takes accelerate's one-process launcher): drop --cpu; a machine "
            "without a GPU trains on the CPU anyway (DeepSpeed: DS_ACCELERATOR=cpu), see docs/multi-gpu.md"
        )


def _accelerate_config_of_cpu_launch():
    """(path, settings) of the `--config_file` of an `accelerate launch --cpu` that started this process alone; (None,
    None) for any other start. accelerate's one-process launcher hands its config to no one: its command line says."""
    import psutil
    import yaml

    if os.environ.get("ACCELERATE_USE_CPU", "").lower() != "true" or "WORLD_SIZE" in os.environ:
        return None, None
    try:
        command = psutil.Process().parent().cmdline()
    except (psutil.Error, AttributeError):
        return None, None
    launcher = any(part == "launch" or part.endswith("accelerate.commands.launch") for part in command)
    if not launcher or "--config_file" not in command[:-1]:
        return None, None
    path = command[command.index("--config_file") + 1]
    try:
        return path, yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None, None


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
    Refuses an engine launch that would train as something else (`check_engine_launch`)."""
    from rlhf import processes

    check_engine_launch()
    changes = []
    if processes.launched_processes() > 1 and not training.use_cpu and not processes.cuda_available():
        if processes.launched_engine() == "DEEPSPEED":
            # DeepSpeed on CPU processes (DS_ACCELERATOR=cpu): accelerate keeps DeepSpeed off its CPU path
            # (use_cpu would train as plain DDP), and its other path finds no backend without a GPU unless told.
            if training.ddp_backend is None:
                changes.append(("ddp_backend", "gloo", "DeepSpeed on CPU processes: they talk over gloo", True))
        else:
            # Several processes on a machine without a GPU (torchrun / accelerate launch on CPU): without use_cpu,
            # transformers starts no process group and every process would train alone on all the data.
            changes.append(("use_cpu", True, "several processes and no GPU: each trains its share on the CPU", True))
    use_cpu = training.use_cpu or any(name == "use_cpu" for name, *_ in changes)
    if training.tf32 is None:  # on where the GPU has it (Ampere and newer)
        changes.append(("tf32", _cuda_supports_tf32() and not use_cpu, None, False))
    if not processes.cuda_available() and training.dataloader_pin_memory:
        changes.append(("dataloader_pin_memory", False, "pinned memory helps a GPU only, and there is none", False))
    return changes


def _cuda_supports_tf32():
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
