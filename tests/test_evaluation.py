import json

import pytest

from conftest import run_script
from rlhf.evaluation import bootstrap_interval, compare, pearson, prompt_win_scores, rank_labels, summarize


def test_ranks_best_medium_worst():
    assert rank_labels([0.1, 0.9, 0.5, -1.0]) == ["MEDIUM", "BEST", "MEDIUM", "WORST"]
    assert rank_labels([2.0, 1.0]) == ["BEST", "WORST"]
    assert rank_labels([0.3]) == ["BEST"]
    assert rank_labels([1.0, 1.0, 1.0]) == ["BEST", "MEDIUM", "WORST"]  # ties keep the order


def test_win_scores_count_ties_half_and_use_every_pair():
    # Prompt 1: model 2 vs baseline 1 -> win. Prompt 2: tie. Prompt 3: of the 4 pairs one ties, three are lost.
    scores = prompt_win_scores([[2.0], [0.5], [1.0, 0.0]], [[1.0], [0.5], [1.0, 3.0]])
    assert scores == [1.0, 0.5, pytest.approx((0.5 + 0 + 0 + 0) / 4)]


def test_win_rate_interval_brackets_the_estimate_and_narrows_with_more_prompts():
    few = compare([[1.0], [0.0], [1.0], [1.0]], [[0.0], [1.0], [0.0], [0.0]])
    assert few["win_rate"] == 0.75
    assert few["ci_low"] <= 0.75 <= few["ci_high"]
    assert few["mean_reward_delta"] == pytest.approx(0.75 - 0.25)
    many = compare([[1.0], [0.0], [1.0], [1.0]] * 25, [[0.0], [1.0], [0.0], [0.0]] * 25)
    assert many["win_rate"] == 0.75
    assert many["ci_high"] - many["ci_low"] < few["ci_high"] - few["ci_low"]
    # A model identical to the baseline wins exactly half, with no spread.
    same = compare([[0.3, 0.7]] * 5, [[0.3, 0.7]] * 5)
    assert (same["win_rate"], same["ci_low"], same["ci_high"], same["mean_reward_delta"]) == (0.5, 0.5, 0.5, 0)


def test_bootstrap_is_reproducible_and_matches_a_known_case():
    values = [0.0] * 50 + [1.0] * 50
    low, high = bootstrap_interval(values, seed=3)
    assert (low, high) == bootstrap_interval(values, seed=3)
    # Mean 0.5, standard error 0.05: the 95% interval is about 0.5 +- 0.1.
    assert low == pytest.approx(0.40, abs=0.03) and high == pytest.approx(0.60, abs=0.03)


def test_summary_and_length_correlation():
    completions = [{"reward": r, "num_tokens": n, "ended_with_eos": e}
                   for r, n, e in [(1.0, 10, True), (2.0, 20, True), (3.0, 30, False)]]
    summary = summarize(completions)
    assert summary["mean_reward"] == 2.0 and summary["min_reward"] == 1.0 and summary["max_reward"] == 3.0
    assert summary["mean_length"] == 20.0 and summary["eos_rate"] == pytest.approx(2 / 3)
    assert summary["reward_length_correlation"] == pytest.approx(1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None


def eval_args(tiny_models, output, *models, extra=()):
    return ["--model_path", *models, "--reward_model_path", tiny_models["reward_model"],
            "--dataset_name", tiny_models["prompts"], "--train_samples", "20", "--num_prompts", "4",
            "--num_completions", "3", "--max_new_tokens", "8", "--output_file", output, *extra]


def test_two_models_are_compared_on_the_same_held_out_prompts(tiny_models, tmp_path):
    from rlhf import tiny

    other = tiny.build_policy(tmp_path / "other_policy", tiny.build_tokenizer(), seed=5)
    out = tmp_path / "eval.json"
    result = run_script("evaluate_generations.py", *eval_args(tiny_models, out, tiny_models["policy"], other))
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


def test_evaluating_the_same_model_twice_is_a_tie(tiny_models, tmp_path):
    out = tmp_path / "eval.json"
    result = run_script("evaluate_generations.py",
                        *eval_args(tiny_models, out, tiny_models["policy"], tiny_models["policy"]))
    assert result.returncode == 0, result.stderr[-3000:]
    (comparison,) = json.loads(out.read_text())["comparison"]
    assert comparison["win_rate"] == 0.5 and comparison["mean_reward_delta"] == 0  # same prompts, same seeds


@pytest.mark.parametrize("change, message", [
    (("--model_path", "./no_such_model"), "--model_path"),
    (("--train_samples", "1000"), "--train_samples"),
])
def test_user_errors_end_in_one_line(tiny_models, tmp_path, change, message):
    args = eval_args(tiny_models, tmp_path / "e.json", tiny_models["policy"])
    if change[0] == "--model_path":
        args[args.index("--model_path") + 1] = change[1]
    else:
        args[args.index(change[0]) + 1] = change[1]
    result = run_script("evaluate_generations.py", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr.splitlines()[-1] and result.stderr.splitlines()[-1].startswith("error:")
