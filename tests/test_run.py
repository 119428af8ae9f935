import json

import pytest

from rlhf.cli import UserError
from rlhf.run import last_checkpoint, mark_finished, prepare_output_dir, read_manifest, write_manifest


def make_checkpoint(folder, step, complete=True):
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_text("weights")
    if complete:
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return checkpoint


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
    assert prepare_output_dir(run) is None
    assert (run / "my_notes.txt").read_text() == "mine"

    (run / "README.md").write_text("my readme")
    with pytest.raises(UserError, match="README.md"):
        prepare_output_dir(run)


def test_manifest_records_launches_and_a_finished_run_is_not_overwritten(tmp_path):
    from config import ModelArguments

    write_manifest(tmp_path, "train_grpo.py", [ModelArguments()])
    checkpoint = make_checkpoint(tmp_path, 3)
    assert prepare_output_dir(tmp_path) == checkpoint
    write_manifest(tmp_path, "train_grpo.py", [ModelArguments()], resumed_from=checkpoint)
    manifest = read_manifest(tmp_path)
    assert [launch["resumed_from"] for launch in manifest["launches"]] == [None, str(checkpoint)]
    assert manifest["config"]["ModelArguments"]["model_name_or_path"] == ModelArguments.model_name_or_path
    assert set(manifest["versions"]) >= {"python", "torch", "transformers", "trl", "peft"}
    mark_finished(tmp_path)
    with pytest.raises(UserError, match="already holds a finished run"):
        prepare_output_dir(tmp_path)


def test_unwritable_output_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UserError, match="cannot write to --output_dir"):
        prepare_output_dir(blocker / "run")
