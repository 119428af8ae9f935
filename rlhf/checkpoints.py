"""Finding a run's checkpoints: the newest complete one is what a launch resumes from."""

import json
import re
from pathlib import Path

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def last_checkpoint(output_dir):
    """The newest complete `checkpoint-N` folder in `output_dir`, or None.

    transformers' `get_last_checkpoint` finds the newest; it counts as complete once its `trainer_state.json` parses
    (the Trainer writes that file last, after the weights, optimizer and RNG states). One cut short by a crash is
    passed over for the newest complete one before it, which transformers' function would not find.
    """
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    newest = get_last_checkpoint(folder)
    if newest is None or is_complete(newest):
        return newest and Path(newest)
    steps = sorted((int(m.group(1)), child) for child in folder.iterdir()
                   if child.is_dir() and (m := CHECKPOINT_RE.match(child.name)))
    return next((checkpoint for _, checkpoint in reversed(steps) if is_complete(checkpoint)), None)


def is_complete(checkpoint):
    """Whether `checkpoint`'s trainer_state.json, written last, parses."""
    try:
        json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True
