"""The output folder of a run: what a launch does with it, the run manifest, checkpoint discovery.

Nothing here deletes anything of the user's; `rlhf.lock` keeps a folder to one run. The manifest (`run_manifest.json`)
says what produced the folder: the configuration, what `auto` and the machine resolved it to, library versions and git
commit; each re-launch (resume) is appended to it, and each checkpoint keeps a copy, so that a checkpoint carries the
settings that produced it.
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
from rlhf.lock import lock_output_dir, make_folder, release_locks
from rlhf.processes import is_main_process, launched_processes, on_gpu

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
    "eval_prompts", "eval_completions", "eval_dataset_name", "eval_steps",  # held-out evaluation: measures only
)


@dataclasses.dataclass
class Launch:
    """What a launch does with its output_dir: start fresh, or go on from `checkpoint` with `changes` applied."""

    checkpoint: Path | None = None
    changes: dict = dataclasses.field(default_factory=dict)  # flag -> [value in the run so far, value now]


def prepare_output_dir(output_dir, configs=(), resume_from_checkpoint=None):
    """Take `output_dir` for this run, and decide what the launch does with it, refusing anything that would lose or
    misreport work.

    - another live run holds the folder (`lock_output_dir`): refused;
    - a new or empty folder (or one with only the user's own files, or a run that never saved a checkpoint): a
      fresh run;
    - an interrupted run: resume from its newest complete checkpoint (or `resume_from_checkpoint`);
    - a finished run and the same settings: `NothingToDo`; with a longer training length: continue from its last
      checkpoint to the new total.
    Going on from a checkpoint with settings other than those that produced it (`MAY_CHANGE` aside), or from one
    without its optimizer state, is refused, naming each flag. Only the lock is written here (in a new folder that
    is removed again if the run writes nothing): `record_launch` writes the manifest once the data has loaded.
    """
    folder = Path(output_dir)
    lock_output_dir(folder)
    try:
        return _decide(folder, configs, resume_from_checkpoint)
    except BaseException:
        release_locks()  # a refused or finished-already launch leaves the folder as it found it
        raise


def _decide(folder, configs, resume_from_checkpoint):
    manifest = read_manifest(folder)
    clashes = [] if manifest else [name for name in RUN_FILES if (folder / name).exists()]
    if clashes:
        raise UserError(
            f"{folder} already holds {', '.join(clashes)}, not written by a run of this package; choose a new "
            "--output_dir (nothing there is ever overwritten unasked)"
        )
    _check_same_script(manifest, configs, f"{folder} holds a run", "choose a new --output_dir")
    checkpoint = _checkpoint_to_resume(folder, resume_from_checkpoint)
    if checkpoint is None and not manifest.get("finished_at"):
        return Launch()  # nothing trained yet: any settings start afresh
    config, resolved = config_sections(configs), resolved_settings(configs)
    record = _checkpoint_record(folder, checkpoint)  # None: the checkpoint is the folder's own
    _check_same_script(record, configs, f"--resume_from_checkpoint {checkpoint} comes from a run",
                       "pass a checkpoint of this script's run, or drop the flag")
    changes = {}
    for settings in (manifest, record):
        if settings:
            changes.update(_compare_resolved(changed_flags(settings.get("config", {}), config),
                                             settings.get("resolved", {}), resolved, config))
            changes = _without_moved_defaults(changes)
    _note_other_trl(record or manifest, configs)
    refused = {flag: values for flag, values in changes.items() if flag not in MAY_CHANGE}
    if refused:
        owner = f"{checkpoint} comes from a run" if record else f"{folder} holds a run"
        raise UserError(
            f"{owner} trained with other settings: {_describe(refused)}; give the run's own values to resume or "
            "continue it, or choose a new --output_dir for a new run"
        )
    if manifest.get("finished_at"):
        _check_continues(folder, manifest, changes, checkpoint)  # a finished run may have nothing to do
    _check_optimizer_state(checkpoint)
    return Launch(checkpoint, changes)


# Defaults that TRL moved between the releases a run may have started on and this one, for settings that do not act
# on the models this package trains: {flag: (old default, new default)}. A run recorded with the old default resumes.
MOVED_DEFAULTS = {
    # TRL 1.16: None, the model's own coefficient, was 0.001 in 1.12; it weighs the router's loss of a
    # mixture-of-experts model, and TRL 1.16 refuses any value for another model.
    "router_aux_loss_coef": (0.001, None),
}

# What a run started on another TRL release trains differently from here on, by trainer (its config's class).
TRL_MOVE = {
    "GRPOTrainingConfig": "GRPO's log-probabilities now come through TRL's fused LM head (the same maths, other "
                          "rounding)",
    "PPOTrainingConfig": "PPO is now the package's own copy of TRL 1.12's (equal to it), except that a rollout whose "
                         "completions all scored the same no longer moves the policy through AdamW's momentum",
    "RewardTrainingConfig": "the reward model trains with that release's RewardTrainer",
}


def _without_moved_defaults(changes):
    return {flag: values for flag, values in changes.items() if tuple(values) != MOVED_DEFAULTS.get(flag)}


def _note_other_trl(settings, configs):
    """Say it when a run goes on with another TRL release than the one it was started with, and what changes."""
    before, now = (settings.get("versions") or {}).get("trl"), versions().get("trl")
    if before and now and before != now and is_main_process():
        what = TRL_MOVE.get(type(configs[-1]).__name__ if configs else "")
        print(f"note: this run was trained with trl {before} so far and goes on with trl {now}"
              + (f": {what}." if what else "."), flush=True)


def _check_same_script(settings, configs, owner, fix):
    """Refuse a run or checkpoint of another script (a GRPO one given to PPO): its manifest lacks this script's
    training config, and its files (trainer state, models) are not what this script resumes or continues."""
    sections = (settings or {}).get("config") or {}
    trainer = type(configs[-1]).__name__ if configs else None
    if sections and trainer and trainer not in sections:
        raise UserError(
            f"{owner} of {settings.get('script', 'another script')}, which this script cannot resume or continue; "
            f"{fix} (or go on with that script)"
        )


def _checkpoint_record(folder, checkpoint):
    """The settings that produced a checkpoint outside `folder`: its own copy of the manifest (a checkpoint copied
    elsewhere keeps it), else the manifest of the run folder it sits in. None for a checkpoint of `folder` itself
    (the folder's manifest says it); {} with one line said when there is no record at all."""
    if checkpoint is None or checkpoint.resolve().parent == folder.resolve():
        return None
    record = read_manifest(checkpoint) or read_manifest(checkpoint.parent)
    if not record and is_main_process():
        print(f"note: {checkpoint} carries no {MANIFEST} (nor does its folder), so the settings that produced it "
              "cannot be compared with these; resuming with the settings given.", flush=True)
    return record


# What `auto` and the machine resolve to that changes what is learned: compared on resume like the flags.
RESOLVED_COMPARED = ("dtype", "reward_model_dtype")


def _compare_resolved(changes, old, new, config):
    """`changes` with the flags of `RESOLVED_COMPARED` judged by what they resolve to where both launches say it:
    `auto` then `bfloat16` on a GPU is no change; `auto` on a GPU, then on a CPU is one, reported as such."""
    spelled = {flag: value for section in config.values() for flag, value in section.items()}
    changes = dict(changes)
    for flag in RESOLVED_COMPARED:
        if old.get(flag) and new.get(flag):
            changes.pop(flag, None)
            if old[flag] != new[flag]:
                changes[flag] = [old[flag], new[flag] if spelled.get(flag) == new[flag] else
                                 f"{spelled.get(flag)}, which is {new[flag]} here"]
    return changes


def _check_optimizer_state(checkpoint):
    """Resuming restores the optimizer: a checkpoint without its state (--save_only_model) cannot be resumed."""
    # optimizer.pt (plain), optimizer.bin / optimizer_0/ (FSDP), global_step*/ (DeepSpeed).
    if not any(checkpoint.glob("optimizer*")) and not any(checkpoint.glob("global_step*")):
        raise UserError(
            f"{checkpoint} holds no optimizer state (no optimizer.pt: saved with --save_only_model?), so training "
            "cannot resume where it stopped; resume from a checkpoint that has it (--resume_from_checkpoint), or "
            f"choose a new --output_dir (--model_name_or_path {checkpoint} starts a new run from its weights)"
        )


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
            f"{finished} but keeps no checkpoint (saved with --save_strategy no, or deleted since), so it cannot "
            f"continue with its optimizer state; choose a new --output_dir (--model_name_or_path {folder} starts a "
            "new run from its final weights)"
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


def _engine(configs):
    """accelerate's distributed type and process count, from the TrainingArguments (which set accelerate up, as the
    Trainer is about to). FSDP shows once the Trainer's Accelerator exists: `EngineRecorder` records what ran."""
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


def _record_engine(output_dir, model):
    """Say which engine runs (main process) and record it in the manifest (`resolved.engine`, and this launch's),
    checked on the prepared model (`describe_engine`)."""
    engine, line = describe_engine(model)
    manifest = read_manifest(output_dir)
    if is_main_process() and manifest:
        print(line, flush=True)
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
    resolved = {**resolved_settings(configs), **_engine(configs)}
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


def start_run(script, configs):
    """Begin a launch of `script` on the output folder of its training arguments (the last of `configs`), before any
    data or model loads: the folder is taken and what the launch does is decided (`prepare_output_dir`: fresh,
    resume, continue; refusals and `NothingToDo` raise here). The run then goes `record` (once the data has loaded),
    `train`, `save`, `finish`. The folder stays held until the script ends: `exit_on_user_error` frees it on every
    way out (done, refused, interrupted, NaN), and so does interpreter exit for any other caller."""
    training = configs[-1]
    launch = prepare_output_dir(training.output_dir, configs, training.resume_from_checkpoint)
    if launch.checkpoint is None:
        _note_checkpoint_as_model(getattr(configs[0], "model_name_or_path", None), training.output_dir)
    return TrainingRun(script, tuple(configs), training.output_dir, launch)


def _note_checkpoint_as_model(model, output_dir):
    """Say what a run's checkpoint given as the model does: a new run from its weights (a fresh optimizer and
    schedule, from step 0), not a continuation of that run, and how to get the other."""
    path = Path(model).expanduser() if model else None
    if path is None or not _is_complete(path) or not is_main_process():
        return
    step = json.loads((path / "trainer_state.json").read_text(encoding="utf-8")).get("global_step")
    print(f"note: {model} is step {step} of the run in {path.parent}: this starts a new run in {output_dir} from its "
          "weights, with a fresh optimizer and schedule from step 0; to continue that run instead (its optimizer, "
          f"schedule and step), run its command again with --output_dir {path.parent}, or add "
          f"--resume_from_checkpoint {model}", flush=True)


@dataclasses.dataclass
class TrainingRun:
    """One launch of a training script on its output folder, from `start_run` to `finish`."""

    script: str
    configs: tuple
    output_dir: str
    launch: Launch
    recorded: bool = False
    health: object = None  # the run's HealthCallback (rlhf/health.py), from `train`
    report: object = None  # its RunReport (rlhf/report.py)

    @property
    def checkpoint(self):
        """The checkpoint this launch resumes or continues from; None for a fresh run."""
        return self.launch.checkpoint

    def record(self):
        """Write this launch into the manifest: after the data has loaded (a wrong column leaves a new folder as it
        found it) and before any model loads (an adapter is merged into the folder, `trainable_model_path`)."""
        record_launch(self.output_dir, self.script, self.configs, self.launch)
        self.recorded = True

    def train(self, trainer, train=None):
        """`trainer.train()` (or `train()`) under `guarded_train`: Ctrl-C or SIGTERM saves a checkpoint and exits
        130, a non-finite value exits 1. Returns only when training ran to its end."""
        from rlhf.guard import guarded_train  # it imports transformers

        if not self.recorded:
            raise RuntimeError("record() the launch before training: each checkpoint keeps a copy of its manifest")
        self._watch(trainer)
        guarded_train(trainer, self.output_dir, self.checkpoint, train)

    def _watch(self, trainer):
        """Add the health checks and the run report. The health callback goes before the reporting callbacks
        (TensorBoard...), so that the `health/<name>` values it adds to a log reach them."""
        from transformers.integrations import get_reporting_integration_callbacks

        from rlhf.health import Alarm, health_callback
        from rlhf.report import RunReport, read_report, report_callback, settings

        earlier = []  # a resumed or continued run keeps its alarms and does not raise them again
        if self.checkpoint is not None:
            try:
                earlier = [Alarm(**alarm) for alarm in read_report(self.output_dir)["health"]]
            except (KeyError, TypeError):
                earlier = []
        training = self.configs[-1]
        flags = {"kind": self.script.removeprefix("train_").removesuffix(".py"),
                 "max_completion_length": getattr(training, "max_completion_length", None)}
        self.health = health_callback(flags, raised=[alarm.name for alarm in earlier])
        self.health.monitor.alarms.extend(earlier)
        if self.checkpoint is not None:  # the checks judge the whole run, its logs before this launch included
            state = Path(self.checkpoint) / "trainer_state.json"
            self.health.monitor.replay(json.loads(state.read_text(encoding="utf-8")).get("log_history", []))
        self.report = RunReport(self.output_dir, self.script, settings(self.configs, read_manifest(self.output_dir)),
                                self.health.monitor)
        # The health check goes right before the reporting integrations (TensorBoard...), which stay where they are:
        # its on_log adds `health/` keys for them to write, and callbacks after them (the held-out evaluation) find
        # them set up by their on_train_begin (TensorBoard's writer would otherwise open under the working folder).
        reporters = tuple(get_reporting_integration_callbacks(trainer.args.report_to))
        callbacks = trainer.callback_handler.callbacks
        first = next((i for i, callback in enumerate(callbacks) if isinstance(callback, reporters)), len(callbacks))
        callbacks.insert(first, self.health)
        self.health.reporters = [callback for callback in callbacks if isinstance(callback, reporters)]
        trainer.add_callback(report_callback(self.report))

    def check_reward_accuracy(self, trainer, accuracy, num_pairs):
        """The reward model's held-out pairwise accuracy, known once training has ended: near chance is a health
        alarm (printed, logged to TensorBoard, in the run report)."""
        from rlhf.health import log_after_training

        alarm = self.health.monitor.reward_accuracy(accuracy, num_pairs, trainer.state.global_step)
        if alarm is not None and is_main_process():
            print(alarm.line, flush=True)
            log_after_training(self.health.reporters, trainer.state.global_step, alarm)

    def save(self, trainer, tokenizer):
        """Save the final model (with LoRA, the adapter) in every process, since FSDP and ZeRO-3 gather the weights
        to save them, and its tokenizer from the main process."""
        trainer.save_model(self.output_dir)
        if is_main_process():
            tokenizer.save_pretrained(self.output_dir)

    def finish(self, trainer, message, **extra):
        """Once everything is saved: mark the run finished (the same command again has nothing to do) with the step
        it reached and `extra`, and say `message`, from the main process."""
        if is_main_process():
            mark_finished(self.output_dir, global_step=trainer.state.global_step, **extra)
            if self.report is not None:
                self.report.write(trainer.state, finished=True)
            print(message, flush=True)


def write_json(path, data):
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
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
