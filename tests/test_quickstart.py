"""`python quickstart.py --tiny`: the whole pipeline, as a newcomer runs it, on tiny models."""

import json

from conftest import run_script


def test_tiny_quickstart_runs_every_stage_and_summarizes(tmp_path):
    out = tmp_path / "qs"
    result = run_script("quickstart.py", "--tiny", "--output_dir", out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in ("reward model", "GRPO", "PPO", "evaluation", "plots", "summary"):
        assert f"=== {stage} ===" in result.stdout
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert (summary["task"], summary["seed"]) == ("rm", 42)
    assert [c["model_path"] for c in summary["comparison"]] == [str(out / "grpo"), str(out / "ppo")]
    assert all(c["ci_low"] <= c["win_rate"] <= c["ci_high"] for c in summary["comparison"])
    assert (out / "training_progress.png").stat().st_size > 10_000 and (out / "training_metrics.csv").exists()
    # Each training stage keeps only its last checkpoint (enough to resume or continue; each holds optimizer state).
    for stage in ("reward_model", "grpo", "ppo"):
        assert [path.name for path in (out / stage).glob("checkpoint-*")] == ["checkpoint-4"], stage

    # Re-running has nothing to do: each finished stage says so (the scripts' own check), nothing is redone.
    again = run_script("quickstart.py", "--tiny", "--output_dir", out)
    assert again.returncode == 0
    assert again.stdout.count("nothing to do") == 3 and "=== evaluation === up to date" in again.stdout


def test_tiny_math_quickstart_trains_with_the_verifier_and_reports_accuracy(tmp_path):
    out = tmp_path / "math"
    result = run_script("quickstart.py", "--tiny", "--task", "math", "--seed", "3", "--output_dir", out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "=== reward model ===" not in result.stdout and "=== GRPO ===" in result.stdout
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert (summary["task"], summary["seed"]) == ("math", 3)
    base = summary["models"][next(iter(summary["models"]))]
    assert {"format_rate", "verifier_accuracy", "verifier_accuracy_ci_low", "verifier_accuracy_ci_high"} <= set(base)
    (comparison,) = summary["comparison"]
    assert comparison["accuracy_delta_ci_low"] <= comparison["accuracy_delta"] <= comparison["accuracy_delta_ci_high"]
    manifest = json.loads((out / "grpo" / "run_manifest.json").read_text())
    assert manifest["config"]["RewardArguments"]["reward_funcs"] == ["boxed_answer", "boxed_format"]
    assert manifest["config"]["GRPOTrainingConfig"]["seed"] == 3
