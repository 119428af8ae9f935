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

from rlhf.errors import NothingToDo, UserError

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
    return next((checkpoint for _, checkpoint in reversed(steps) if _is_complete(checkpoint)), None)


def _is_complete(checkpoint):
    try:
        json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


# Flags that may differ between the launches of one run. How long it trains: raising it continues a finished run.
LENGTH_FLAGS = ("max_steps", "num_train_epochs", "total_episodes")
# How a run logs, saves and reports, and what the machine decides (bf16 on a GPU, CPU under torchrun): none of these
# changes what is learned. Any other difference (model, data, rewards, learning rate, batch...) is refused, because
# a resumed run keeps its optimizer and schedule and would not do what the new value says.
MAY_CHANGE = (
    *LENGTH_FLAGS, "output_dir", "resume_from_checkpoint", "logging_steps", "logging_first_step", "logging_strategy",
    "save_steps", "save_strategy", "save_total_limit", "report_to", "run_name", "disable_tqdm", "log_level",
    "log_level_replica", "log_completions", "num_completions_to_print", "num_sample_generations",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "bf16", "tf32", "use_cpu", "local_rank",
)


@dataclasses.dataclass
class Launch:
    """What a launch does with its output_dir: start fresh, or go on from `checkpoint` with `changes` applied."""

    checkpoint: Path | None = None
    changes: dict = dataclasses.field(default_factory=dict)  # flag -> [value in the run so far, value now]


def prepare_output_dir(output_dir, configs=(), resume_from_checkpoint=None):
    """Decide what this launch does with `output_dir`, refusing anything that would lose or misreport work.

    - a new or empty folder (or one with only the user's own files, or a run that never saved a checkpoint): a
      fresh run;
    - an interrupted run: resume from its newest complete checkpoint (or `resume_from_checkpoint`);
    - a finished run and the same settings: `NothingToDo`; with a longer training length: continue from its last
      checkpoint to the new total.
    Going on from a checkpoint with settings other than the run's own (`MAY_CHANGE` aside) is refused, naming each
    flag. Nothing is written here: `record_launch` creates the folder once the data has loaded.
    """
    folder = Path(output_dir)
    manifest = read_manifest(folder)
    clashes = [] if manifest else [name for name in RUN_FILES if (folder / name).exists()]
    if clashes:
        raise UserError(
            f"{folder} already holds {', '.join(clashes)}, not written by a run of this package; choose a new "
            "--output_dir (nothing there is ever overwritten unasked)"
        )
    checkpoint = _checkpoint_to_resume(folder, resume_from_checkpoint)
    if checkpoint is None and not manifest.get("finished_at"):
        return Launch()  # nothing trained yet: any settings start afresh
    changes = changed_flags(manifest.get("config", {}), config_sections(configs)) if manifest else {}
    refused = {flag: values for flag, values in changes.items() if flag not in MAY_CHANGE}
    if refused:
        raise UserError(
            f"{folder} holds a run trained with other settings: {_describe(refused)}; give the run's own values to "
            "resume or continue it, or choose a new --output_dir for a new run"
        )
    if manifest.get("finished_at"):
        _check_continues(folder, manifest, changes, checkpoint)
    return Launch(checkpoint, changes)


def _checkpoint_to_resume(folder, resume_from_checkpoint):
    if not resume_from_checkpoint:
        return last_checkpoint(folder)
    checkpoint = Path(resume_from_checkpoint)
    if not _is_complete(checkpoint):
        raise UserError(
            f"--resume_from_checkpoint {checkpoint} is not a complete checkpoint (a checkpoint-N folder with its "
            "trainer_state.json); pass one, or drop the flag to resume from the newest checkpoint in --output_dir"
        )
    return checkpoint


def _check_continues(folder, manifest, changes, checkpoint):
    """A finished run goes on only when its training length was raised beyond where it stopped, from a checkpoint."""
    step, episode = manifest.get("global_step"), manifest.get("episode")
    finished = f"{folder} holds a run that finished at step {step}"
    lengths = {flag: values for flag, values in changes.items() if flag in LENGTH_FLAGS}
    if not lengths:
        raise NothingToDo(
            f"{finished} ({manifest['finished_at']}) with these settings: nothing to do. To train further, raise "
            "--max_steps or --num_train_epochs (PPO: --total_episodes) and run the same command again."
        )
    config = {flag: values[1] for flag, values in lengths.items()}
    new_steps, new_episodes = config.get("max_steps"), config.get("total_episodes")
    if new_steps is not None and 0 < new_steps <= (step or 0):
        raise UserError(f"{finished}; --max_steps {new_steps} does not go beyond it: raise it to continue the run")
    if new_episodes is not None and new_episodes <= (episode or 0):
        raise UserError(
            f"{finished} ({episode} episodes); --total_episodes {new_episodes} does not go beyond it: raise it to "
            "continue the run"
        )
    if "num_train_epochs" in config and config["num_train_epochs"] < lengths["num_train_epochs"][0]:
        raise UserError(f"{finished}; a lower --num_train_epochs does not go beyond it: raise it to continue the run")
    if checkpoint is None:
        raise UserError(
            f"{finished} but kept no checkpoint (--save_strategy no), so it cannot continue with its optimizer "
            "state; choose a new --output_dir"
        )


def config_sections(configs):
    """The configs as the manifest stores them: {class name: {field: JSON value}}."""
    return json.loads(json.dumps({type(c).__name__: _jsonable(c) for c in configs}, default=str))


def changed_flags(old, new):
    """{flag: [old value, new value]} for every field of `new` whose value differs from `old` (manifest sections).

    Fields that `old` does not have (a flag added by a later version of this package) are not compared.
    """
    changes = {}
    for section, values in new.items():
        before = old.get(section, {})
        for flag, value in values.items():
            if flag in before and before[flag] != value:
                changes[flag] = [before[flag], value]
    return changes


def _describe(changes):
    return ", ".join(f"--{flag} {new} (the run has {old})" for flag, (old, new) in changes.items())


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


def record_launch(output_dir, script, configs, launch=None):
    """Create `output_dir` if needed and record this launch in its `run_manifest.json`, keeping earlier launches.

    The manifest's `config` is the configuration in effect now; each launch says what it resumed from and which
    flags it changed. An unwritable place is a `UserError`.
    """
    folder = Path(output_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write_test.{os.getpid()}"  # one per process when several are launched
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as error:
        raise UserError(f"cannot write to --output_dir {folder} ({error.strerror}); choose another folder") from None
    if not is_main_process():
        return None
    launch = launch or Launch()
    launches = read_manifest(folder).get("launches", [])
    launches.append(
        {
            "started_at": _now(),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
            "resumed_from": str(launch.checkpoint) if launch.checkpoint else None,
            "changed": launch.changes,
            "processes": launched_processes(),
        }
    )
    manifest = {
        "script": script,
        "config": config_sections(configs),
        "versions": versions(),
        "git_commit": _git_commit(),
        "launches": launches,
        "finished_at": None,
    }
    _write_json(folder / MANIFEST, manifest)
    return manifest


def mark_finished(output_dir, **extra):
    """Mark the run finished (the final model is saved): the same command again has nothing to do."""
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
