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

    # Re-running has nothing to do: each finished stage says so (the scripts' own check), nothing is redone.
    again = run_script("quickstart.py", "--tiny", "--output_dir", out)
    assert again.returncode == 0
    assert again.stdout.count("nothing to do") == 3 and "=== evaluation === up to date" in again.stdout
