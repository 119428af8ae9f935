"""Ctrl-C / SIGTERM, resume, and non-finite numbers, on real subprocess runs of the training scripts."""

import json
import signal
import subprocess
import time

import pytest
import torch

from conftest import (
    ROOT,
    assert_ok,
    error_line,
    grpo_args,
    ppo_args,
    run_in_process,
    script_command,
    start_script,
    wait_for,
)
from rlhf import tiny

pytestmark = pytest.mark.slow


def test_sigterm_saves_a_checkpoint_and_rerun_finishes_with_the_same_step_count(tiny_models, tmp_path):
    out = tmp_path / "run"
    args = grpo_args(tiny_models, out, "--max_steps", "30")
    process = start_script("train_grpo.py", *args)
    wait_for(out / "checkpoint-2" / "trainer_state.json", process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert "SIGTERM received" in stdout and "Re-run the same command to resume" in stdout
    checkpoints = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    stopped_at = checkpoints[-1]
    # It stopped right after the step in flight, not at the end. A signal that lands while checkpoint-2 is
    # being finished stops at step 2: that checkpoint is complete, so nothing is lost.
    assert 2 <= stopped_at < 30
    state = json.loads((out / f"checkpoint-{stopped_at}" / "trainer_state.json").read_text())
    assert state["global_step"] == stopped_at
    assert not (out / "model.safetensors").exists()  # no final model from an interrupted run
    assert not (out / "run.lock").exists()  # the folder is free again

    result = run_in_process("train_grpo.py", *args)
    assert_ok(result)
    assert f"Resuming from {out / f'checkpoint-{stopped_at}'}" in result.stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["global_step"] == 30 and manifest["finished_at"]
    assert [launch["resumed_from"] for launch in manifest["launches"]] == [None, str(out / f"checkpoint-{stopped_at}")]


def test_nan_reward_stops_the_run_naming_the_reward_model_and_step(tiny_models, tmp_path):
    broken = tiny.build_reward_model(tmp_path / "nan_reward", tiny.build_tokenizer())
    from safetensors.torch import load_file, save_file

    weights = load_file(broken / "model.safetensors")
    weights["score.weight"] = torch.full_like(weights["score.weight"], float("nan"))
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})

    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--max_steps", "2",
                                                       reward_model=broken))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert f"reward model {broken}" in error[0] and "non-finite" in error[0] and "step 1" in error[0]
    assert not (tmp_path / "run" / "model.safetensors").exists()
    assert not (tmp_path / "run" / "run.lock").exists()


def test_nan_loss_stops_the_run_before_it_is_checkpointed(tiny_models, tmp_path):
    out = tmp_path / "run"
    # A learning rate this large drives the tiny model's weights to inf/NaN within a few steps.
    result = run_in_process("train_reward_model.py", "--model_name_or_path", tiny_models["policy"],
                            "--dataset_name", tiny_models["prompts"], "--output_dir", out, "--learning_rate", "1e30",
                            "--max_steps", "6", "--logging_steps", "1", "--save_steps", "100", "--eval_samples", "0",
                            "--per_device_train_batch_size", "4", "--max_grad_norm", "0")
    assert result.returncode == 1, result.stderr[-2000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "became nan" in error[0].lower() and "at step" in error[0]
    assert not list(out.glob("checkpoint-*")) and not (out / "model.safetensors").exists()


# A reward function that never returns from step HANG_FROM_STEP on: a step that cannot end.
HANG = """
import os, time
from pathlib import Path

def hang(prompts, completions, trainer_state=None, **kwargs):
    if trainer_state.global_step + 1 >= int(os.environ["HANG_FROM_STEP"]):
        Path(os.environ["HANG_MARK"]).write_text("hanging")
        while True:
            time.sleep(0.1)
    return [0.0] * len(prompts)
"""


@pytest.mark.parametrize("hang_from_step, signals, said", [
    (1, 1, "Aborted at step 0 without saving (no checkpoint was written)."),  # no step has ended: stop at once
    (3, 2, "Aborted at step 2 without saving (the last complete checkpoint is {out}/checkpoint-2)."),  # the second
], ids=["first-step", "second-signal"])
def test_a_run_whose_step_cannot_end_stops_on_sigterm_in_one_line(tiny_models, tmp_path, hang_from_step, signals,
                                                                   said):
    (tmp_path / "hang_reward.py").write_text(HANG)
    out, mark = tmp_path / "run", tmp_path / "hanging"
    command, env = script_command("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "30",
                                                              "--reward_funcs", "hang_reward.hang"),
                                  env={"PYTHONPATH": str(tmp_path), "HANG_FROM_STEP": str(hang_from_step),
                                       "HANG_MARK": str(mark)})
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(mark, process)
        for _ in range(signals):
            process.send_signal(signal.SIGTERM)
            time.sleep(1)  # the first of two is heeded, and said, before the second comes
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert said.format(out=out) in stdout
    assert not (out / "model.safetensors").exists()


def final_weights(output_dir):
    """Every tensor saved at the end of a run: the model or adapter, and PPO's value model."""
    from safetensors.torch import load_file

    return {f"{path.relative_to(output_dir)}:{name}": tensor for path in sorted(output_dir.glob("**/*.safetensors"))
            if "checkpoint-" not in str(path.relative_to(output_dir)) for name, tensor in load_file(path).items()}


def test_a_grpo_run_resumed_or_continued_inside_a_generation_block_trains_what_one_run_trains(tiny_models, tmp_path):
    # 2 optimizer steps per generation and 2 generations per pass over the 8 prompts: steps 1-2 and 3-4 are the first
    # pass, 5-6 and 7 the second. A constant rate, so that a run continued to a higher --max_steps keeps its schedule.
    def args(out, max_steps):
        return grpo_args(tiny_models, out, "--max_steps", max_steps, "--prompts_per_generation", "4",
                         "--max_samples", "8", "--save_steps", "1", "--save_total_limit", "10",
                         "--lr_scheduler_type", "constant", "--learning_rate", "1e-2")

    whole = tmp_path / "whole"
    assert_ok(run_in_process("train_grpo.py", *args(whole, 7)))
    expected = final_weights(whole)

    # Continued from step 3, the first step of the second generation (its other half was never trained on).
    continued = tmp_path / "continued"
    assert_ok(run_in_process("train_grpo.py", *args(continued, 3)))
    assert_ok(run_in_process("train_grpo.py", *args(continued, 7)))
    # Resumed from step 5, inside the first generation of the second pass over the prompts (step 7 draws the next).
    resumed = tmp_path / "resumed"
    assert_ok(run_in_process("train_grpo.py", *args(resumed, 7), "--resume_from_checkpoint", whole / "checkpoint-5"))
    for run in (continued, resumed):
        weights = final_weights(run)
        differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
        assert not differ, f"{run.name}: {len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


# A constant rate and a checkpoint at every step, as above; each run resumes inside its second pass over the data.
RESUMED_IN_A_LATER_PASS = {
    # 8 prompts, rollouts of 4 (2 mini-batches of 2), 2 PPO epochs, adaptive KL: 2 rollouts per pass, 3 in all.
    "ppo": ("train_ppo.py", 3, lambda models, out, steps: ppo_args(
        models, out, "--total_episodes", 4 * steps, "--max_samples", "8", "--prompts_per_rollout", "4",
        "--num_ppo_epochs", "2", "--target_kl", "0.001", "--kl_horizon", "10", "--learning_rate", "1e-3")),
    # The held-out evaluation at every checkpoint: it samples aside after each checkpoint is saved (TRL's sample
    # table did the same, and 41 of 41 tensors differed when that moved torch's random state).
    "ppo-heldout": ("train_ppo.py", 2, lambda models, out, steps: ppo_args(
        models, out, "--total_episodes", 4 * steps, "--max_samples", "8", "--prompts_per_rollout", "4",
        "--eval_prompts", "2", "--learning_rate", "1e-3")),
    "ppo-lora": ("train_ppo.py", 3, lambda models, out, steps: ppo_args(
        models, out, "--total_episodes", 2 * steps, "--max_samples", "4", "--use_lora", "--learning_rate", "1e-3")),
    # 8 pairs, 2 held out: 6 trained on in steps of 2 pairs, 3 steps per pass.
    "reward": ("train_reward_model.py", 4, lambda models, out, steps: [
        "--model_name_or_path", models["policy"], "--dataset_name", models["prompts"], "--max_samples", "8",
        "--output_dir", out, "--max_steps", steps, "--per_device_train_batch_size", "2", "--eval_samples", "2",
        "--warmup_steps", "0", "--learning_rate", "1e-3"]),
}


@pytest.mark.parametrize("case", RESUMED_IN_A_LATER_PASS)
def test_a_ppo_or_reward_model_run_resumed_in_a_later_pass_trains_what_one_run_trains(tiny_models, tmp_path, case):
    script, resume_at, case_args = RESUMED_IN_A_LATER_PASS[case]

    def args(out, steps):
        return [*case_args(tiny_models, out, steps), "--save_steps", "1", "--save_total_limit", "10",
                "--lr_scheduler_type", "constant", "--seed", "0"]

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    steps = resume_at + 1
    assert_ok(run_in_process(script, *args(whole, steps)))
    assert_ok(run_in_process(script, *args(resumed, steps), "--resume_from_checkpoint",
                                 whole / f"checkpoint-{resume_at}"))
    expected, weights = final_weights(whole), final_weights(resumed)
    assert weights.keys() == expected.keys() and any(name.startswith("value_model") for name in expected) == (
        script == "train_ppo.py")
    differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


# A reward function that interrupts its own run (SIGINT, Ctrl-C) while it scores the third step.
STOP_AT_3 = """
import os, signal

def stop_at_3(prompts, completions, trainer_state=None, **kwargs):
    if trainer_state.global_step + 1 == 3:
        os.kill(os.getpid(), signal.SIGINT)
    return [float(len(str(completion))) for completion in completions]
"""


@pytest.mark.parametrize("script, script_args", [("train_grpo.py", grpo_args), ("train_ppo.py", ppo_args)])
def test_an_interrupted_run_rerun_with_max_steps_before_its_checkpoint_is_refused_and_left_as_it_was(
        tiny_models, tmp_path, run_cli, script, script_args):
    (tmp_path / "stop.py").write_text(STOP_AT_3)
    out = tmp_path / "run"
    args = script_args(tiny_models, out, "--reward_funcs", f"{tmp_path / 'stop.py'}:stop_at_3", "--save_steps", "10")

    interrupted = run_in_process(script, *args, "--max_steps", "6")
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-3"]
    before = {path: path.stat().st_mtime_ns for path in out.rglob("*")}

    # Resumed, it would train nothing and "finish" at step 3 of 2.
    refused = run_cli(script, *args, "--max_steps", "2")
    assert error_line(refused) == (
        f"error: {out / 'checkpoint-3'} is a run interrupted at step 3, and --max_steps 2 ends before it, so "
        "resuming would train nothing; give --max_steps 3 or more to resume the run, or choose a new --output_dir")
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*")} == before  # nothing touched

    stopped_there = run_in_process(script, *args, "--max_steps", "3")  # where it stopped: it finishes there
    assert_ok(stopped_there)
    assert (f"note: {out / 'checkpoint-3'} is step 3, where the run's training length ends: nothing is left to "
            "train, so the run finishes there.") in stopped_there.stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["finished_at"] and manifest["global_step"] == 3
    assert "- steps: 3 of 3;" in (out / "run_report.md").read_text()
