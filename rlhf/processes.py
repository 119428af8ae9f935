"""Which process this is in a launch, how many there are, and whether it trains on a GPU: the one place that says.

One process for `python script.py`, several under torchrun / accelerate launch. Once the training arguments have
set accelerate up (transformers' `TrainingArguments` creates its `PartialState` as it is parsed), accelerate's
`PartialState` answers. Before that (what the parser settles before the configs are built) the launcher's environment
answers (torchrun, accelerate launch and deepspeed set RANK and WORLD_SIZE): creating a `PartialState` here would
start the process group itself, with accelerate's defaults rather than the run's (`--ddp_backend`, `--ddp_timeout`,
DeepSpeed's own start-up), and before `--use_cpu` is settled, so a CPU launch would find no backend and count every
process as the only one. Nothing here imports torch or accelerate when the module is imported.
"""

import contextlib
import os
import sys


def _partial_state():
    """accelerate's `PartialState` once the training arguments have set it up; None before (never created here)."""
    if "accelerate" not in sys.modules:  # not loaded, so not set up: no need to load TRL (rlhf.trl_compat) to ask
        return None
    from rlhf.trl_compat import accelerate_state

    return accelerate_state()


def launched_processes():
    """How many processes the launch started (1 for a plain `python script.py`)."""
    state = _partial_state()
    return state.num_processes if state else int(os.environ.get("WORLD_SIZE", "1"))


def process_index():
    """This process's rank in the launch, 0 to launched_processes() - 1."""
    state = _partial_state()
    return state.process_index if state else int(os.environ.get("RANK", "0"))


def is_main_process():
    """True in the one process that writes what a launch writes once (the lock, the manifest, the tokenizer, lines
    said once); False in the others."""
    return process_index() == 0


@contextlib.contextmanager
def main_process_first():
    """The main process runs the block first (e.g. writes a file), then the others (which read it)."""
    state = _partial_state()
    with state.main_process_first() if state else contextlib.nullcontext():
        yield


def cuda_available():
    """Whether a CUDA GPU is visible to this process (`CUDA_VISIBLE_DEVICES` may hide them all)."""
    import torch

    return torch.cuda.is_available()


def on_gpu(use_cpu=False):
    """Whether training runs on a CUDA GPU: one is visible and `--use_cpu` does not keep training off it.

    The parser's machine defaults ask it before any process group exists, and what loads the models after: both get the
    same answer from the same inputs, which is also the device the Trainer picks on a CUDA machine.
    """
    return cuda_available() and not use_cpu


def launched_engine():
    """The engine `accelerate launch` asked for ("DEEPSPEED", "FSDP"), None for DDP or one process: its launcher's
    environment says, before accelerate is set up (the training arguments check it against what accelerate did)."""
    for engine in ("DEEPSPEED", "FSDP"):
        if os.environ.get(f"ACCELERATE_USE_{engine}", "false").lower() == "true":
            return engine
    return None


def launched_zero_stage():
    """DeepSpeed's ZeRO stage that `accelerate launch` asked for (0 without DeepSpeed)."""
    if launched_engine() != "DEEPSPEED":
        return 0
    return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "0"))


def share_from_main_process(value):
    """`value` as the main process has it, in every process of a multi-process launch (call it in all of them)."""
    if launched_processes() <= 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]
