"""bench/benchmark.py on tiny models: every figure it reports comes out (the figures themselves are not judged)."""

import json

from conftest import run_script


def test_benchmark_reports_each_run_and_the_ratio_to_trl_grpo(tmp_path):
    output = tmp_path / "bench.json"
    result = run_script("bench/benchmark.py", "--model", "tiny", "--runs", "grpo", "trl_grpo", "ppo", "--steps", "2",
                        "--max_completion_length", "16", "--work_dir", tmp_path / "work", "--output", output)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    runs = {r["run"]: r for r in report["results"]}
    assert set(runs) == {"grpo", "trl_grpo", "ppo"}
    for run in runs.values():
        assert run["returncode"] == 0
        assert len(run["step_seconds"]) == 2 and run["seconds_per_step"] > 0  # warm-up step left out
        assert 0 < run["mean_completion_tokens"] <= 16
        assert run["completion_tokens_per_s"] > 0 and run["peak_rss_gb"] > 0.1
        assert run["epoch_hours"] > 0
    # Identical settings: the same 4 prompts x 4 completions per step for ours and TRL's (PPO: 16 prompts).
    assert runs["trl_grpo"]["command"][1:4] == ["-m", "trl.cli.main", "grpo"]
    assert report["ratios"]["grpo/trl_grpo"]["seconds_per_step"] > 0
    assert all(report["reward_model_scoring"][dtype]["sequences_per_s"] > 0 for dtype in ("float32", "bfloat16"))
    assert "grpo vs trl_grpo: s/step ratio" in result.stdout
