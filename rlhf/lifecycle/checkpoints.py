"""A run's checkpoints: finding the newest complete one (what a launch resumes from), and reading and writing the
files of a trainer's state that transformers' `Trainer` defines (weights as `save_pretrained` writes them, each
process's random states), for a trainer that writes its checkpoints itself (`rlhf.ppo.trainer`)."""

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


def load_best_checkpoint(model, state, adapter=False):
    """Put the weights of the run's best checkpoint by its held-out evaluation (`state.best_model_checkpoint`, which
    every process holds alike) into `model` (with `adapter`, a PEFT model's adapter), as transformers'
    `load_best_model_at_end` does; return that checkpoint, or None where the run named none or it is gone (then
    `model` keeps its last weights). Call it in every process: each loads the files, with no collective to wait in."""
    best = state.best_model_checkpoint
    if best is None or not is_complete(best):
        return None
    load_pretrained_weights(model, best, adapter)
    return Path(best)


def load_pretrained_weights(model, folder, adapter=False):
    """Put the weights that `save_pretrained` wrote in `folder` (one file or shards) into `model`; with `adapter`,
    a PEFT model's adapter. A weight tied to another (the LM head of tied embeddings) is saved once, under the other
    name."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if adapter:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(folder / "adapter_model.safetensors"))
        return
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else [
        "model.safetensors"]
    weights = {name: tensor for file in files for name, tensor in load_file(folder / file).items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    own = model.state_dict()
    loaded = {own[name].data_ptr() for name in weights if name in own}
    missing = [name for name in missing if own[name].data_ptr() not in loaded]  # tied to a loaded weight: there
    if missing or unexpected:
        raise ValueError(f"{folder} does not hold this model's weights: missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]}")


def rng_state_file(process_index, processes):
    """The file of one process's random states in a checkpoint: transformers' Trainer's names."""
    return "rng_state.pth" if processes <= 1 else f"rng_state_{process_index}.pth"


def save_rng_state(checkpoint, process_index, processes):
    """This process's random states (Python, numpy, torch's CPU and CUDA generators), as transformers' Trainer saves
    them, so that a resumed run draws what an uninterrupted one does."""
    import random

    import numpy as np
    import torch

    states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.random.get_rng_state_all() if processes > 1 else torch.cuda.random.get_rng_state()
    torch.save(states, Path(checkpoint) / rng_state_file(process_index, processes))


def load_rng_state(checkpoint, process_index, processes):
    """Put back the random states `save_rng_state` saved for this process; False if the checkpoint has none (its
    run had another number of processes)."""
    import random

    import numpy as np
    import torch

    from rlhf.trl_compat import safe_globals, set_rng_state_for_device  # transformers' internals

    path = Path(checkpoint) / rng_state_file(process_index, processes)
    if not path.is_file():
        return False
    with safe_globals():  # numpy's state is an array: allowed through weights_only
        states = torch.load(path, weights_only=True)
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.random.set_rng_state(states["cpu"])
    if torch.cuda.is_available():
        set_rng_state_for_device("CUDA", torch.cuda, states, processes > 1)
    return True
