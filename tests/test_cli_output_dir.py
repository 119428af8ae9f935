"""One run per output folder (the lock), and resuming only from checkpoints that can be resumed."""

import json

import pytest

from conftest import assert_ok, error_line, grpo_args, ppo_args, run_in_process, start_script, wait_for


@pytest.mark.slow
def test_a_second_run_is_refused_while_the_first_runs_and_a_killed_runs_lock_is_taken_over(tiny_models, tmp_path,
                                                                                            run_cli):
    out = tmp_path / "run"
    lock = out / "run.lock"
    first = start_script("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "200", "--save_steps", "1000"))
    try:
        wait_for(lock, first)
        second = run_cli("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "200", "--save_steps", "1000"))
        line = error_line(second)
        assert f"{out} is in use by another run (PID {first.pid} on this host" in line
        assert "wait for it to finish, or choose another --output_dir" in line
        assert json.loads(lock.read_text())["pid"] == first.pid  # the running run keeps its folder
    finally:
        first.kill()  # SIGKILL: nothing runs on the way out, so the lock stays behind
        first.communicate()
    assert lock.exists()

    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "2"))
    assert_ok(result)
    assert f"note: took over {lock}, left by a run that is no longer running (PID {first.pid}" in result.stdout
    assert not lock.exists()  # released at the end
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["resolved"] == {"device": "cpu", "dtype": "float32", "reward_model_dtype": "float32",
                                    "distributed_type": "NO", "num_processes": 1,
                                    "engine": {"distributed_type": "NO", "num_processes": 1, "sharded": []}}
    # Each checkpoint carries the settings that produced it.
    assert json.loads((out / "checkpoint-2" / "run_manifest.json").read_text())["config"] == manifest["config"]


def reward_args(models, output_dir):
    return ["--model_name_or_path", models["policy"], "--dataset_name", models["prompts"], "--output_dir", output_dir]


@pytest.mark.parametrize("script, args", [("train_grpo.py", grpo_args), ("train_ppo.py", ppo_args),
                                          ("train_reward_model.py", reward_args)])
def test_a_checkpoint_without_optimizer_state_is_refused_before_any_model_loads(tiny_models, tmp_path, run_cli,
                                                                               script, args):
    out = tmp_path / "run"
    checkpoint = out / "checkpoint-2"  # as --save_only_model leaves it: weights and trainer_state.json only
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    for result in (run_cli(script, *args(tiny_models, out)),
                   run_cli(script, *args(tiny_models, tmp_path / "new"), "--resume_from_checkpoint", checkpoint)):
        line = error_line(result)
        assert f"{checkpoint} holds no optimizer state" in line and "choose a new --output_dir" in line
    assert not (tmp_path / "new").exists() and not (out / "run.lock").exists()
