import json
from dataclasses import dataclass

import pytest

from rlhf.errors import NothingToDo, UserError
from rlhf.run import changed_flags, last_checkpoint, mark_finished, prepare_output_dir, read_manifest, record_launch


@dataclass
class Settings:
    """A stand-in for a script's configs: a length flag, an operational flag and a training flag."""

    max_steps: int = 10
    logging_steps: int = 1
    learning_rate: float = 1e-5


def make_checkpoint(folder, step, complete=True):
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_text("weights")
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


def test_a_finished_run_without_a_checkpoint_cannot_continue(tmp_path):
    finished_run(tmp_path, Settings(), step=10, checkpoint=False)
    with pytest.raises(UserError, match="kept no checkpoint"):
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


def test_unwritable_output_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UserError, match="cannot write to --output_dir"):
        record_launch(blocker / "run", "train_grpo.py", [Settings()])
