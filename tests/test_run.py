import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerState

from rlhf.cli import exit_on_user_error
from rlhf.errors import NonFiniteError, NothingToDo, UserError
from rlhf.lifecycle.checkpoints import last_checkpoint
from rlhf.lifecycle.lock import release_locks
from rlhf.lifecycle.manifest import changed_flags, mark_finished, read_manifest, record_launch
from rlhf.lifecycle.run import prepare_output_dir, start_run


@dataclass
class Settings:
    """A stand-in for a script's configs: a length flag, an operational flag and a training flag."""

    max_steps: int = 10
    logging_steps: int = 1
    learning_rate: float = 1e-5


def make_checkpoint(folder, step, complete=True, optimizer=True):
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_text("weights")
    if optimizer:
        (checkpoint / "optimizer.pt").write_text("state")
    if complete:
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return checkpoint


def finished_run(folder, settings, step, checkpoint=True):
    """A run folder as a finished run leaves it: manifest, final checkpoint (unless --save_strategy no), finished."""
    record_launch(folder, "train_grpo.py", [settings])
    if checkpoint:
        make_checkpoint(folder, step)
    mark_finished(folder, global_step=step)


def test_last_checkpoint_picks_the_newest_complete_one(tmp_path):
    assert last_checkpoint(tmp_path) is None
    make_checkpoint(tmp_path, 5)
    newest = make_checkpoint(tmp_path, 20)
    make_checkpoint(tmp_path, 100, complete=False)  # cut short: no trainer_state.json
    (tmp_path / "checkpoint-notes").mkdir()
    assert last_checkpoint(tmp_path) == newest
    (newest / "trainer_state.json").write_text('{"global_st')  # half-written
    assert last_checkpoint(tmp_path).name == "checkpoint-5"


@pytest.mark.parametrize("shard", [None, "20KB"], ids=["one_file", "shards"])
def test_weights_saved_by_save_pretrained_come_back_tied_head_included_and_another_models_are_refused(
        tiny_models, tmp_path, shard):
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlhf.lifecycle.checkpoints import load_pretrained_weights

    trained = AutoModelForCausalLM.from_pretrained(tiny_models["policy"])
    assert trained.config.tie_word_embeddings  # its LM head is saved once, as the embeddings
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(1.0)
    trained.save_pretrained(tmp_path / "saved", **({"max_shard_size": shard} if shard else {}))
    assert (tmp_path / "saved" / "model.safetensors.index.json").exists() == bool(shard)
    fresh = AutoModelForCausalLM.from_pretrained(tiny_models["policy"])
    load_pretrained_weights(fresh, tmp_path / "saved")
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), trained.state_dict().values()))
    with pytest.raises(ValueError, match="does not hold this model's weights"):
        load_pretrained_weights(AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"]),
                                tmp_path / "saved")


def test_random_states_come_back_from_this_process_file_and_another_process_count_has_none(tmp_path):
    import random

    import numpy as np
    import torch

    from rlhf.lifecycle.checkpoints import load_rng_state, save_rng_state

    save_rng_state(tmp_path, 1, 2)
    assert (tmp_path / "rng_state_1.pth").exists()  # transformers' Trainer's name: its checkpoints resume alike
    expected = random.random(), np.random.rand(), torch.rand(1)
    torch.manual_seed(1234), random.seed(1234), np.random.seed(1234)
    assert load_rng_state(tmp_path, 1, 2)
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])
    assert not load_rng_state(tmp_path, 0, 1)  # a checkpoint of two processes holds no rng_state.pth


def test_prepare_output_dir_keeps_user_files_and_refuses_to_overwrite(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "my_notes.txt").write_text("mine")
    launch = prepare_output_dir(run, [Settings()])
    assert launch.checkpoint is None and launch.changes == {}
    assert (run / "my_notes.txt").read_text() == "mine"

    (run / "README.md").write_text("my readme")
    with pytest.raises(UserError, match="README.md"):
        prepare_output_dir(run, [Settings()])


def test_an_interrupted_run_resumes_and_the_manifest_records_each_launch(tmp_path):
    record_launch(tmp_path, "train_grpo.py", [Settings()])
    checkpoint = make_checkpoint(tmp_path, 3)
    launch = prepare_output_dir(tmp_path, [Settings(logging_steps=5)])  # how it logs may change
    assert launch.checkpoint == checkpoint and launch.changes == {"logging_steps": [1, 5]}
    record_launch(tmp_path, "train_grpo.py", [Settings(logging_steps=5)], launch)
    manifest = read_manifest(tmp_path)
    assert [launch["resumed_from"] for launch in manifest["launches"]] == [None, str(checkpoint)]
    assert [launch["changed"] for launch in manifest["launches"]] == [{}, {"logging_steps": [1, 5]}]
    assert manifest["config"]["Settings"]["logging_steps"] == 5  # what is in effect now
    assert set(manifest["versions"]) >= {"python", "torch", "transformers", "trl", "peft"}


@dataclass
class GRPOTrainingConfig:
    """A stand-in for the GRPO config, with a setting whose default TRL 1.16 moved (0.001 -> None)."""

    max_steps: int = 10
    learning_rate: float = 1e-5
    router_aux_loss_coef: float | None = None


def test_a_run_started_on_trl_1_12_resumes_here_and_the_launch_says_what_changes(tmp_path, capsys):
    record_launch(tmp_path, "train_grpo.py", [GRPOTrainingConfig(router_aux_loss_coef=0.001)])
    manifest = read_manifest(tmp_path)
    manifest["versions"]["trl"] = "1.12.0"
    (tmp_path / "run_manifest.json").write_text(json.dumps(manifest))
    checkpoint = make_checkpoint(tmp_path, 3)

    launch = prepare_output_dir(tmp_path, [GRPOTrainingConfig()])  # the moved default is no change of the run's
    assert launch.checkpoint == checkpoint and launch.changes == {}
    said = capsys.readouterr().out
    assert said.startswith("note: this run was trained with trl 1.12.0 so far and goes on with trl ")
    assert "GRPO's log-probabilities now come through TRL's fused LM head" in said and said.count("\n") == 1
    release_locks()
    with pytest.raises(UserError, match=r"--router_aux_loss_coef 0.01 \(the run has 0.001\)"):
        prepare_output_dir(tmp_path, [GRPOTrainingConfig(router_aux_loss_coef=0.01)])  # a value given is compared


def test_a_run_that_never_saved_a_checkpoint_starts_afresh_with_any_settings(tmp_path):
    record_launch(tmp_path, "train_grpo.py", [Settings()])  # e.g. it stopped on a typo before step 1
    assert prepare_output_dir(tmp_path, [Settings(learning_rate=1e-3)]).checkpoint is None


def test_a_changed_training_flag_is_refused_naming_it(tmp_path):
    record_launch(tmp_path, "train_grpo.py", [Settings()])
    make_checkpoint(tmp_path, 3)
    with pytest.raises(UserError, match=r"--learning_rate 0.001 \(the run has 1e-05\)"):
        prepare_output_dir(tmp_path, [Settings(learning_rate=1e-3)])
    assert len(read_manifest(tmp_path)["launches"]) == 1  # nothing written


def test_a_finished_run_with_the_same_settings_has_nothing_to_do(tmp_path):
    finished_run(tmp_path, Settings(), step=10)
    before = sorted(path.name for path in tmp_path.iterdir())
    with pytest.raises(NothingToDo, match="finished at step 10.*nothing to do"):
        prepare_output_dir(tmp_path, [Settings()])
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_a_finished_run_continues_when_its_length_is_raised(tmp_path):
    finished_run(tmp_path, Settings(), step=10)
    launch = prepare_output_dir(tmp_path, [Settings(max_steps=20)])
    assert launch.checkpoint.name == "checkpoint-10" and launch.changes == {"max_steps": [10, 20]}
    with pytest.raises(UserError, match="--max_steps 8 does not go beyond it"):
        prepare_output_dir(tmp_path, [Settings(max_steps=8)])
    with pytest.raises(UserError, match="--learning_rate"):  # a longer run, but also another learning rate
        prepare_output_dir(tmp_path, [Settings(max_steps=20, learning_rate=1e-3)])


@dataclass
class Lengths:
    """A stand-in for PPO's training lengths: --max_steps wins, then --total_episodes, then --num_train_epochs."""

    max_steps: int = -1
    total_episodes: int | None = None
    num_train_epochs: float = 3.0


@pytest.mark.parametrize("run, shorter, refused, enough", [
    (Settings(max_steps=10), Settings(max_steps=5), "step 6, and --max_steps 5", Settings(max_steps=6)),
    (Lengths(total_episodes=40), Lengths(total_episodes=8), "episode 12, and --total_episodes 8",
     Lengths(total_episodes=12)),
    (Lengths(), Lengths(num_train_epochs=0.5), "epoch 0.75, and --num_train_epochs 0.5", Lengths(num_train_epochs=1)),
    (Lengths(total_episodes=40), Lengths(max_steps=5, total_episodes=10), "step 6, and --max_steps 5",
     Lengths(max_steps=6, total_episodes=12)),
], ids=["max_steps", "total_episodes", "num_train_epochs", "max_steps-over-episodes"])
def test_an_interrupted_run_resumed_with_a_length_before_its_checkpoint_is_refused(tmp_path, run, shorter, refused,
                                                                                    enough):
    record_launch(tmp_path, "train_ppo.py", [run])
    checkpoint = make_checkpoint(tmp_path, 6)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 6, "episode": 12, "epoch": 0.75}))
    before = {path: path.stat().st_mtime_ns for path in tmp_path.rglob("*")}
    with pytest.raises(UserError, match=f"{checkpoint} is a run interrupted at {refused} ends before it, so resuming "
                                        "would train nothing; give"):
        prepare_output_dir(tmp_path, [shorter])
    assert {path: path.stat().st_mtime_ns for path in tmp_path.rglob("*")} == before  # nothing written
    assert prepare_output_dir(tmp_path, [enough]).checkpoint == checkpoint  # up to where it stopped: it resumes


def test_a_finished_run_without_a_checkpoint_cannot_continue(tmp_path):
    finished_run(tmp_path, Settings(), step=10, checkpoint=False)
    with pytest.raises(UserError, match="keeps no checkpoint"):
        prepare_output_dir(tmp_path, [Settings(max_steps=20)])


def test_resume_from_checkpoint_names_a_complete_checkpoint(tmp_path):
    run = tmp_path / "run"
    other = make_checkpoint(tmp_path / "elsewhere", 4)
    assert prepare_output_dir(run, [Settings()], resume_from_checkpoint=str(other)).checkpoint == other
    with pytest.raises(UserError, match="not a complete checkpoint"):
        prepare_output_dir(run, [Settings()], resume_from_checkpoint=str(tmp_path / "missing"))


def test_changed_flags_compares_only_what_both_sides_have():
    old = {"A": {"x": 1, "y": 2}}
    assert changed_flags(old, {"A": {"x": 1, "y": 3, "new_flag": 0}}) == {"y": [2, 3]}
    assert changed_flags(old, {"B": {"x": 5}}) == {}
    # transformers' mask of a `*_token` field is no value to compare: a run recorded with it resumes
    assert changed_flags({"A": {"stop_token": "<STOP_TOKEN>"}}, {"A": {"stop_token": "eos"}}) == {}


def test_unwritable_output_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UserError, match="cannot write to --output_dir"):
        record_launch(blocker / "run", "train_grpo.py", [Settings()])


@dataclass
class Machine:
    """A stand-in for the configs' precision fields: `auto` resolves on the machine."""

    max_steps: int = 10
    dtype: str = "float32"
    reward_model_dtype: str = "auto"
    use_cpu: bool = False


def test_the_manifest_records_resolved_values_and_a_resume_compares_them(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    record_launch(tmp_path, "train_grpo.py", [Machine()])
    assert read_manifest(tmp_path)["resolved"] == {"device": "cuda", "dtype": "float32",
                                                   "reward_model_dtype": "bfloat16"}
    make_checkpoint(tmp_path, 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same command, resumed on a CPU
    with pytest.raises(UserError, match=r"--reward_model_dtype auto, which is float32 here \(the run has bfloat16\)"):
        prepare_output_dir(tmp_path, [Machine()])
    assert prepare_output_dir(tmp_path, [Machine(reward_model_dtype="bfloat16")]).checkpoint.name == "checkpoint-3"


def test_a_checkpoint_elsewhere_is_compared_with_the_settings_that_produced_it(tmp_path, capsys):
    first = tmp_path / "first"
    record_launch(first, "train_grpo.py", [Settings()])
    checkpoint = make_checkpoint(first, 3)
    with pytest.raises(UserError, match=r"checkpoint-3 comes from a run trained with other settings: --learning_rate"):
        prepare_output_dir(tmp_path / "new", [Settings(learning_rate=1e-3)], resume_from_checkpoint=checkpoint)
    assert not (tmp_path / "new").exists()
    launch = prepare_output_dir(tmp_path / "new", [Settings(max_steps=20)], resume_from_checkpoint=checkpoint)
    assert launch.checkpoint == checkpoint and launch.changes == {"max_steps": [10, 20]}

    # A checkpoint copied away from its run keeps its own copy of the manifest (written as it is saved).
    moved = tmp_path / "moved" / "checkpoint-3"
    moved.parent.mkdir()
    checkpoint.rename(moved)
    (moved / "run_manifest.json").write_text((first / "run_manifest.json").read_text())
    with pytest.raises(UserError, match="--learning_rate 0.001"):
        prepare_output_dir(tmp_path / "new2", [Settings(learning_rate=1e-3)], resume_from_checkpoint=moved)

    # No record at all (e.g. a checkpoint of another tool): resumed as given, saying it could not be checked.
    (moved / "run_manifest.json").unlink()
    assert prepare_output_dir(tmp_path / "new3", [Settings()], resume_from_checkpoint=moved).checkpoint == moved
    assert "carries no run_manifest.json" in capsys.readouterr().out


def test_speed_and_memory_settings_may_change_on_resume_and_the_maths_may_not(tmp_path):
    # A quickstart folder trained before its stages kept gradient checkpointing, or a PPO run before its rollout chunk
    # became the machine's: both go on (the same maths), as bf16 and tf32 do.
    from dataclasses import make_dataclass

    Memory = make_dataclass("Memory", [("gradient_checkpointing", bool, False),
                                       ("local_rollout_forward_batch_size", object, 16),
                                       ("learning_rate", float, 1e-5)])
    record_launch(tmp_path, "train_ppo.py", [Memory()])
    make_checkpoint(tmp_path, 3)
    launch = prepare_output_dir(tmp_path, [Memory(True, None)])
    assert launch.checkpoint.name == "checkpoint-3"
    assert launch.changes == {"gradient_checkpointing": [False, True], "local_rollout_forward_batch_size": [16, None]}
    with pytest.raises(UserError, match="--learning_rate"):
        prepare_output_dir(tmp_path, [Memory(True, None, 1e-3)])


def test_ending_on_the_best_checkpoint_may_be_turned_on_or_off_when_a_run_resumes(tmp_path):
    """--end_on_best_checkpoint picks which checkpoint's weights the final model gets once training ends: what is
    learned is the same, so an interrupted run resumes with it turned on or off (the maths may not change)."""
    from dataclasses import make_dataclass

    HeldOut = make_dataclass("HeldOut", [("eval_prompts", int, 8), ("end_on_best_checkpoint", bool, False),
                                         ("learning_rate", float, 1e-5)])
    record_launch(tmp_path, "train_grpo.py", [HeldOut()])
    make_checkpoint(tmp_path, 3)
    launch = prepare_output_dir(tmp_path, [HeldOut(end_on_best_checkpoint=True)])
    assert launch.checkpoint.name == "checkpoint-3" and launch.changes == {"end_on_best_checkpoint": [False, True]}
    record_launch(tmp_path, "train_grpo.py", [HeldOut(end_on_best_checkpoint=True)], launch)
    release_locks()
    launch = prepare_output_dir(tmp_path, [HeldOut()])  # and off again
    assert launch.checkpoint.name == "checkpoint-3" and launch.changes == {"end_on_best_checkpoint": [True, False]}
    release_locks()
    with pytest.raises(UserError, match="--learning_rate"):
        prepare_output_dir(tmp_path, [HeldOut(end_on_best_checkpoint=True, learning_rate=1e-3)])


def test_a_checkpoint_without_optimizer_state_is_refused(tmp_path):
    record_launch(tmp_path, "train_grpo.py", [Settings()])
    checkpoint = make_checkpoint(tmp_path, 3, optimizer=False)  # --save_only_model
    with pytest.raises(UserError, match=f"{checkpoint} holds no optimizer state.*choose a new --output_dir"):
        prepare_output_dir(tmp_path, [Settings()])


@pytest.mark.slow
def test_a_live_run_holds_its_output_dir_and_a_killed_ones_lock_is_taken_over(tmp_path, capsys):
    import os
    import subprocess

    from conftest import ROOT

    other = subprocess.Popen([sys.executable, "-c", "import sys, time; from rlhf.lifecycle import lock; "
                              "lock.lock_output_dir(sys.argv[1]); print('held', flush=True); time.sleep(60)",
                              tmp_path], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    lock = tmp_path / "run.lock"
    try:
        assert other.stdout.readline().strip() == "held"
        holder = json.loads(lock.read_text())
        with pytest.raises(UserError, match=f"in use by another run \\(PID {other.pid} on this host.*wait for it"):
            prepare_output_dir(tmp_path, [Settings()])
        assert json.loads(lock.read_text()) == holder  # the holder's lock is left alone

        other.kill()  # SIGKILL: its record stays, the OS drops its lock
        other.wait()
        prepare_output_dir(tmp_path, [Settings()])
        assert f"took over {lock}, left by a run that is no longer running (PID {other.pid}" in capsys.readouterr().out
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    finally:
        other.kill()
        other.communicate()
        release_locks()
    assert not lock.exists()


@dataclass
class Training:
    """A stand-in for a script's training arguments: where the run goes, and a length."""

    output_dir: str = ""
    resume_from_checkpoint: str = None
    max_steps: int = 10


class Trainer:
    """What a `TrainingRun` uses of a trainer: callbacks (added, popped), a state, `train` (which may fail) and
    `save_model`."""

    def __init__(self, fails=None):
        self.state, self.callbacks, self.fails = TrainerState(), [], fails
        self.callback_handler = SimpleNamespace(callbacks=self.callbacks)
        self.args = SimpleNamespace(report_to=[])

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def pop_callback(self, callback):  # a class: its first instance, as transformers' Trainer pops one
        found = next((c for c in self.callbacks if isinstance(c, callback) or c is callback), None)
        if found is not None:
            self.callbacks.remove(found)
        return found

    def train(self, resume_from_checkpoint=None):
        self.state.global_step = 10
        if self.fails:
            raise self.fails

    def save_model(self, output_dir):
        (Path(output_dir) / "model.safetensors").write_text("weights")


@exit_on_user_error
def script(output_dir, trainer, max_steps=10):
    """A training script's lifecycle, as train_grpo.py, train_ppo.py and train_reward_model.py go through it."""
    run = start_run("train_grpo.py", [Training(str(output_dir), max_steps=max_steps)])
    run.record()
    run.train(trainer)
    run.save(trainer, SimpleNamespace(save_pretrained=lambda folder: (Path(folder) / "tokenizer.json").write_text("")))
    run.finish(trainer, "Saved.")


def test_a_run_holds_its_folder_until_it_ends_and_a_finished_one_has_nothing_to_do(tmp_path, capsys):
    out = tmp_path / "run"
    script(out, Trainer())
    manifest = read_manifest(out)
    assert manifest["finished_at"] and manifest["global_step"] == 10 and len(manifest["launches"]) == 1
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert not (out / "run.lock").exists()
    assert capsys.readouterr().out.splitlines()[-1] == "Saved."

    with pytest.raises(SystemExit) as done:
        script(out, Trainer())
    assert done.value.code == 0 and "nothing to do" in capsys.readouterr().out
    assert read_manifest(out) == manifest and not (out / "run.lock").exists()


@pytest.mark.parametrize("error, code", [(NonFiniteError("training loss became nan at step 3"), 1),
                                         (KeyboardInterrupt(), 130), (UserError("reward function x raised"), 2)])
def test_a_run_stopped_in_training_frees_its_folder_and_is_not_marked_finished(tmp_path, capsys, error, code):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        script(out, Trainer(fails=error))
    assert stopped.value.code == code
    manifest = read_manifest(out)
    assert manifest["finished_at"] is None and len(manifest["launches"]) == 1  # recorded, then stopped
    assert not (out / "model.safetensors").exists() and not (out / "run.lock").exists()


def test_a_bug_in_training_raises_and_still_frees_the_folder(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ZeroDivisionError):
        script(out, Trainer(fails=ZeroDivisionError()))
    assert read_manifest(out)["finished_at"] is None and not (out / "run.lock").exists()


def test_training_before_the_launch_is_recorded_is_a_bug(tmp_path):
    run = start_run("train_grpo.py", [Training(str(tmp_path / "run"))])
    try:
        with pytest.raises(RuntimeError, match="record"):
            run.train(Trainer())
    finally:
        release_locks()


class Exited(Exception):
    """What the stand-in for `os._exit` raises, with the code it was given."""


def exit_now(code):
    raise Exited(code)


@pytest.mark.parametrize("error, code", [(None, 0), (NothingToDo("nothing to do"), 0), (UserError("bad flag"), 2),
                                         (KeyboardInterrupt(), 130), (SystemExit(3), 3), (SystemExit(None), 0)])
def test_a_process_of_a_multi_process_run_ends_with_its_exit_code_before_interpreter_shutdown(monkeypatch, error,
                                                                                               code):
    # A gloo worker thread can abort interpreter shutdown (rlhf/trl_compat `exit_now`): such a process ends without it.
    destroyed = []
    group = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: not destroyed,
                            destroy_process_group=lambda: destroyed.append(True))
    monkeypatch.setitem(sys.modules, "torch.distributed", group)
    monkeypatch.setattr("rlhf.trl_compat.exit_now", exit_now)

    @exit_on_user_error
    def main():
        if error is not None:
            raise error

    with pytest.raises(Exited) as exited:
        main()
    assert exited.value.args == (code,) and destroyed == [True]


def test_a_bug_in_a_multi_process_run_keeps_its_traceback(monkeypatch):
    group = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, destroy_process_group=lambda: None)
    monkeypatch.setitem(sys.modules, "torch.distributed", group)
    monkeypatch.setattr("rlhf.trl_compat.exit_now", lambda code: pytest.fail("a bug's traceback must reach Python"))

    @exit_on_user_error
    def main():
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        main()


@dataclass
class ModelFrom:
    model_name_or_path: str


def test_a_checkpoint_given_as_the_model_says_it_starts_a_new_run_and_how_to_continue_that_one(tmp_path, capsys):
    old = tmp_path / "old"
    record_launch(old, "train_grpo.py", [Settings()])
    checkpoint = make_checkpoint(old, 4)
    start_run("train_grpo.py", [ModelFrom(str(checkpoint)), Training(str(tmp_path / "new"))])
    release_locks()
    said = capsys.readouterr().out
    assert said == (f"note: {checkpoint} is step 4 of the run in {old}: this starts a new run in {tmp_path / 'new'} "
                    "from its weights, with a fresh optimizer and schedule from step 0; to continue that run instead "
                    f"(its optimizer, schedule and step), run its command again with --output_dir {old}, or add "
                    f"--resume_from_checkpoint {checkpoint}\n")
    start_run("train_grpo.py", [ModelFrom(str(old)), Training(str(tmp_path / "other"))])  # a final model: no note
    release_locks()
    assert capsys.readouterr().out == ""
