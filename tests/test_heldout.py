"""Held-out evaluation during training (rlhf/evaluation/heldout.py): the metrics, the flags, tiny GRPO and PPO runs."""

import json
from pathlib import Path

import pytest

from conftest import assert_ok, error_line, grpo_args, ppo_args, run_in_process, scalars
from rlhf import tiny
from rlhf.cli import UserError, parse_args
from rlhf.evaluation.heldout import best_metric_name, describe, eval_interval, heldout_metrics
from test_interruption import final_weights

MATH_ROWS = [{"question": f"What is {a} + {b}?", "ground_truth": str(a + b)} for a in range(4) for b in range(4)]
# Enough rows after --max_samples 24 of the 32 tiny prompts; a learning rate that moves the tiny policy in 4 steps.
SAME = ["--max_samples", "24", "--learning_rate", "1e-2"]
EVAL = [*SAME, "--eval_prompts", "4", "--eval_steps", "1"]


def completions(rewards, verdicts=None):
    """Per prompt, completions as `rlhf.evaluation.generation.score` leaves them."""
    return [[{"reward": r, "num_tokens": 3, "ended_with_eos": True,
              **({"verdict": verdicts[p][i]} if verdicts else {})} for i, r in enumerate(rs)]
            for p, rs in enumerate(rewards)]


def test_win_rate_against_the_starting_policy_with_its_interval():
    baseline = completions([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    better = completions([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])  # wins all pairs; 2 of 4 and ties 2; ties all
    metrics = heldout_metrics(better, baseline, seed=0)
    assert set(metrics) == {"eval/win_rate", "eval/win_rate_low", "eval/win_rate_high"}
    assert metrics["eval/win_rate"] == pytest.approx((1 + 0.75 + 0.5) / 3)
    assert metrics["eval/win_rate_low"] <= metrics["eval/win_rate"] <= metrics["eval/win_rate_high"]
    assert metrics["eval/win_rate_low"] >= 0.5 and metrics["eval/win_rate_high"] == 1.0
    same = heldout_metrics(baseline, baseline, seed=0)  # the starting policy against itself: step 0
    assert (same["eval/win_rate"], same["eval/win_rate_low"], same["eval/win_rate_high"]) == (0.5, 0.5, 0.5)
    assert best_metric_name(metrics) == "eval/win_rate"
    low = metrics["eval/win_rate_low"]
    assert describe(4, metrics) == f"held-out eval, step 4: win rate 0.75 [{low:.2f}, 1.00] vs the starting policy"


def test_verifier_accuracy_and_its_paired_gain():
    baseline = completions([[-1.0, -1.0], [-1.0, -1.0]], [["wrong", "wrong"], ["wrong", "missing"]])
    trained = completions([[1.0, -1.0], [1.0, 1.0]], [["correct", "wrong"], ["correct", "correct"]])
    metrics = heldout_metrics(trained, baseline, seed=0)
    assert metrics["eval/accuracy"] == pytest.approx(0.75)
    assert metrics["eval/accuracy_gain"] == pytest.approx(0.75)
    for name in ("eval/accuracy", "eval/accuracy_gain", "eval/win_rate"):
        assert metrics[f"{name}_low"] <= metrics[name] <= metrics[f"{name}_high"]
    assert (metrics["eval/accuracy_gain_low"], metrics["eval/accuracy_gain_high"]) == (0.5, 1.0)
    assert best_metric_name(metrics) == "eval/accuracy"
    assert describe(2, metrics).endswith("; accuracy 75.0% [50.0%, 100.0%], gain +75.0% [+50.0%, +100.0%]")


def test_eval_interval_reads_steps_or_a_ratio_of_the_run():
    assert eval_interval(2, 10) == eval_interval(2.0, 10) == 2
    assert eval_interval(0.25, 10) == 3 and eval_interval(0.01, 10) == 1


def grpo_config(*flags):
    from config import GRPOTrainingConfig, ModelArguments, PromptDataArguments, RewardArguments

    return parse_args((ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig), list(flags))[-1]


def test_eval_steps_follow_and_divide_save_steps(capsys):
    assert grpo_config("--eval_prompts", "4", "--save_steps", "6").eval_steps == 6
    assert grpo_config("--eval_prompts", "4", "--save_steps", "6", "--eval_steps", "3").eval_steps == 3
    assert grpo_config("--eval_steps", "7").eval_steps == 7  # without --eval_prompts: transformers' field, unused
    with pytest.raises(UserError, match="--eval_steps 4.0 does not divide --save_steps 6"):
        grpo_config("--eval_prompts", "4", "--save_steps", "6", "--eval_steps", "4")
    with pytest.raises(UserError, match="give both in steps"):
        grpo_config("--eval_prompts", "4", "--save_steps", "0.5", "--eval_steps", "2")
    with pytest.raises(UserError, match="--eval_prompts must be >= 0"):
        grpo_config("--eval_prompts", "-1")
    capsys.readouterr()
    # transformers deletes every checkpoint but the best at the end with a limit of 1: the newest is kept too.
    assert grpo_config("--eval_prompts", "4", "--save_total_limit", "1").save_total_limit == 2
    assert "note: --save_total_limit 1 -> 2 (the best checkpoint" in capsys.readouterr().out
    assert grpo_config("--save_total_limit", "1").save_total_limit == 1


def test_training_on_every_row_leaves_no_held_out_prompts(tiny_models, tmp_path, run_cli):
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--max_samples", "0",
                                                 "--eval_prompts", "4"))
    line = error_line(result)
    assert "--eval_prompts 4 needs prompts that training does not use" in line and "--eval_dataset_name" in line
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--max_samples", "32",
                                                 "--eval_prompts", "4"))
    assert "32 rows, all among the first --max_samples 32" in error_line(result)
    assert not (tmp_path / "run" / "run_manifest.json").exists()


def eval_log(output_dir):
    """The `eval/` entries of the newest checkpoint's trainer state, and that state."""
    checkpoints = sorted(Path(output_dir).glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    state = json.loads((checkpoints[-1] / "trainer_state.json").read_text())
    return evaluations_in(state), state


def evaluations_in(state):
    return [entry for entry in state["log_history"] if any(key.startswith("eval/") for key in entry)]


def assert_logged_with_intervals(output_dir, name, steps):
    logged = scalars(output_dir)
    for suffix in ("", "_low", "_high"):
        assert [step for step, _ in logged[f"{name}{suffix}"]] == steps
    for (_, value), (_, low), (_, high) in zip(logged[name], logged[f"{name}_low"], logged[f"{name}_high"]):
        assert low <= value <= high
    return logged


def assert_same_weights(one, other):
    """Every tensor a run saved at its end (the model or adapter, PPO's value model) equal, bit for bit."""
    import torch

    expected, weights = final_weights(Path(one)), final_weights(Path(other))
    assert expected.keys() == weights.keys() and all(torch.equal(expected[k], weights[k]) for k in expected)


@pytest.fixture(scope="module")
def grpo_runs(tiny_models, tmp_path_factory):
    """A GRPO run with held-out evaluation and the same run without it, side by side."""
    root = tmp_path_factory.mktemp("grpo_heldout")
    commands = {
        "with": grpo_args(tiny_models, root / "with", "--max_steps", "4", *EVAL, "--save_total_limit", "1"),
        "without": grpo_args(tiny_models, root / "without", "--max_steps", "4", *SAME),
    }
    return {"root": root, **{name: run_in_process("train_grpo.py", *args) for name, args in commands.items()}}


@pytest.mark.slow
def test_grpo_logs_the_held_out_win_rate_and_keeps_the_best_checkpoint(grpo_runs):
    assert_ok(grpo_runs["with"])
    out = grpo_runs["root"] / "with"
    assert_logged_with_intervals(out, "eval/win_rate", [0, 1, 2, 3, 4])
    evaluations, state = eval_log(out)
    assert [entry["step"] for entry in evaluations] == [0, 1, 2, 3, 4]
    assert evaluations[0]["eval/win_rate"] == 0.5  # the starting policy against itself
    best = Path(state["best_model_checkpoint"])
    # The best is a checkpoint that exists (save_steps 2: step 2 or 4), kept despite --save_total_limit 1.
    assert best.name in ("checkpoint-2", "checkpoint-4") and (best / "trainer_state.json").exists()
    by_step = {entry["step"]: entry["eval/win_rate"] for entry in evaluations}
    assert state["best_metric"] == by_step[state["best_global_step"]] == max(by_step[2], by_step[4])
    lines = [line for line in grpo_runs["with"].stdout.splitlines() if line.startswith("held-out eval, step")]
    assert len(lines) == 5 and "win rate" in lines[-1]


@pytest.mark.slow
def test_evaluating_does_not_change_what_is_trained(grpo_runs):
    assert_ok(grpo_runs["with"])
    assert_ok(grpo_runs["without"])
    assert_same_weights(grpo_runs["root"] / "with", grpo_runs["root"] / "without")
    assert not any(tag.startswith("eval/") for tag in scalars(grpo_runs["root"] / "without"))


@pytest.mark.slow
def test_the_plot_table_has_the_evaluation_columns(grpo_runs, tmp_path):
    import csv

    from plot_training_progress import PlotArguments, main

    assert_ok(grpo_runs["with"])
    table = tmp_path / "metrics.csv"
    main(PlotArguments(log_dir=[str(grpo_runs["root"] / "with")], output=str(tmp_path / "p.png"), csv=str(table)))
    rows = list(csv.DictReader(table.open()))
    assert {"eval_win_rate", "eval_win_rate_low", "eval_win_rate_high"} <= set(rows[0])
    assert rows[0]["step"] == "0" and rows[0]["eval_win_rate"] == "0.5"


@pytest.mark.slow
def test_ppo_logs_the_held_out_win_rate_and_names_the_best_checkpoint(tiny_models, tmp_path):
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, tmp_path / "run", "--total_episodes", "8", *EVAL))
    assert_ok(result)
    assert_logged_with_intervals(tmp_path / "run", "eval/win_rate", [0, 1, 2, 3, 4])
    evaluations, state = eval_log(tmp_path / "run")
    assert [entry["step"] for entry in evaluations] == [0, 1, 2, 3, 4]
    assert Path(state["best_model_checkpoint"]).name in ("checkpoint-2", "checkpoint-4")
    assert (Path(state["best_model_checkpoint"]) / "trainer_state.json").exists()
    # The evaluation's completions are not counted as rollouts: one length per step, from the 2 prompts trained on.
    assert len(scalars(tmp_path / "run")["train/completions/mean_length"]) == 4
    # Nor do they change what is trained: the same run without them ends on the same weights, bit for bit (the
    # quickstart's PPO evaluates while it trains; bench/arms.py's arms do not).
    plain = run_in_process("train_ppo.py", *ppo_args(tiny_models, tmp_path / "plain", "--total_episodes", "8", *SAME))
    assert_ok(plain)
    assert_same_weights(tmp_path / "run", tmp_path / "plain")
    # Continued to 6 batches: the same starting policy's completions (cached), the evaluations and best so far kept.
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, tmp_path / "run", "--total_episodes", "12", *EVAL))
    assert_ok(result)
    assert "compares with the policy at step" not in result.stdout
    evaluations, resumed = eval_log(tmp_path / "run")
    assert [entry["step"] for entry in evaluations] == [0, 1, 2, 3, 4, 5, 6]
    assert evaluations[:5] == evaluations_in(state)
    best = {entry["step"]: entry["eval/win_rate"] for entry in evaluations if entry["step"] in (2, 4, 6)}
    assert resumed["best_metric"] == max(best.values()) and Path(resumed["best_model_checkpoint"]).is_dir()


@pytest.mark.slow
def test_the_verifier_accuracy_and_its_gain_on_held_out_math(tiny_models, tmp_path):
    train = tiny.write_jsonl(tmp_path / "train.jsonl", MATH_ROWS)
    test = tiny.write_jsonl(tmp_path / "test.jsonl", MATH_ROWS[:6])
    result = run_in_process("train_grpo.py", *grpo_args(
        tiny_models, tmp_path / "run", "--dataset_name", train, "--max_samples", "0", "--max_steps", "2",
        "--reward_funcs", "boxed_answer", "boxed_format", "--system_prompt", r"Put your final answer within \boxed{}.",
        "--eval_prompts", "4", "--eval_dataset_name", test))
    assert_ok(result)
    logged = assert_logged_with_intervals(tmp_path / "run", "eval/accuracy", [0, 2])
    assert_logged_with_intervals(tmp_path / "run", "eval/accuracy_gain", [0, 2])
    assert [value for _, value in logged["eval/accuracy"]] == [0.0, 0.0]  # a random tiny model boxes nothing
    _, state = eval_log(tmp_path / "run")
    assert state["best_metric"] == 0.0 and Path(state["best_model_checkpoint"]).name == "checkpoint-2"
    assert "accuracy 0.0% [0.0%, 0.0%], gain +0.0%" in result.stdout


def test_a_run_resumes_with_the_held_out_evaluation_turned_on_or_changed(tmp_path):
    from dataclasses import dataclass

    from rlhf.lifecycle.manifest import record_launch
    from rlhf.lifecycle.run import prepare_output_dir
    from test_run import make_checkpoint

    @dataclass
    class Settings:
        learning_rate: float = 1e-5
        eval_prompts: int = 0
        eval_steps: float | None = None

    record_launch(tmp_path, "train_grpo.py", [Settings()])
    checkpoint = make_checkpoint(tmp_path, 3)
    launch = prepare_output_dir(tmp_path, [Settings(eval_prompts=8, eval_steps=5)])  # it measures, trains nothing
    assert launch.checkpoint == checkpoint and launch.changes == {"eval_prompts": [0, 8], "eval_steps": [None, 5]}


def test_ppo_held_out_evaluation_waits_out_the_critic_warmup_which_holds_the_starting_policy(monkeypatch):
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from rlhf.evaluation.heldout import HeldOutEvaluation

    args = SimpleNamespace(eval_completions=2, max_completion_length=8, seed=0, eval_steps=1, critic_warmup=2)
    evaluation = HeldOutEvaluation(SimpleNamespace(args=args), None, None, [], [], [], None, "held-out prompts",
                                   0.7, 0.9)
    evaluated = []
    monkeypatch.setattr(evaluation, "_completions", lambda: evaluated.append(state.global_step) or ([], 0.0))
    monkeypatch.setattr("rlhf.evaluation.heldout.heldout_metrics", lambda *args: {"eval/win_rate": 0.5})
    monkeypatch.setattr(evaluation, "_log", lambda *args: None)
    state = TrainerState(max_steps=4)
    for step in range(1, 5):
        state.global_step = step
        evaluation.on_step_end(args, state, TrainerControl())
    assert evaluated == [3, 4]  # after the 2 rollouts of the warm-up, every --eval_steps 1


# A held-out curve that rises to step 2 and falls: the best checkpoint is checkpoint-2, not the last one (step 4).
SCRIPTED = [0.5, 0.6, 0.9, 0.4, 0.2]  # steps 0-4


def scripted_metrics(monkeypatch):
    """The held-out evaluation's metrics, one value of SCRIPTED per evaluation (its completions are still generated
    and scored): a tiny random policy's own win rates go anywhere, this curve names a best that is not the last."""
    values = iter(SCRIPTED)

    def metrics(*args):
        value = next(values)
        return {"eval/win_rate": value, "eval/win_rate_low": value - 0.1, "eval/win_rate_high": value + 0.1}

    monkeypatch.setattr("rlhf.evaluation.heldout.heldout_metrics", metrics)


def policy_weights(folder):
    """The policy's saved tensors in `folder` (the model or adapter file, not PPO's value model)."""
    from safetensors.torch import load_file

    files = [path for path in ("model.safetensors", "adapter_model.safetensors") if (Path(folder) / path).exists()]
    assert len(files) == 1, f"no policy weights in {folder}"
    return load_file(Path(folder) / files[0])


def assert_ended_on(out, result, checkpoint, other):
    """The final model in `out` holds `checkpoint`'s policy weights, not `other`'s (the last step's), as its console
    line and run_report.json say."""
    import torch

    final, best, last = (policy_weights(folder) for folder in (out, out / checkpoint, out / other))
    assert final.keys() == best.keys() and all(torch.equal(final[k], best[k]) for k in final)
    assert not all(torch.equal(final[k], last[k]) for k in final), "training did not move the tiny policy"
    assert f"Ended on the best checkpoint by the held-out evaluation, {checkpoint} (eval/win_rate 0.9 at step 2 " \
           "of 4)" in result.stdout
    record = json.loads((out / "run_report.json").read_text())["final_model"]
    assert Path(record["checkpoint"]).name == checkpoint and record["step"] == 2 and record["last_step"] == 4
    assert record["metric"] == "eval/win_rate" and record["value"] == 0.9
    # The alarm of a falling held-out curve: 0.4 at step 3 is below 0.8, the lower bound of step 2's 0.9; said once.
    alarms = json.loads((out / "run_report.json").read_text())["health"]  # a tiny model's cut-off one besides
    assert [alarm["step"] for alarm in alarms if alarm["name"] == "held_out_fell"] == [3]
    assert result.stdout.count("health: held-out win rate fell") == 1


@pytest.mark.slow
def test_ppo_ends_on_its_best_checkpoint(tiny_models, tmp_path, monkeypatch):
    scripted_metrics(monkeypatch)
    out = tmp_path / "run"
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "8", *EVAL,
                                                      "--save_total_limit", "1", "--end_on_best_checkpoint"))
    assert_ok(result)
    assert_ended_on(out, result, "checkpoint-2", "checkpoint-4")
    # The value model stays the last step's.
    assert "the value model in value_model/ is the last step's" in result.stdout
    assert (out / "value_model" / "model.safetensors").read_bytes() == (
        out / "checkpoint-4" / "value_model" / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_grpo_ends_on_its_best_checkpoint_with_lora(tiny_models, tmp_path, monkeypatch):
    scripted_metrics(monkeypatch)
    out = tmp_path / "run"
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "4", *EVAL, "--use_peft",
                                                        "--learning_rate", "5e-2", "--end_on_best_checkpoint"))
    assert_ok(result)
    assert_ended_on(out, result, "checkpoint-2", "checkpoint-4")


def test_ending_on_the_best_checkpoint_needs_the_held_out_evaluation():
    assert grpo_config("--eval_prompts", "4", "--end_on_best_checkpoint").end_on_best_checkpoint is True
    with pytest.raises(UserError, match="--end_on_best_checkpoint needs the held-out evaluation"):
        grpo_config("--end_on_best_checkpoint")
    # transformers' flag would need its own evaluation (eval_strategy equal to save_strategy): ours is named
    with pytest.raises(UserError, match="use --end_on_best_checkpoint with --eval_prompts"):
        grpo_config("--load_best_model_at_end", "--eval_prompts", "4")
