"""run_report.json / run_report.md: the pieces on made-up states, and tiny GRPO, PPO and reward-model runs."""

import json

import pytest

from conftest import assert_ok, ppo_args, run_in_process
from rlhf import tiny
from rlhf.lifecycle import report
from rlhf.lifecycle.health import HealthMonitor

KEYS = {"script", "finished", "global_step", "max_steps", "settings", "seconds_per_step", "steps_timed",
        "tokens_per_second", "peak_memory", "health", "evaluations", "best_checkpoint", "best_metric"}


def assert_report(folder, script, steps):
    """Both files are there, final, with every key; returns the JSON."""
    written = json.loads((folder / "run_report.json").read_text())
    assert set(written) == KEYS
    assert written["script"] == script and written["finished"] is True and written["global_step"] == steps
    assert written["settings"]["engine"] == {"device": "cpu", "distributed_type": "NO", "num_processes": 1}
    assert written["settings"]["seed"] == 0 and written["settings"]["learning_rate"] > 0
    assert written["seconds_per_step"] > 0 and written["steps_timed"] >= 1
    assert written["peak_memory"]["gb"] > 0.05 and written["peak_memory"]["kind"] == "process max RSS"
    assert written["evaluations"] == [] and written["best_checkpoint"] is None  # no held-out evaluation asked
    text = (folder / "run_report.md").read_text()
    assert text.startswith(f"# Run report: {script} (finished)") and len(text.splitlines()) <= 16
    return written


class State:
    def __init__(self, log_history=(), best=None, metric=None):
        self.global_step, self.max_steps, self.log_history = 4, 4, list(log_history)
        self.best_model_checkpoint, self.best_metric = best, metric


def test_evaluations_are_every_eval_value_in_the_log_history_with_its_step():
    history = [{"loss": 1.0, "step": 1}, {"eval/win_rate": 0.6, "eval/win_rate_low": 0.4, "step": 2},
               {"eval/accuracy": 0.2, "step": 4}]
    assert report.evaluations(history) == [{"step": 2, "eval/win_rate": 0.6, "eval/win_rate_low": 0.4},
                                           {"step": 4, "eval/accuracy": 0.2}]


def test_a_report_names_the_best_checkpoint_and_lists_alarms(tmp_path):
    monitor = HealthMonitor({"kind": "grpo", "max_completion_length": 3})
    for step in (1, 2, 3):
        monitor.observe({"completions/clipped_ratio": 1.0}, step)
    run_report = report.RunReport(tmp_path, "train_grpo.py", {"seed": 1, "engine": {}}, monitor)
    for _ in range(3):
        run_report.step_began()
        run_report.step_ended()
    state = State([{"eval/win_rate": 0.7, "step": 4}], best=str(tmp_path / "checkpoint-4"), metric=0.7)
    written = run_report.write(state, finished=True)
    assert set(written) == KEYS
    assert written["best_checkpoint"] == str(tmp_path / "checkpoint-4") and written["best_metric"] == 0.7
    assert written["health"][0]["name"] == "completions_cut_off" and written["steps_timed"] == 3
    text = (tmp_path / "run_report.md").read_text()
    assert "checkpoint-4 (0.7)" in text and "step 3: 100% of completions hit" in text and "eval/win_rate 0.7" in text
    assert not list(tmp_path.glob("*.tmp"))

    # quickstart.py deletes a finished stage's checkpoints: the report then says that its best one is gone.
    report.note_checkpoints_deleted(tmp_path, [tmp_path / "checkpoint-2"])
    assert (tmp_path / "run_report.md").read_text() == text  # another checkpoint: nothing changes
    report.note_checkpoints_deleted(tmp_path, [tmp_path / "checkpoint-2", tmp_path / "checkpoint-4"])
    assert json.loads((tmp_path / "run_report.json").read_text())["best_checkpoint_deleted"] is True
    assert "checkpoint-4 (0.7), deleted after training; the folder keeps the final model" in (
        tmp_path / "run_report.md").read_text()


@pytest.mark.parametrize(("best", "says"), [(0.0625, True), (0.15625, True), (0.25, False)])
def test_ending_on_a_best_checkpoint_no_better_than_step_0_says_the_start_is_at_least_as_good(
        tiny_models, tmp_path, capsys, best, says):
    """Seed 108's math PPO: the first checkpoint (step 3) was its best and below step 0's evaluation (a tie is no
    better either). The final model gets that checkpoint's weights all the same, and the line and the record say so."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / "checkpoint-3"
    AutoModelForCausalLM.from_pretrained(tiny_models["policy"]).save_pretrained(checkpoint)
    (checkpoint / "trainer_state.json").write_text("{}")
    history = [{"eval/accuracy": 0.15625, "step": 0}, {"loss": 0.1, "step": 3}, {"eval/accuracy": best, "step": 3},
               {"eval/accuracy": 0.0, "step": 6}]
    state = State(history, best=str(checkpoint), metric=best)
    state.best_global_step, state.global_step = 3, 6
    model = AutoModelForCausalLM.from_pretrained(tiny_models["policy"])
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    run_report = SimpleNamespace(final_model=None)

    assert report.end_on_best_checkpoint(run_report, model, state) == checkpoint
    saved = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), saved.state_dict().values()))
    line = run_report.final_model["line"]
    assert line.startswith(f"ended on the best checkpoint by the held-out evaluation, checkpoint-3 (eval/accuracy "
                           f"{best:.4g} at step 3 of 6)")
    clause = ("No checkpoint beat the starting policy (eval/accuracy 0.1562 at step 0): by this evaluation the model "
              "the run started from (--model_name_or_path) is at least as good")
    assert (clause in line) is says and (clause in capsys.readouterr().out) is says


def test_settings_come_from_the_configs_and_the_engine_from_the_manifest():
    class Model:
        model_name_or_path, seed = "m", 3

    class Training:
        seed, learning_rate = 5, 1e-5

    manifest = {"resolved": {"device": "cuda", "distributed_type": "MULTI_GPU", "num_processes": 2, "dtype": "x"}}
    found = report.settings((Model(), Training()), manifest)
    assert found["model_name_or_path"] == "m" and found["seed"] == 3 and found["learning_rate"] == 1e-5
    assert found["engine"] == {"device": "cuda", "distributed_type": "MULTI_GPU", "num_processes": 2}


@pytest.mark.slow
def test_ppo_run_writes_the_report(tiny_models, tmp_path):
    out = tmp_path / "ppo"
    assert_ok(run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "4")))
    written = assert_report(out, "train_ppo.py", 2)
    assert written["settings"]["num_ppo_epochs"] == 1 and written["settings"]["kl_coef"] == 0.05


@pytest.mark.slow
def test_reward_model_run_writes_the_report(tiny_models, tmp_path):
    data = tiny.write_jsonl(tmp_path / "pairs.jsonl", tiny.orca_rows(30))
    out = tmp_path / "reward"
    assert_ok(run_in_process("train_reward_model.py", "--model_name_or_path", tiny_models["policy"], "--dataset_name",
                             data, "--output_dir", out, "--max_steps", "3", "--logging_steps", "1",
                             "--per_device_train_batch_size", "4", "--eval_samples", "6", "--save_steps", "2",
                             "--seed", "0"))
    written = assert_report(out, "train_reward_model.py", 3)
    assert written["tokens_per_second"] is None or written["tokens_per_second"] > 0
