import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from conftest import assert_ok, error_line, run_in_process, start_script, wait_for
from rlhf import tiny
from rlhf.errors import UserError
from rlhf.evaluation.report import check_writable, format_table, gain_interval, interval_bound, win_interval
from rlhf.evaluation.stats import bootstrap_interval, compare, correlation, prompt_win_scores, rank_labels, summarize


def test_ranks_best_medium_worst():
    assert rank_labels([0.1, 0.9, 0.5, -1.0]) == ["MEDIUM", "BEST", "MEDIUM", "WORST"]
    assert rank_labels([2.0, 1.0]) == ["BEST", "WORST"]
    assert rank_labels([0.3]) == ["BEST"]
    assert rank_labels([1.0, 1.0, 1.0]) == ["BEST", "MEDIUM", "WORST"]  # ties keep the order


def test_win_scores_count_ties_half_and_use_every_pair():
    # Prompt 1: model 2 vs baseline 1 -> win. Prompt 2: tie. Prompt 3: of the 4 pairs one ties, three are lost.
    scores = prompt_win_scores([[2.0], [0.5], [1.0, 0.0]], [[1.0], [0.5], [1.0, 3.0]])
    assert scores == [1.0, 0.5, pytest.approx((0.5 + 0 + 0 + 0) / 4)]


def rewarded(*per_prompt):
    """Completions given by their rewards, one list per prompt."""
    return [[{"reward": r, "num_tokens": 5, "ended_with_eos": True} for r in rewards] for rewards in per_prompt]


def test_win_rate_interval_brackets_the_estimate_and_narrows_with_more_prompts():
    few = compare(rewarded([1.0], [0.0], [1.0], [1.0]), rewarded([0.0], [1.0], [0.0], [0.0]))
    assert few["win_rate"] == 0.75
    assert few["ci_low"] <= 0.75 <= few["ci_high"]
    assert few["mean_reward_delta"] == pytest.approx(0.75 - 0.25)
    assert "accuracy_delta" not in few  # no verifier, no accuracy figures
    many = compare(rewarded(*[[1.0], [0.0], [1.0], [1.0]] * 25), rewarded(*[[0.0], [1.0], [0.0], [0.0]] * 25))
    assert many["win_rate"] == 0.75
    assert many["ci_high"] - many["ci_low"] < few["ci_high"] - few["ci_low"]
    # A model identical to the baseline wins exactly half, with no spread.
    same = compare(rewarded(*[[0.3, 0.7]] * 5), rewarded(*[[0.3, 0.7]] * 5))
    assert (same["win_rate"], same["ci_low"], same["ci_high"], same["mean_reward_delta"]) == (0.5, 0.5, 0.5, 0)


def test_bootstrap_is_reproducible_and_matches_a_known_case():
    values = [0.0] * 50 + [1.0] * 50
    low, high = bootstrap_interval(values, seed=3)
    assert (low, high) == bootstrap_interval(values, seed=3)
    # Mean 0.5, standard error 0.05: the 95% interval is about 0.5 +- 0.1.
    assert low == pytest.approx(0.40, abs=0.03) and high == pytest.approx(0.60, abs=0.03)


def test_summary_and_length_correlation():
    completions = [[{"reward": r, "num_tokens": n, "ended_with_eos": e}
                    for r, n, e in [(1.0, 10, True), (2.0, 20, True)]], [{"reward": 3.0, "num_tokens": 30,
                                                                         "ended_with_eos": False}]]
    summary = summarize(completions)
    assert summary["mean_reward"] == 2.0 and summary["min_reward"] == 1.0 and summary["max_reward"] == 3.0
    assert summary["mean_length"] == 20.0 and summary["eos_rate"] == pytest.approx(2 / 3)
    assert summary["reward_length_correlation"] == pytest.approx(1.0)
    assert "verifier_accuracy" not in summary  # no verifier, no verifier figures
    assert correlation([1, 1, 1], [1, 2, 3]) is None


def verdicts(*per_prompt):
    """Completions given by their verifier verdicts, one string of letters per prompt (c correct, w wrong,
    m missing, t timeout)."""
    names = {"c": "correct", "w": "wrong", "m": "missing", "t": "timeout"}
    return [[{"reward": float(v == "c"), "num_tokens": 5, "ended_with_eos": True, "verdict": names[v]} for v in p]
            for p in per_prompt]


def test_verifier_summary_counts_format_accuracy_and_timeouts():
    summary = summarize(verdicts("cc", "cw", "mm", "tw"))
    assert summary["verifier_accuracy"] == pytest.approx(3 / 8)
    assert summary["format_rate"] == pytest.approx(6 / 8)  # every completion with a final answer, right or not
    assert summary["verifier_timeouts"] == 1
    assert summary["verifier_accuracy_ci_low"] <= 3 / 8 <= summary["verifier_accuracy_ci_high"]


def test_accuracy_gain_interval_is_paired_over_prompts():
    # 20 prompts; the baseline solves the first 10, the model the same 10 and 5 more.
    baseline = verdicts(*(["c"] * 10 + ["w"] * 10))
    model = verdicts(*(["c"] * 15 + ["w"] * 5))
    result = compare(model, baseline, seed=1)
    assert result["accuracy_delta"] == pytest.approx(0.25)
    # Each model's own interval is wide (+-0.2) and they overlap, but the per-prompt differences never go below
    # 0: the paired interval excludes 0.
    model_summary, baseline_summary = summarize(model, seed=1), summarize(baseline, seed=1)
    assert model_summary["verifier_accuracy_ci_low"] < baseline_summary["verifier_accuracy_ci_high"]
    assert 0 < result["accuracy_delta_ci_low"] <= 0.25 <= result["accuracy_delta_ci_high"]
    same = compare(baseline, baseline)
    assert (same["accuracy_delta"], same["accuracy_delta_ci_low"], same["accuracy_delta_ci_high"]) == (0, 0, 0)


def test_draw_prompts_is_seeded_and_keeps_each_rows_number():
    from rlhf.evaluation.generation import draw_prompts

    rows = [{"prompt": i} for i in range(50)]
    numbers = [100 + 2 * i for i in range(50)]  # the rows between were dropped as over-long
    picked, picked_numbers = draw_prompts(rows, numbers, num_prompts=5, seed=3)
    assert (picked, picked_numbers) == draw_prompts(rows, numbers, 5, 3)
    assert [100 + 2 * row["prompt"] for row in picked] == picked_numbers == sorted(picked_numbers)
    assert len(draw_prompts(rows, numbers, 500, 3)[0]) == 50  # more asked than there are: all of them


def test_scoring_record_names_every_reward_and_the_verifier_settings():
    from config import RewardArguments
    from rlhf.evaluation.report import scoring_record

    rewards = RewardArguments(reward_funcs=["reward_model", "boxed_answer", "my_rewards.brevity"],
                              reward_model_name_or_path="./rm", boxed_wrong_reward=-2.0)
    record = scoring_record(rewards, [1.0, 2.0, 0.5], "bfloat16")
    assert record["reward_funcs"] == ["reward_model", "boxed_answer", "my_rewards.brevity"]
    assert record["reward_weights"] == [1.0, 2.0, 0.5]
    assert record["reward_model"] == {"path": "./rm", "dtype": "bfloat16", "reward_model_dtype": "auto"}
    assert record["boxed_answer"]["wrong"] == record["boxed_answer"]["timeout"] == -2.0
    assert {"correct", "missing", "time_limit_s", "max_answer_chars"} <= set(record["boxed_answer"])
    assert set(scoring_record(RewardArguments(reward_funcs=["boxed_format"]), [1.0], "float32")) == {
        "reward_funcs", "reward_weights"}  # no reward model, no verifier: neither is recorded


def test_report_that_cannot_be_written_is_saved_elsewhere_and_said(tmp_path):
    from rlhf.evaluation.report import save_report

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(UserError, match="saved to") as error:
        save_report(blocker / "eval.json", {"models": [1, 2]})
    fallback = Path(str(error.value).rsplit("saved to ", 1)[1].split()[0])
    assert json.loads(fallback.read_text()) == {"models": [1, 2]}
    fallback.unlink()
    save_report(tmp_path / "new" / "eval.json", {"models": []})  # missing folders are made
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["eval.json"]  # written in place: no temporary left


def eval_args(tiny_models, output, *models, extra=()):
    return ["--model_path", *models, "--reward_model_path", tiny_models["reward_model"],
            "--dataset_name", tiny_models["prompts"], "--train_samples", "20", "--num_prompts", "4",
            "--num_completions", "3", "--max_new_tokens", "8", "--output_file", output, *extra]


@pytest.mark.slow
def test_two_models_are_compared_on_the_same_held_out_prompts(tiny_models, tmp_path):
    from rlhf import tiny

    other = tiny.build_policy(tmp_path / "other_policy", tiny.build_tokenizer(), seed=5)
    out = tmp_path / "eval.json"
    result = run_in_process("evaluate_generations.py", *eval_args(tiny_models, out, tiny_models["policy"], other))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["config"]["model_path"] == [str(tiny_models["policy"]), str(other)]
    assert report["config"]["seed"] == 42 and report["config"]["temperature"] == 0.7
    assert all(row >= 20 for row in report["config"]["prompt_rows"])  # held out: after the training rows
    baseline, candidate = report["models"]
    assert [p["prompt"] for p in baseline["prompts"]] == [p["prompt"] for p in candidate["prompts"]]
    assert len(baseline["prompts"]) == 4
    for prompt in baseline["prompts"]:
        assert len(prompt["completions"]) == 3
        assert sorted(c["rank"] for c in prompt["completions"]) == ["BEST", "MEDIUM", "WORST"]
        best = max(prompt["completions"], key=lambda c: c["reward"])
        assert best["rank"] == "BEST"
        assert all(1 <= c["num_tokens"] <= 8 and isinstance(c["ended_with_eos"], bool) for c in prompt["completions"])
    assert set(baseline["summary"]) >= {"mean_reward", "std_reward", "min_reward", "max_reward", "mean_length",
                                        "eos_rate", "reward_length_correlation"}
    (comparison,) = report["comparison"]
    assert comparison["baseline"] == str(tiny_models["policy"]) and comparison["model_path"] == str(other)
    assert comparison["ci_low"] <= comparison["win_rate"] <= comparison["ci_high"]
    assert "win rate vs baseline" in result.stdout


@pytest.mark.slow
def test_the_system_prompts_reach_the_evaluated_prompts(tiny_models, tmp_path):
    out = tmp_path / "eval.json"
    result = run_in_process("evaluate_generations.py", *eval_args(
            tiny_models, out, tiny_models["policy"], extra=["--system_prompt", "Say hi.", "--append_system_prompt",
                                                         "Be brief.", "--num_completions", "1"]))
    assert result.returncode == 0, result.stderr[-3000:]
    (model,) = json.loads(out.read_text())["models"]
    # the tiny data's rows hold "You are a helpful assistant." or no system message
    assert {p["prompt"][0]["content"] for p in model["prompts"]} == {"Say hi. Be brief.",
                                                                     "You are a helpful assistant. Be brief."}


@pytest.mark.slow
def test_evaluating_the_same_model_twice_is_a_tie(tiny_models, tmp_path):
    out = tmp_path / "eval.json"
    result = run_in_process("evaluate_generations.py",
                            *eval_args(tiny_models, out, tiny_models["policy"], tiny_models["policy"]))
    assert result.returncode == 0, result.stderr[-3000:]
    (comparison,) = json.loads(out.read_text())["comparison"]
    assert comparison["win_rate"] == 0.5 and comparison["mean_reward_delta"] == 0  # same prompts, same seeds
    name = str(tiny_models["policy"])  # whole, as the table prints it
    baseline_row, other_row = [line for line in result.stdout.splitlines() if line.startswith(name)]
    assert baseline_row.endswith("(baseline)") and "0.50" in other_row


def test_table_marks_the_baseline_by_position_when_a_model_is_given_twice():
    summary = {"mean_reward": 0.0, "std_reward": 0.0, "eos_rate": 1.0, "mean_length": 3.0,
               "reward_length_correlation": None}
    comparison = [{"model_path": "m", "win_rate": 0.5, "ci_low": 0.5, "ci_high": 0.5, "mean_reward_delta": 0.0}]
    lines = format_table([{"model_path": "m", "summary": summary}] * 2, comparison).splitlines()
    assert lines[-2].endswith("(baseline)") and lines[-1].endswith("0.50 [0.50, 0.50]  Δreward +0.000")


def test_table_prints_whole_model_names_whose_ends_alone_would_look_alike():
    summary = {"mean_reward": 0.0, "std_reward": 0.0, "eos_rate": 1.0, "mean_length": 3.0,
               "reward_length_correlation": None}
    paths = ["runs/seed1/" + "x" * 40 + "/checkpoint-50", "runs/seed2/" + "x" * 40 + "/checkpoint-50"]
    comparison = [{"model_path": paths[1], "win_rate": 0.5, "ci_low": 0.5, "ci_high": 0.5, "mean_reward_delta": 0.0}]
    lines = format_table([{"model_path": path, "summary": summary} for path in paths], comparison).splitlines()
    assert lines[-2].startswith(paths[0] + " ") and lines[-1].startswith(paths[1] + " ")


def test_an_existing_file_is_replaced_only_when_it_is_an_earlier_report(tiny_models, tmp_path, run_cli):
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}\n')
    result = run_cli("evaluate_generations.py", *eval_args(tiny_models, notes, tiny_models["policy"]))
    assert f"--output_file {notes} exists and is not an evaluation report; it is kept" in error_line(result)
    assert notes.read_text() == '{"my": "notes"}\n'
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"complete": False, "config": {}, "models": [], "comparison": []}))
    check_writable(earlier)  # an earlier run's report (even a partial one) is what a re-run replaces


def test_boxed_answer_without_reference_answers_is_refused_before_any_model_loads(tiny_models, tmp_path, run_cli):
    args = eval_args(tiny_models, tmp_path / "e.json", tiny_models["policy"], extra=("--reward_funcs", "boxed_answer"))
    line = error_line(run_cli("evaluate_generations.py", *args))
    assert "boxed_answer" in line and "`ground_truth`" in line and str(tiny_models["prompts"]) in line
    assert not (tmp_path / "e.json").exists()


@pytest.mark.parametrize("change, message", [
    (("--model_path", "./no_such_model"), "--model_path"),
    (("--train_samples", "1000"), "--train_samples"),
])
def test_user_errors_end_in_one_line(tiny_models, tmp_path, run_cli, change, message):
    args = eval_args(tiny_models, tmp_path / "e.json", tiny_models["policy"])
    args[args.index(change[0]) + 1] = change[1]
    assert message in error_line(run_cli("evaluate_generations.py", *args))
    assert not (tmp_path / "e.json").exists()


def test_unwritable_output_file_is_refused_before_any_model_loads(tiny_models, tmp_path, run_cli):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for output, message in [(blocker / "eval.json", f"{blocker} is a file"), (tmp_path, "is a folder")]:
        result = run_cli("evaluate_generations.py", *eval_args(tiny_models, output, tiny_models["policy"]))
        assert f"--output_file {output}" in error_line(result) and message in error_line(result)
        assert "Evaluating" not in result.stdout  # refused before the prompts were even drawn


def test_a_later_model_that_cannot_load_fails_before_any_generation(tiny_models, tmp_path, run_cli):
    args = eval_args(tiny_models, tmp_path / "e.json", tiny_models["policy"], "no_such_model_anywhere")
    assert "no_such_model_anywhere" in error_line(run_cli("evaluate_generations.py", *args))
    assert not (tmp_path / "e.json").exists()


@pytest.mark.slow
def test_prompt_rows_name_the_rows_evaluated_when_prompts_are_dropped(tiny_models, tmp_path):
    rows = tiny.orca_rows(30)
    for i in range(21, 30, 2):  # held-out rows 21, 23, ... become longer than --max_prompt_length
        rows[i]["question"] += " padding" * 600
    out = tmp_path / "eval.json"
    args = eval_args(tiny_models, out, tiny_models["policy"], extra=("--max_prompt_length", "400"))
    args[args.index("--dataset_name") + 1] = tiny.write_jsonl(tmp_path / "prompts.jsonl", rows)
    args[args.index("--num_prompts") + 1] = "8"  # more than the 5 held-out prompts left
    result = run_in_process("evaluate_generations.py", *args)
    assert_ok(result)
    report = json.loads(out.read_text())
    config = report["config"]
    assert config["prompt_rows"] == [20, 22, 24, 26, 28]
    for row, prompt in zip(config["prompt_rows"], report["models"][0]["prompts"], strict=True):
        assert prompt["prompt"][-1]["content"].startswith(f"Question {row}:")
    # Fewer prompts than asked: all of them are evaluated, and the report and the terminal say how many.
    assert (config["num_prompts"], config["num_prompts_requested"]) == (5, 8)
    assert "Evaluating all 5 held-out prompts, not --num_prompts 8" in result.stdout
    assert "5 dropped as longer than --max_prompt_length 400" in result.stdout
    assert f"Wrote {out}: 5 prompts x 3 completions per model." in result.stdout
    # What scored them is recorded beside the models and the sampling settings.
    assert config["scoring"] == {"reward_funcs": ["reward_model"], "reward_weights": [1.0], "reward_model": {
        "path": str(tiny_models["reward_model"]), "dtype": "float32", "reward_model_dtype": "auto"}}
    assert report["complete"] is True


def test_a_signal_that_lands_in_a_finalizer_is_kept_for_the_next_check(monkeypatch):
    from rlhf.lifecycle.signals import Interrupted, StopOnSignal

    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)  # where Python reports what a finalizer raised

    class Freed:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10_000))  # the handler runs here, inside the finalizer

    with StopOnSignal() as stop:
        Freed()
        with pytest.raises(Interrupted, match="SIGTERM"):
            stop.check()
    assert not dropped


def test_a_signal_that_lands_in_a_weakref_callback_is_kept_for_the_next_check(monkeypatch):
    """As a finalizer: a weakref callback (WeakValueDictionary's `remove`, `weakref.finalize`) drops what it raises."""
    import weakref

    from rlhf.lifecycle.signals import Interrupted, StopOnSignal

    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)

    class Freed:
        pass

    def on_free():
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(10_000))  # the handler runs here, inside weakref.py's callback

    with StopOnSignal() as stop:
        weakref.finalize(Freed(), on_free)
        with pytest.raises(Interrupted, match="SIGTERM"):
            stop.check()
    assert not dropped


@pytest.mark.slow
def test_ctrl_c_saves_the_finished_models_marked_partial(tiny_models, tmp_path):
    out = tmp_path / "eval.json"
    policy = tiny_models["policy"]
    args = eval_args(tiny_models, out, policy, policy, policy)
    args[args.index("--max_new_tokens") + 1] = "200"  # long enough for the signal to land within a model
    process = start_script("evaluate_generations.py", *args)
    wait_for(out, process)  # written once the first model is finished
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["interrupted_by"] == "SIGINT"
    assert 1 <= len(report["models"]) < 3 and len(report["comparison"]) == len(report["models"]) - 1
    assert report["config"]["prompt_rows"] and report["config"]["scoring"]["reward_funcs"] == ["reward_model"]
    (line,) = [line for line in stdout.splitlines() if "SIGINT" in line]
    assert f"partial results ({len(report['models'])} of 3 models) saved to {out}" in line

    # The same command again evaluates the models left, and keeps the finished ones as they were: the report is
    # that of one uninterrupted run.
    finished = len(report["models"])
    result = run_in_process("evaluate_generations.py", *args)
    assert_ok(result)
    assert (f"note: {finished} of 3 models already evaluated in {out} by an interrupted run with these settings: "
            "kept, not generated again") in result.stdout
    resumed = json.loads(out.read_text())
    assert resumed["complete"] is True and "interrupted_by" not in resumed
    assert resumed["models"][:finished] == report["models"]
    whole = tmp_path / "whole.json"
    assert_ok(run_in_process("evaluate_generations.py", *[whole if arg == out else arg for arg in args]))
    uninterrupted = json.loads(whole.read_text())
    assert resumed["models"] == uninterrupted["models"] and resumed["comparison"] == uninterrupted["comparison"]


def test_a_reward_model_that_scores_nan_ends_in_one_line(tiny_models, tmp_path, run_cli):
    import torch
    from safetensors.torch import load_file, save_file

    broken = tiny.build_reward_model(tmp_path / "nan_reward", tiny.build_tokenizer())
    weights = load_file(broken / "model.safetensors")
    weights["score.weight"] = torch.full_like(weights["score.weight"], float("nan"))
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    args = eval_args(tiny_models, tmp_path / "e.json", tiny_models["policy"])
    args[args.index("--reward_model_path") + 1] = broken
    result = run_cli("evaluate_generations.py", *args)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"reward model {broken}" in error and "non-finite" in error
    assert not (tmp_path / "e.json").exists()


def test_an_unfinished_runs_folder_names_its_latest_checkpoint(tiny_models, tmp_path, run_cli):
    run = tmp_path / "grpo_run"
    for step in (2, 4):
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    line = error_line(run_cli("evaluate_generations.py", *eval_args(tiny_models, tmp_path / "e.json", run)))
    assert f"{run} holds no final model yet" in line
    assert f"pass its latest, {run / 'checkpoint-4'}, to --model_path" in line


def test_an_interval_bound_that_would_print_as_its_reference_gets_the_decimals_to_tell_them_apart():
    assert interval_bound(0.50390625, 0.5) == "0.504"  # 0.50 would read as touching 0.5
    assert interval_bound(0.4999, 0.5) == "0.4999" and interval_bound(0.5, 0.5) == "0.50"
    assert interval_bound(0.62, 0.5) == "0.62" and interval_bound(0.656, 0.5) == "0.66"
    assert interval_bound(0.0, 0, 1, percent=True, sign=True) == "+0.0%"  # exactly 0: no gain shown
    assert interval_bound(0.0004, 0, 1, percent=True, sign=True) == "+0.04%"
    assert interval_bound(-0.0002, 0, 1, percent=True, sign=True) == "-0.02%"
    assert interval_bound(0.0375, 0, 1, percent=True, sign=True) == "+3.8%"
    assert win_interval(0.50390625, 0.65625, "-") == "0.504-0.66"
    assert gain_interval(0.0, 0.0375, " to ") == "+0.0% to +3.8%"


def test_a_small_local_data_set_is_evaluated_whole_with_a_note_unless_train_samples_is_given(tiny_models, tmp_path,
                                                                                             run_cli):
    """The default --train_samples (training's default --max_samples, 10,000) holds out no row of a data set of 20:
    fitted with a note, not required (a newcomer learnt of it in a second run)."""
    small = tmp_path / "small.jsonl"
    small.write_text("".join(Path(tiny_models["prompts"]).read_text().splitlines(keepends=True)[:20]))
    common = ["--model_path", tiny_models["policy"], "--dataset_name", small, "--reward_model_name_or_path",
              tiny_models["reward_model"], "--num_prompts", "2", "--num_completions", "1", "--max_new_tokens", "4"]
    result = run_cli("evaluate_generations.py", *common, "--output_file", tmp_path / "eval.json")
    assert result.returncode == 0, result.stderr
    assert (f"note: --train_samples 10000 -> 0 ({small} has 20 rows, all within the default; prompts are drawn from "
            "all of them") in result.stdout
    assert json.loads((tmp_path / "eval.json").read_text())["config"]["train_samples"] == 0
    given = run_cli("evaluate_generations.py", *common, "--train_samples", "20", "--output_file", tmp_path / "e2.json")
    assert "all within the first --train_samples 20 that training used" in error_line(given)


def test_generation_stops_at_every_end_the_model_declares_and_counts_it_as_ended(tiny_models, end_of_turn_models):
    """A model whose generation config declares an end-of-turn id beside the tokenizer's EOS (loaded from an adapter
    folder: its base's): generation stops there and the completion ended, as in training. With EOS alone, the same
    completions ran on to the length limit."""
    from rlhf.evaluation.generation import generate
    from rlhf.models import load_causal_lm

    model, tokenizer = load_causal_lm(end_of_turn_models["adapter"])
    prompts = [[{"role": "user", "content": "Say something."}]] * 4

    def sample(**stops):
        return [c for cs in generate(model, tokenizer, prompts, 2, 8, 1.0, 1.0, 8, 0, **stops) for c in cs]

    completions = sample()
    ended = [c for c in completions if c["ended_with_eos"]]
    assert len(ended) >= 4 and all(c["num_tokens"] <= 8 for c in ended)  # 0.3 a token: 94% end within 8
    assert all(c["num_tokens"] == 8 for c in completions if not c["ended_with_eos"])
    assert any(c["num_tokens"] < 8 for c in ended)
    assert not any(c["ended_with_eos"] for c in sample(stop_token_ids=(tokenizer.eos_token_id,)))


@pytest.mark.slow
def test_an_adapter_whose_base_declares_an_end_of_turn_id_is_scored_as_ended_there(end_of_turn_models, tmp_path):
    """evaluate_generations.py: `ended_with_eos` and the verifier's cut-off reward read the model's stop tokens."""
    data = tiny.write_jsonl(tmp_path / "math.jsonl", [{"question": f"What is {a} + 1?", "ground_truth": str(a + 1)}
                                                      for a in range(6)])
    out = tmp_path / "eval.json"
    assert_ok(run_in_process("evaluate_generations.py", "--model_path", end_of_turn_models["adapter"],
                             "--dataset_name", data, "--train_samples", "0", "--num_prompts", "6",
                             "--num_completions", "2", "--max_new_tokens", "8", "--temperature", "1", "--top_p", "1",
                             "--reward_funcs", "boxed_answer", "--reward_wrong", "-1", "--reward_no_answer", "0",
                             "--output_file", out))
    completions = [c for p in json.loads(out.read_text())["models"][0]["prompts"] for c in p["completions"]]
    # no box in a random model's text: an ended completion has no answer (0), one cut off the lower of the two (-1)
    assert all(c["reward"] == (0.0 if c["ended_with_eos"] else -1.0) for c in completions)
    assert sum(c["ended_with_eos"] for c in completions) >= 6


# ---- A judge: a second reward model scoring every completion, its win rates beside the reward's


def test_an_interval_shows_a_win_or_a_loss_only_wholly_off_one_half():
    from rlhf.evaluation.stats import interval_verdict

    assert interval_verdict(0.504, 0.7) == "win" and interval_verdict(0.2, 0.499) == "loss"
    assert interval_verdict(0.5, 0.7) == interval_verdict(0.3, 0.5) == interval_verdict(0.4, 0.6) == "not shown"


@pytest.mark.parametrize("reward, judge, difference, agreement", [
    ((0.55, 0.70), (0.30, 0.45), (-0.4, -0.1), "disagree"),  # a win under the reward, a loss under the judge
    ((0.30, 0.45), (0.55, 0.70), (0.1, 0.4), "disagree"),    # and the other way round
    ((0.55, 0.70), (0.45, 0.60), (-0.2, -0.05), "differ"),   # a win the judge confirms less, the pair shows it
    ((0.55, 0.70), (0.45, 0.60), (-0.15, 0.02), "agree"),    # ... where the paired difference is not shown
    ((0.66, 0.84), (0.42, 0.61), (-0.33, -0.13), "differ"),  # 0.75 beside 0.52: the two intervals alone said nothing
    ((0.40, 0.60), (0.50, 0.70), (-0.05, 0.15), "agree"),    # neither shows anything: touching 0.5 is no win
    ((0.55, 0.70), (0.51, 0.90), (-0.1, 0.2), "agree"),
])
def test_the_judge_differs_where_the_paired_difference_is_shown_and_disagrees_on_a_win_against_a_loss(
        reward, judge, difference, agreement):
    from rlhf.evaluation.stats import judge_agreement

    reward = {"ci_low": reward[0], "ci_high": reward[1]}
    judge = {"ci_low": judge[0], "ci_high": judge[1], "difference_ci_low": difference[0],
             "difference_ci_high": difference[1]}
    assert judge_agreement(reward, judge) == agreement


def test_the_difference_of_the_judges_and_the_rewards_win_rates_is_paired_over_prompts():
    # On every prompt the reward sees a win and the judge a tie (0.5: its interval shows nothing, which the intervals
    # alone read as no verdict): the paired difference shows the judge lower.
    model = judged([(1.0, 1.0), (1.0, -1.0)], [(2.0, 2.0), (2.0, 0.0)], [(3.0, 3.0), (3.0, 1.0)],
                   [(4.0, 4.0), (4.0, 2.0)])
    baseline = judged([(0.0, 0.0)] * 2, [(1.0, 1.0)] * 2, [(2.0, 2.0)] * 2, [(3.0, 3.0)] * 2)
    judge = compare(model, baseline)["judge"]
    assert judge["win_rate"] == 0.5 and judge["difference"] == -0.5
    assert judge["difference_ci_low"] == judge["difference_ci_high"] == -0.5 and judge["agreement"] == "differ"


def judged(*per_prompt):
    """Completions given by (reward, judge's reward) pairs, one list per prompt."""
    return [[{"reward": r, "judge_reward": j, "num_tokens": 3, "ended_with_eos": True} for r, j in prompt]
            for prompt in per_prompt]


def test_the_judges_win_rate_is_taken_on_its_own_scores_and_summarised_beside_the_rewards():
    # The model wins every pair under the reward and loses every pair under the judge, on 3 prompts.
    model = judged([(1.0, -1.0)] * 2, [(2.0, 0.0)] * 2, [(3.0, 1.0)] * 2)
    baseline = judged([(0.0, 0.0)] * 2, [(1.0, 1.0)] * 2, [(2.0, 2.0)] * 2)
    result = compare(model, baseline)
    assert (result["win_rate"], result["ci_low"], result["mean_reward_delta"]) == (1.0, 1.0, 1.0)
    assert result["judge"] == {"win_rate": 0.0, "ci_low": 0.0, "ci_high": 0.0, "mean_reward_delta": -1.0,
                               "difference": -1.0, "difference_ci_low": -1.0, "difference_ci_high": -1.0,
                               "agreement": "disagree"}
    summary = summarize(model)
    assert summary["mean_reward"] == 2.0 and summary["judge"]["mean_reward"] == 0.0
    assert summary["judge"]["std_reward"] == pytest.approx((2 / 3) ** 0.5)
    assert "judge" not in compare(rewarded([1.0]), rewarded([0.0])) and "judge" not in summarize(rewarded([1.0]))


def test_the_table_puts_the_judges_win_rates_beside_the_rewards_and_says_where_they_disagree():
    from rlhf.evaluation.report import disagreement

    def summary(mean):
        return {"mean_reward": mean, "std_reward": 0.1, "eos_rate": 1.0, "mean_length": 3.0,
                "reward_length_correlation": None,
                "judge": {"mean_reward": -mean, "std_reward": 0.2, "reward_length_correlation": 0.5}}

    def against(path, reward, judge, difference, agreement):
        return {"model_path": path, "win_rate": sum(reward) / 2, "ci_low": reward[0], "ci_high": reward[1],
                "mean_reward_delta": 0.1, "judge": {"win_rate": sum(judge) / 2, "ci_low": judge[0],
                                                    "ci_high": judge[1], "mean_reward_delta": -0.1,
                                                    "difference": sum(difference) / 2,
                                                    "difference_ci_low": difference[0],
                                                    "difference_ci_high": difference[1], "agreement": agreement}}

    comparison = [against("grpo", (0.6, 0.8), (0.2, 0.4), (-0.5, -0.3), "disagree"),
                  against("ppo", (0.2, 0.4), (0.6, 0.8), (0.3, 0.5), "disagree"),
                  against("sft", (0.6, 0.8), (0.4, 0.6), (-0.3, 0.1), "agree"),
                  against("rloo", (0.66, 0.84), (0.42, 0.62), (-0.33, -0.13), "differ")]
    results = [{"model_path": path, "summary": summary(0.5)} for path in ("base", "grpo", "ppo", "sft", "rloo")]
    lines = format_table(results, comparison).splitlines()
    header = lines.index("model   judge mean±std corr(len)  win rate: reward       win rate: judge")
    assert lines[header + 1] == "base    -0.500±0.200       +0.50  (baseline)"
    assert lines[header + 2] == "grpo    -0.500±0.200       +0.50  0.70 [0.60, 0.80]      0.30 [0.20, 0.40]"
    assert lines[header + 6:] == [disagreement(comparison[0]), disagreement(comparison[1]),
                                  disagreement(comparison[3])]  # one line each
    assert disagreement(comparison[0]) == (
        "disagreement: grpo wins against the baseline under the reward (0.70 [0.60, 0.80]) and loses under the judge "
        "(0.30 [0.20, 0.40]): a win under the reward that a judge it never trained against sees as a loss: it may "
        "have learnt what the reward model pays rather than what it stands for; read its completions")
    assert disagreement(comparison[1]).startswith("disagreement: ppo loses against the baseline under the reward "
                                                  "(0.30 [0.20, 0.40]) and wins under the judge (0.70 [0.60, 0.80])")
    assert disagreement(comparison[2]) is None
    assert disagreement(comparison[3]) == (
        "difference: rloo's win rate under the judge (0.52 [0.42, 0.62]) is lower than under the reward (0.75 [0.66, "
        "0.84]) by 0.23 (paired over prompts, judge - reward [-0.33, -0.13]): part of its win under the reward may be "
        "what the reward model pays rather than what it stands for; read its completions")


def judge_args(tiny_models, tmp_path, judge, *models):
    return [*eval_args(tiny_models, tmp_path / "e.json", *(models or [tiny_models["policy"]])),
            "--judge_model_name_or_path", judge]


@pytest.mark.parametrize("judge, message", [
    ("./no_such_judge", "--judge_model_name_or_path"),
    ("policy", "judge {} must be a sequence classifier with num_labels=1 (it has architectures=['LlamaForCausalLM']"),
    ("two_labels", "judge {} must be a sequence classifier with num_labels=1 (it has architectures="
                   "['LlamaForSequenceClassification'], num_labels=2)"),
    ("reward_model", "--judge_model_name_or_path {} is the reward model that scores the completions"),
    ("file", "judge {} is a file; point --judge_model_name_or_path at a model folder"),
    ("no_template", "the tokenizer of judge {} has no chat template, and a judge scores each conversation as its "
                    "template renders it"),
    ("no_tokenizer", "cannot read the tokenizer of judge {} ("),  # e.g. PPO's value_model/, saved without one
    ("policy_adapter", "judge {} is a LoRA adapter of a CAUSAL_LM model, not of a sequence classifier (task_type "
                       "SEQ_CLS); give --judge_model_name_or_path a reward model"),  # e.g. GRPO's --use_peft output
])
def test_a_judge_that_cannot_judge_is_refused_in_one_line_before_any_model_loads(tiny_models, tmp_path, run_cli, judge,
                                                                                  message):
    from transformers import AutoConfig

    if judge == "two_labels":
        tiny.build_reward_model(tmp_path / judge, tiny.build_tokenizer())
        config = AutoConfig.from_pretrained(tmp_path / judge)
        config.num_labels = 2
        config.save_pretrained(tmp_path / judge)
        judge = tmp_path / judge
    elif judge == "file":
        judge = tmp_path / "judge.safetensors"
        judge.write_text("")
    elif judge == "no_template":
        tokenizer = tiny.build_tokenizer()
        tokenizer.chat_template = None
        judge = tiny.build_reward_model(tmp_path / judge, tokenizer)
    elif judge == "policy_adapter":
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        policy = AutoModelForCausalLM.from_pretrained(tiny_models["policy"])
        get_peft_model(policy, LoraConfig(task_type="CAUSAL_LM", r=2)).save_pretrained(tmp_path / judge)
        judge = tmp_path / judge
    elif judge == "no_tokenizer":
        (tmp_path / judge).mkdir()
        for name in ("config.json", "model.safetensors"):
            shutil.copy(Path(tiny_models["reward_model"]) / name, tmp_path / judge)
        judge = tmp_path / judge
    elif judge in tiny_models:
        judge = tiny_models[judge]
    line = error_line(run_cli("evaluate_generations.py", *judge_args(tiny_models, tmp_path, judge)))
    assert message.format(judge) in line and line.count("error:") == 1
    assert not (tmp_path / "e.json").exists()


def test_a_bad_judge_is_said_together_with_the_other_mistakes(tiny_models, tmp_path, run_cli):
    args = judge_args(tiny_models, tmp_path, tmp_path / "no_judge", tmp_path / "no_model")
    line = error_line(run_cli("evaluate_generations.py", *args))
    assert line.startswith("error: 2 things to fix: (1) model ") and "(2) judge " in line
    assert "--judge_model_name_or_path" in line


def negated(reward_model, path):
    """A copy of `reward_model` whose score head is negated: it ranks every pair the other way round."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(reward_model, path)
    weights = load_file(path / "model.safetensors")
    weights["score.weight"] = -weights["score.weight"]
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


@pytest.mark.slow
def test_a_judge_that_ranks_the_other_way_round_disagrees_in_one_line_per_model(tiny_models, tmp_path):
    from transformers import AutoTokenizer

    # Policies that write one token over and over: the tiny reward model scores one's text above every text of the
    # tiny policy's, the other's below (measured: win rates 1.0 and 0.0).
    vocab = AutoTokenizer.from_pretrained(tiny_models["policy"]).get_vocab()
    above, below = (tiny.ending_policy(tiny_models["policy"], tmp_path / token, vocab[token], 0.95)
                    for token in ("olor", "ree"))
    judge = negated(tiny_models["reward_model"], tmp_path / "negated")
    result = run_in_process("evaluate_generations.py",
                            *judge_args(tiny_models, tmp_path, judge, tiny_models["policy"], above, below))
    assert_ok(result)
    report = json.loads((tmp_path / "e.json").read_text())
    wins, losses = report["comparison"]
    assert wins["ci_low"] > 0.5 and losses["ci_high"] < 0.5, "the policies no longer win and lose outright"
    for c in (wins, losses):
        assert c["judge"]["win_rate"] == pytest.approx(1 - c["win_rate"]) and c["judge"]["agreement"] == "disagree"
    assert report["config"]["judge_model_name_or_path"] == str(judge)
    assert report["config"]["scoring"]["judge"] == {"path": str(judge), "dtype": "float32"}
    lines = [line for line in result.stdout.splitlines() if line.startswith("disagreement: ")]
    assert [line.split()[1] for line in lines] == [str(above), str(below)]
    assert "wins against the baseline under the reward" in lines[0] and "loses under the judge" in lines[0]


@pytest.mark.slow
def test_a_judge_with_its_own_tokenizer_scores_beside_the_verifier_when_no_reward_model_scores(tiny_models, tmp_path):
    """The math task: no reward model, the verifier's win rate; the judge scores with its own tokenizer, template."""
    from rlhf.rewards.reward_model import load_reward_model, score_conversations

    data = tiny.write_jsonl(tmp_path / "math.jsonl", [{"question": f"What is {a} + 1?", "ground_truth": str(a + 1)}
                                                      for a in range(6)])
    judge = tiny_models["other_reward_model"]  # another vocabulary than the policy's
    out = tmp_path / "e.json"
    result = run_in_process("evaluate_generations.py", "--model_path", tiny_models["policy"], tiny_models["policy"],
                            "--dataset_name", data, "--train_samples", "0", "--num_prompts", "3",
                            "--num_completions", "2", "--max_new_tokens", "6", "--reward_funcs", "boxed_answer",
                            "--judge_model_name_or_path", judge,
                            "--output_file", out)
    assert_ok(result)
    report = json.loads(out.read_text())
    assert "reward_model" not in report["config"]["scoring"] and report["config"]["scoring"]["judge"]["path"] == str(
        judge)
    (comparison,) = report["comparison"]
    assert comparison["judge"]["win_rate"] == 0.5 and comparison["judge"]["agreement"] == "agree"  # itself again
    model, tokenizer = load_reward_model(str(judge))
    prompts = report["models"][0]["prompts"]
    conversations = [p["prompt"] + [{"role": "assistant", "content": c["text"]}] for p in prompts
                     for c in p["completions"]]
    expected = score_conversations(model, tokenizer, conversations)
    assert [c["judge_reward"] for p in prompts for c in p["completions"]] == pytest.approx(expected, abs=1e-5)
    assert len(set(expected)) > 1  # the judge tells the completions apart
    assert "win rate: judge" in result.stdout and "disagreement" not in result.stdout


def test_a_model_is_evaluated_ending_its_completions_where_its_training_did(tiny_models, end_of_turn_models, tmp_path):
    """After PPO with `--stop_token none --stop_token_id X`, the evaluation stopped at EOS and X (and an adapter folder
    lost X): it reads the run's own stop from its run_manifest.json, as the run records it (transformers' `to_dict`
    writes every `*_token` field as a mask, "<STOP_TOKEN>": the manifest keeps the setting, the Hub's token hidden)."""
    import json
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from config import PPOModelArguments, PPOTrainingConfig, PromptDataArguments
    from evaluate_generations import run_stops
    from rlhf.cli import parse_args
    from rlhf.lifecycle.manifest import MANIFEST, record_launch

    tokenizer = AutoTokenizer.from_pretrained(end_of_turn_models["policy"])
    model = AutoModelForCausalLM.from_pretrained(end_of_turn_models["policy"])
    eos, eot = tokenizer.eos_token_id, end_of_turn_models["end_of_turn"]
    assert run_stops(end_of_turn_models["policy"], model, tokenizer) == (tuple(sorted({eos, eot})), None)  # no run
    adapter = shutil.copytree(end_of_turn_models["adapter"], tmp_path / "adapter")
    both = tuple(sorted({eos, eot}))
    for flags, stops in (([], both), (["--stop_token", "none", "--stop_token_id", str(eot)], (eot,)),
                         (["--stop_token", "none"], ())):
        (adapter / MANIFEST).unlink(missing_ok=True)
        ppo = parse_args((PPOModelArguments, PromptDataArguments, PPOTrainingConfig), flags)[-1]
        ppo.hub_token = "hf_secret"
        record_launch(adapter, "train_ppo.py", [ppo])  # as train_ppo.py records its run
        written = (adapter / MANIFEST).read_text()
        assert "hf_secret" not in written and "<HUB_TOKEN>" in written  # the Hub's token stays hidden
        got, note = run_stops(adapter, model, tokenizer)
        assert got == stops and (note is None) == (not flags)
    assert note == (f"note: {adapter} was trained with its completions ending at no token (to the length limit) (its "
                    "run_manifest.json): evaluated so")
    # A manifest with the mask: --stop_token_id is given only with --stop_token none, so without it the run ended
    # at EOS, the default.
    for stop_token_id, stops in ((None, both), (eot, (eot,))):
        config = {"PPOTrainingConfig": {"stop_token": "<STOP_TOKEN>", "stop_token_id": stop_token_id}}
        (adapter / MANIFEST).write_text(json.dumps({"config": config}))
        assert run_stops(adapter, model, tokenizer)[0] == stops
