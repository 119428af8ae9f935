"""Which process this is in a launch: one for `python script.py`, several under torchrun / accelerate launch."""

import os


def launched_processes():
    """How many processes torchrun / accelerate launch started (1 for a plain `python script.py`)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process():
    """False in the other processes of a multi-process launch (torchrun / accelerate launch set RANK)."""
    return os.environ.get("RANK", "0") == "0"
