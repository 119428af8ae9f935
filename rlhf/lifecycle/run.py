"""What a launch does with its output folder (fresh, resume, continue, nothing to do) and the `TrainingRun` lifecycle.

Nothing here deletes anything of the user's; `rlhf.lifecycle.lock` keeps a folder to one run,
`rlhf.lifecycle.manifest` records what produced it, `rlhf.lifecycle.checkpoints` finds what to resume from.
"""

import dataclasses
import json
from pathlib import Path

from rlhf.errors import NothingToDo, UserError
from rlhf.lifecycle.checkpoints import is_complete, last_checkpoint
from rlhf.lifecycle.lock import lock_output_dir, release_locks
from rlhf.lifecycle.manifest import (
    MANIFEST,
    changed_flags,
    config_sections,
    mark_finished,
    read_manifest,
    record_launch,
    resolved_settings,
    versions,
)
from rlhf.processes import is_main_process

# Files a run writes at the top of output_dir (save_pretrained, TRL's model card, Trainer's args). In a folder
# that is not one of our runs, any of these already there belongs to the user and is never written over.
RUN_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", "README.md", "training_args.bin",
)


# Flags that may differ between the launches of one run. How long it trains: raising it continues a finished run.
LENGTH_FLAGS = ("max_steps", "num_train_epochs", "total_episodes")
# How a run logs, saves and reports, and what the machine decides (bf16 on a GPU, CPU under torchrun): none of these
# changes what is learned. Any other difference (model, data, rewards, learning rate, batch...) is refused, because
# a resumed run keeps its optimizer and schedule and would not do what the new value says.
MAY_CHANGE = (
    *LENGTH_FLAGS, "output_dir", "resume_from_checkpoint", "logging_steps", "logging_first_step", "logging_strategy",
    "save_steps", "save_strategy", "save_total_limit", "report_to", "run_name", "disable_tqdm", "log_level",
    "log_level_replica", "log_completions", "num_completions_to_print",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "bf16", "tf32", "use_cpu", "local_rank",
    # speed and memory: the same maths (recomputed activations; PPO's rollout generated in other chunks, other draws)
    "gradient_checkpointing", "local_rollout_forward_batch_size",
    "eval_prompts", "eval_completions", "eval_dataset_name", "eval_steps",  # held-out evaluation: measures only
    "end_on_best_checkpoint",  # which checkpoint's weights the final model gets at the end, not what is learned
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
    elif any(flag in LENGTH_FLAGS for flag in changes):
        _check_resumes(checkpoint, config)
    _check_optimizer_state(checkpoint)
    return Launch(checkpoint, changes)


# Defaults that TRL moved between the releases a run may have started on and this one, for settings that do not act
# on the models this package trains: {flag: (old default, new default)}. A run recorded with the old default resumes.
MOVED_DEFAULTS = {
    # TRL 1.16: None, the model's own coefficient, was 0.001 in 1.12; it weighs the router's loss of a
    # mixture-of-experts model, and TRL 1.16 refuses any value for another model.
    "router_aux_loss_coef": (0.001, None),
    # GRPO's dropout off by default (TRL's is on): nothing changes for a model without dropout (Llama, Qwen...), and
    # one with it (GPT-2) trains on without the noise in its first KL and ratio.
    "disable_dropout": (False, True),
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
    if not is_complete(checkpoint):
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


def _check_resumes(checkpoint, config):
    """An interrupted run resumes only to a training length that reaches the checkpoint: one that ends before it
    would train nothing and "finish" past its own end. Judged on the length in effect: --max_steps, else PPO's
    --total_episodes, else --num_train_epochs."""
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    flags = {flag: value for section in config.values() for flag, value in section.items()}
    max_steps, episodes = flags.get("max_steps"), flags.get("total_episodes")
    if max_steps is not None and max_steps > 0:
        flag, value, reached, where = "max_steps", max_steps, state.get("global_step", 0), "step"
    elif episodes is not None:
        flag, value, reached, where = "total_episodes", episodes, state.get("episode", 0), "episode"
    elif flags.get("num_train_epochs") is not None:
        flag, value, reached, where = "num_train_epochs", flags["num_train_epochs"], state.get("epoch") or 0, "epoch"
    else:
        return
    if value < reached:
        raise UserError(
            f"{checkpoint} is a run interrupted at {where} {reached:g}, and --{flag} {value:g} ends before it, so "
            f"resuming would train nothing; give --{flag} {reached:g} or more to resume the run, or choose a new "
            "--output_dir"
        )


def _describe(changes):
    return ", ".join(f"--{flag} {new} (the run has {old})" for flag, (old, new) in changes.items())


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
    if path is None or not is_complete(path) or not is_main_process():
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
    health: object = None  # the run's HealthCallback (rlhf/lifecycle/health.py), from `train`
    report: object = None  # its RunReport (rlhf/lifecycle/report.py)

    @property
    def checkpoint(self):
        """The checkpoint this launch resumes or continues from; None for a fresh run."""
        return self.launch.checkpoint

    def record(self):
        """Write this launch into the manifest: after the data has loaded (a wrong column leaves a new folder as it
        found it) and before any model loads (an adapter is merged into the folder, `trainable_model_path`)."""
        record_launch(self.output_dir, self.script, self.configs, self.launch)
        self.recorded = True

    def train(self, trainer):
        """`trainer.train()` (from the launch's checkpoint, if any) under `guarded_train`: Ctrl-C or SIGTERM saves a
        checkpoint and exits 130, a non-finite value exits 1. Returns only when training ran to its end."""
        from rlhf.lifecycle.guard import guarded_train  # it imports transformers

        if not self.recorded:
            raise RuntimeError("record() the launch before training: each checkpoint keeps a copy of its manifest")
        from rlhf.trl_compat import show_progress_bar

        self._watch(trainer)
        show_progress_bar(trainer)  # the bar with the reward, KL and loss beside it; each log's dict goes to the logs
        guarded_train(trainer, self.output_dir, self.checkpoint)

    def _watch(self, trainer):
        """Add the health checks and the run report. The health callback goes before the reporting callbacks
        (TensorBoard...), so that the `health/<name>` values it adds to a log reach them."""
        from rlhf.lifecycle.health import Alarm, health_callback
        from rlhf.lifecycle.report import RunReport, read_report, report_callback, settings
        from rlhf.rewards.functions import logged_name
        from rlhf.trl_compat import add_callback_before_reporters

        earlier = []  # a resumed or continued run keeps its alarms and does not raise them again
        if self.checkpoint is not None:
            try:
                earlier = [Alarm(**alarm) for alarm in read_report(self.output_dir)["health"]]
            except (KeyError, TypeError):
                earlier = []
        training = self.configs[-1]
        names = next(([logged_name(name) for name in config.reward_funcs] for config in self.configs
                      if hasattr(config, "reward_funcs")), [])
        weights = getattr(training, "reward_weights", None) or [1.0] * len(names)
        flags = {"kind": self.script.removeprefix("train_").removesuffix(".py"),
                 "max_completion_length": getattr(training, "max_completion_length", None),
                 "dynamic_sampling_max_gen_batches": getattr(training, "dynamic_sampling_max_gen_batches", None),
                 "reward_weights": dict(zip(names, weights))}
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
        self.health.reporters = add_callback_before_reporters(trainer, self.health)
        trainer.add_callback(report_callback(self.report))

    def check_reward_accuracy(self, trainer, accuracy, num_pairs):
        """The reward model's held-out pairwise accuracy, known once training has ended: near chance is a health
        alarm (printed, logged to TensorBoard, in the run report)."""
        from rlhf.lifecycle.health import log_after_training

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


