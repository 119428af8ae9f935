"""The output folder of a run: safety checks, run manifest, checkpoint discovery.

Nothing here deletes anything. The manifest (`run_manifest.json`) says what produced the folder: the resolved
configuration, library versions and git commit; each re-launch (resume) is appended to it.
"""

import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from rlhf.cli import UserError

MANIFEST = "run_manifest.json"
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")
# Files a run writes at the top of output_dir (save_pretrained, TRL's model card, Trainer's args). In a folder
# that is not one of our runs, any of these already there belongs to the user and is never written over.
RUN_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", "README.md", "training_args.bin",
)


def last_checkpoint(output_dir):
    """The newest complete `checkpoint-N` folder in `output_dir`, or None.

    A checkpoint counts as complete once its `trainer_state.json` parses: the Trainer writes that file last,
    after the weights, optimizer and RNG states, so a checkpoint cut short by a crash is never picked.
    """
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    steps = sorted(
        (int(m.group(1)), child)
        for child in folder.iterdir()
        if child.is_dir() and (m := CHECKPOINT_RE.match(child.name))
    )
    for _, checkpoint in reversed(steps):
        try:
            json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return checkpoint
    return None


def prepare_output_dir(output_dir):
    """Create `output_dir` if needed and refuse to write over a finished run or into an unwritable place.

    Returns the checkpoint to resume from (or None).
    """
    folder = Path(output_dir)
    manifest = read_manifest(folder)
    if manifest.get("finished_at"):
        raise UserError(
            f"{folder} already holds a finished run (final model saved {manifest['finished_at']}); "
            "choose a new --output_dir, or move that folder away to train again"
        )
    clashes = [] if manifest else [name for name in RUN_FILES if (folder / name).exists()]
    if clashes:
        raise UserError(
            f"{folder} already holds {', '.join(clashes)}, not written by a run of this package; choose a new "
            "--output_dir (nothing there is ever overwritten unasked)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write_test.{os.getpid()}"  # one per process when several are launched
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as error:
        raise UserError(f"cannot write to --output_dir {folder} ({error.strerror}); choose another folder") from None
    return last_checkpoint(folder)


def launched_processes():
    """How many processes torchrun / accelerate launch started (1 for a plain `python script.py`)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process():
    """False in the other processes of a multi-process launch (torchrun / accelerate launch set RANK)."""
    return os.environ.get("RANK", "0") == "0"


def read_manifest(output_dir):
    path = Path(output_dir) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_manifest(output_dir, script, configs, resumed_from=None):
    """Record this launch in `output_dir/run_manifest.json`, keeping earlier launches of the same run."""
    if not is_main_process():
        return None
    previous = read_manifest(output_dir)
    launches = previous.get("launches", [])
    launches.append(
        {
            "started_at": _now(),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
            "resumed_from": str(resumed_from) if resumed_from else None,
            "processes": launched_processes(),
        }
    )
    manifest = {
        "script": script,
        "config": {type(c).__name__: _jsonable(c) for c in configs},
        "versions": versions(),
        "git_commit": _git_commit(),
        "launches": launches,
        "finished_at": None,
    }
    _write_json(Path(output_dir) / MANIFEST, manifest)
    return manifest


def mark_finished(output_dir, **extra):
    """Mark the run finished (the final model is saved); later launches refuse to overwrite it."""
    if not is_main_process():
        return
    manifest = read_manifest(output_dir)
    manifest.update(finished_at=_now(), **extra)
    _write_json(Path(output_dir) / MANIFEST, manifest)


def _write_json(path, data):
    # Write then rename, so a crash never leaves a half-written manifest.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _jsonable(config):
    if hasattr(config, "to_dict"):  # TrainingArguments hides tokens and serialises enums
        return config.to_dict()
    return dataclasses.asdict(config)


def versions(libraries=LIBRARIES):
    """Versions of Python and of the libraries that decide what training does."""
    found = {"python": platform.python_version()}
    for library in libraries:
        try:
            found[library] = metadata.version(library)
        except metadata.PackageNotFoundError:
            found[library] = None
    return found


def _git_commit():
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
