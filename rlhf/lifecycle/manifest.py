"""The run manifest (`run_manifest.json`): what produced an output folder.

The configuration, what `auto` and the machine resolved it to, the engine, library versions and git commit; each
re-launch (resume, continuation) is appended to it, and each checkpoint keeps a copy, so that a checkpoint carries
the settings that produced it.
"""

import dataclasses
import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from rlhf.engines import describe_engine, engine_settings
from rlhf.files import write_json
from rlhf.lifecycle.lock import make_folder
from rlhf.processes import is_main_process, launched_processes, on_gpu

MANIFEST = "run_manifest.json"
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")
SECRETS = ("hub_token",)  # fields the manifest keeps hidden, as TrainingArguments.to_dict writes them


def config_sections(configs):
    """The configs as the manifest stores them: {class name: {field: JSON value}}."""
    return json.loads(json.dumps({type(c).__name__: _jsonable(c) for c in configs}, default=str))


def changed_flags(old, new):
    """{flag: [old value, new value]} for every field of `new` whose value differs from `old` (manifest sections).

    Fields that `old` does not have (a flag added by a later version of this package), or has hidden (`hidden`), are
    not compared.
    """
    changes = {}
    for section, values in new.items():
        before = old.get(section, {})
        for flag, value in values.items():
            if flag in before and before[flag] != value and not hidden(flag, before[flag]):
                changes[flag] = [before[flag], value]
    return changes


def resolved_settings(configs):
    """What `auto` and the machine make of the configs: the dtypes the policy and the reward model load in, the
    device type. Recorded in the manifest and compared on resume (`RESOLVED_COMPARED`)."""
    from rlhf.models import resolve_dtype, reward_model_dtype

    fields = {}
    for config in configs:
        for name in ("dtype", "model_name_or_path", "reward_model_dtype", "reward_model_name_or_path", "reward_funcs"):
            if hasattr(config, name):
                fields.setdefault(name, getattr(config, name))
    training = next((config for config in configs if hasattr(config, "use_cpu")), None)
    if training is None:
        return {}
    gpu = on_gpu(training.use_cpu)
    resolved = {"device": "cuda" if gpu else "cpu"}
    if "dtype" in fields:
        resolved["dtype"] = resolve_dtype(fields["dtype"], fields.get("model_name_or_path"))
    if "reward_model_dtype" in fields and "reward_model" in fields.get("reward_funcs", ["reward_model"]):
        dtype = reward_model_dtype(fields["reward_model_dtype"], fields.get("dtype", "float32"), gpu)
        resolved["reward_model_dtype"] = resolve_dtype(dtype, fields.get("reward_model_name_or_path"))
    return resolved


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
    make_folder(folder)
    resolved = {**resolved_settings(configs), **engine_settings(configs)}
    if not is_main_process():
        return None
    launches = read_manifest(folder).get("launches", [])
    launches.append(
        {
            "started_at": _now(),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
            "resumed_from": str(launch.checkpoint) if launch and launch.checkpoint else None,
            "changed": launch.changes if launch else {},
            "processes": launched_processes(),
            "resolved": resolved,
        }
    )
    manifest = {
        "script": script,
        "config": config_sections(configs),
        "resolved": resolved,  # what `auto` and the machine made of it in this launch
        "versions": versions(),
        "git_commit": _git_commit(),
        "launches": launches,
        "finished_at": None,
    }
    write_json(folder / MANIFEST, manifest)
    return manifest


def mark_finished(output_dir, **extra):
    """Mark the run finished (the final model is saved): the same command again has nothing to do."""
    if not is_main_process():
        return
    manifest = read_manifest(output_dir)
    manifest.update(finished_at=_now(), **extra)
    write_json(Path(output_dir) / MANIFEST, manifest)


def _record_engine(output_dir, model):
    """Say which engine runs (main process) and record it in the manifest (`resolved.engine`, and this launch's),
    checked on the prepared model (`describe_engine`)."""
    engine, line = describe_engine(model)
    manifest = read_manifest(output_dir)
    if is_main_process() and manifest:
        from rlhf.trl_compat import say  # (the trainer is built: TRL is loaded) beside the progress bar just opened

        say(line)
        manifest["resolved"]["engine"] = engine
        manifest["launches"][-1]["resolved"]["engine"] = engine
        write_json(Path(output_dir) / MANIFEST, manifest)


def checkpoint_recorder():
    """A callback that copies the run manifest into each checkpoint as it is saved: a checkpoint copied elsewhere
    still says which settings produced it (`--resume_from_checkpoint` compares them). As training begins, it records
    which engine runs (`_record_engine`)."""
    from transformers import TrainerCallback

    class CheckpointRecorder(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            _record_engine(args.output_dir, model)  # the model is prepared: accelerate has set its engine up

        def on_save(self, args, state, control, **kwargs):
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            manifest = read_manifest(args.output_dir)
            if is_main_process() and manifest and checkpoint.is_dir():
                write_json(checkpoint / MANIFEST, manifest)

    return CheckpointRecorder()


def _jsonable(config):
    if not hasattr(config, "to_dict"):
        return dataclasses.asdict(config)
    # TrainingArguments.to_dict serialises enums and writes every field named `*_token` as "<NAME>", meaning the
    # Hub's secret; the others are settings (PPO's --stop_token, the reward model's --pad_token and --eos_token),
    # recorded as they are.
    found = config.to_dict()
    for name in found:
        if name.endswith("_token") and name not in SECRETS:
            found[name] = getattr(config, name)
    return found


def hidden(flag, value):
    """Whether a manifest's `value` of `flag` is transformers' mask ("<FLAG>"), not the setting: the Hub's token,
    and any `*_token` field of a manifest whose writer masked them all."""
    return value == f"<{flag.upper()}>"


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
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
