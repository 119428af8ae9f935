"""Health checks: the pure detection functions, the monitor on made-up logs, and tiny runs built to trigger each
alarm that a tiny model can show (cut-off completions, no learning signal, a reward model at chance)."""

import json

import pytest

from conftest import assert_ok, grpo_args, ppo_args, run_in_process, scalars
from rlhf import tiny
from rlhf.evaluation.stats import correlation
from rlhf.lifecycle import health
from rlhf.lifecycle.health import HealthMonitor, length_hacking, slope, sustained
from test_report import assert_report


def test_sustained_needs_the_whole_window_beyond_the_threshold():
    assert sustained([0.1, 0.9, 0.8, 0.7], 0.5, 3)
    assert not sustained([0.9, 0.9, 0.4, 0.9], 0.5, 3)  # one log below breaks the run
    assert not sustained([0.9, 0.9], 0.5, 3)  # too few logs yet
    assert sustained([0.0, 0.0, 0.0], 1e-8, 3, below=True)


def test_correlation_and_slope():
    assert correlation([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(1.0)
    assert correlation([1, 2, 3, 4], [8, 6, 4, 2]) == pytest.approx(-1.0)
    assert correlation([1, 2, 3], [5, 5, 5]) is None  # a constant series has no correlation
    assert correlation([1, 2], [1, 2]) is None
    assert slope([1, 3, 5, 7]) == pytest.approx(2.0)
    assert slope([5]) == 0.0


def test_length_hacking_needs_both_rising_together_and_the_length_up_by_half():
    rewards = [0.1 * i for i in range(8)]
    assert length_hacking(rewards, [20 + 3 * i for i in range(8)]) == pytest.approx(1.0)  # 20 -> 41 tokens
    assert length_hacking(rewards, [20 + i for i in range(8)]) is None  # 20 -> 27: up by less than half
    assert length_hacking(rewards, [40 - 3 * i for i in range(8)]) is None  # shorter answers, higher reward: fine
    assert length_hacking(rewards[:5], [20 + 3 * i for i in range(5)]) is None  # fewer logs than the window
    noisy = [20, 60, 22, 58, 25, 61, 30, 65]  # long, not correlated with the reward
    assert length_hacking(rewards, noisy) is None


def logs(**values):
    return {key.replace("__", "/"): value for key, value in values.items()}


def test_each_alarm_is_raised_once_with_one_line_naming_metric_threshold_step_and_flag():
    monitor = HealthMonitor({"kind": "grpo", "max_completion_length": 3})
    raised = [monitor.observe(logs(completions__clipped_ratio=0.97), step) for step in range(1, 6)]
    assert [len(alarms) for alarms in raised] == [0, 0, 1, 0, 0]
    alarm = raised[2][0]
    assert alarm.line == ("health: 97% of completions hit --max_completion_length 3 without EOS "
                          "(completions/clipped_ratio 0.97 > 0.6 for 3 logs, step 3): raise --max_completion_length "
                          "or --missing_eos_penalty")
    assert alarm.record() | {"line": None} == {
        "name": "completions_cut_off", "metric": "completions/clipped_ratio", "value": 0.97, "threshold": 0.6,
        "step": 3, "advice": "raise --max_completion_length or --missing_eos_penalty", "line": None}


def test_with_dynamic_sampling_the_cut_off_share_is_of_every_completion_drawn():
    # Groups whose completions were all cut off got one reward and were discarded: the groups trained on were cut off
    # 10% of the time, the completions the policy generated 90%.
    monitor = HealthMonitor({"kind": "grpo", "max_completion_length": 3})
    drawn = logs(completions__clipped_ratio=0.1, dynamic_sampling__drawn_clipped_ratio=0.9,
                 dynamic_sampling__groups_drawn=8.0, dynamic_sampling__groups_one_reward=4.0)
    raised = [monitor.observe(drawn, step) for step in range(1, 4)]
    assert [[alarm.name for alarm in alarms] for alarms in raised] == [[], [], ["completions_cut_off"]]
    assert raised[2][0].line.startswith("health: 90% of completions hit --max_completion_length 3 without EOS")


def test_a_cut_off_share_that_falls_is_a_run_learning_to_end_its_completions_until_it_stops_falling():
    # The reward-model quickstart's PPO (seed 42): cut off at first, then learning to end within 64 tokens.
    monitor = HealthMonitor({"kind": "ppo", "max_completion_length": 64})
    shares = [1.0, 0.875, 0.6875, 0.6875, 0.69, 0.65]
    raised = [monitor.observe(logs(completions__clipped_ratio=share), step) for step, share in enumerate(shares, 1)]
    assert [len(alarms) for alarms in raised] == [0, 0, 0, 0, 1, 0]  # it stopped falling, above 0.6
    assert raised[4][0].step == 5


def test_no_signal_and_a_constant_reward_function():
    monitor = HealthMonitor({"kind": "grpo"})
    raised = [monitor.observe(logs(frac_reward_zero_std=1.0, rewards__boxed_format__std=0.0,
                                   rewards__reward_model__std=0.3), step) for step in range(1, 6)]
    assert [alarm.name for alarm in raised[2]] == ["reward_constant/boxed_format"]
    assert [alarm.name for alarm in raised[4]] == ["no_learning_signal"]  # over 5 logs: 4 groups move in quarters
    assert "--reward_funcs boxed_format" in raised[2][0].line
    assert "--num_generations" in raised[4][0].line and "for 5 logs, step 5" in raised[4][0].line
    quickstart = HealthMonitor({"kind": "grpo"})  # the math quickstart's first 6 steps
    assert all(quickstart.observe({"frac_reward_zero_std": f}, step) == []
               for step, f in enumerate([0.5, 0.0, 0.5, 0.5, 0.25, 1.0, 1.0, 1.0], 1))


def test_a_missing_eos_penalty_never_taken_is_no_constant_reward():
    # GRPO's --missing_eos_penalty is 0 for every completion that ended: where none is cut off its std stays 0.
    monitor = HealthMonitor({"kind": "grpo"})
    assert all(monitor.observe(logs(rewards__missing_eos_penalty__std=0.0, rewards__reward_model__std=0.3), step) == []
               for step in range(1, 6))


def test_ppo_rollouts_whose_completions_all_score_the_same_have_no_learning_signal():
    # The math PPO stage at seed 42 with GAE lambda 1.0 (docs/results.md): after its first rollout no completion was
    # boxed, every one scored -0.5, for 5 rollouts, and nothing was learnt.
    monitor = HealthMonitor({"kind": "ppo"})
    raised = [monitor.observe({"objective/rollout_without_signal": flat}, step)
              for step, flat in enumerate([0.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1)]
    assert [len(alarms) for alarms in raised] == [0, 0, 0, 0, 0, 1] and raised[5][0].name == "no_learning_signal"
    assert "for 5 logs, step 6" in raised[5][0].line and "--prompts_per_rollout" in raised[5][0].line
    # The math quickstart at seed 1: rollouts 1, 2 and 4 without signal; no alarm.
    monitor = HealthMonitor({"kind": "ppo"})
    assert all(monitor.observe({"objective/rollout_without_signal": flat}, step) == []
               for step, flat in enumerate([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], 1))


def test_ppo_rewards_that_never_vary_are_no_learning_signal_while_the_scores_do():
    # Every reward function gives each completion the same score, but the missing-EOS penalty (or a reward model's
    # score beside them) makes the scores differ: the rollout has signal, its advantages are not zeroed, no alarm.
    monitor = HealthMonitor({"kind": "ppo"})
    for step in range(1, 8):
        monitor.observe({"rewards/boxed_answer/std": 0.0, "objective/rollout_without_signal": 0.0}, step)
    assert [alarm.name for alarm in monitor.alarms] == ["reward_constant/boxed_answer"]  # that function only


def test_a_resumed_run_is_judged_on_its_whole_history():
    # boxed_format varied before the interruption, then every completion was boxed: a resumed launch whose own logs
    # are all 0 raises no "gave every completion the same score" alarm, and a window that began before the resume
    # counts whole.
    history = [{"rewards/boxed_format/std": 0.4, "frac_reward_zero_std": 0.0, "step": 1},
               {"rewards/boxed_format/std": 0.0, "frac_reward_zero_std": 1.0, "step": 2},
               {"eval/win_rate": 0.5, "step": 2}]
    resumed = HealthMonitor({"kind": "grpo"})
    resumed.replay(history)
    assert resumed.alarms == [] and resumed.raised == set()
    raised = [resumed.observe({"rewards/boxed_format/std": 0.0, "frac_reward_zero_std": 1.0}, step)
              for step in range(3, 7)]
    assert [[alarm.name for alarm in alarms] for alarms in raised] == [[], [], [], ["no_learning_signal"]]
    fresh = HealthMonitor({"kind": "grpo"})  # the same launch without the history: a false alarm at its 3rd log
    assert [alarm.name for alarm in fresh.observe({"rewards/boxed_format/std": 0.0}, 5)
            or fresh.observe({"rewards/boxed_format/std": 0.0}, 6)
            or fresh.observe({"rewards/boxed_format/std": 0.0}, 7)] == ["reward_constant/boxed_format"]


def test_a_reward_every_completion_came_to_earn_is_no_alarm():
    monitor = HealthMonitor({"kind": "grpo"})
    stds = [0.3, 0.2, 0.0, 0.0, 0.0, 0.0]  # the format is learnt: every completion is boxed
    assert all(monitor.observe({"rewards/boxed_format/std": std}, step) == [] for step, std in enumerate(stds, 1))


def test_ppo_kl_and_entropy_are_judged_per_token():
    # PPO logs sums over a completion: 16 per completion over 16 tokens is 1 per token, at the limit (not above).
    monitor = HealthMonitor({"kind": "ppo"})
    for step in (1, 2, 3):
        fine = logs(objective__kl=16.0, objective__entropy=16.0, completions__mean_length=16)
        assert monitor.observe(fine, step) == []
    for step in (4, 5, 6):
        alarms = monitor.observe(logs(objective__kl=32.0, objective__entropy=0.5, completions__mean_length=16), step)
    assert {alarm.name for alarm in alarms} == {"kl_runaway", "entropy_collapse"}
    kl = next(alarm for alarm in alarms if alarm.name == "kl_runaway")
    assert kl.value == 2.0 and "--kl_coef" in kl.line and "step 6" in kl.line


def test_grpo_kl_runaway_names_beta_and_length_hacking_fires_on_reward_rising_with_length():
    monitor = HealthMonitor({"kind": "grpo"})
    names = set()
    for step in range(1, 9):
        names |= {alarm.name for alarm in monitor.observe(
            logs(kl=0.3 * step, reward=0.1 * step, completions__mean_length=20 + 4 * step, entropy=1.0), step)}
    assert names == {"kl_runaway", "reward_hacking_length"}
    kl = next(alarm for alarm in monitor.alarms if alarm.name == "kl_runaway")
    assert "--beta" in kl.line and kl.step == 6  # above 1.0 at steps 4, 5 and 6
    quickstart_start = HealthMonitor({"kind": "grpo"})  # KL multiplying from 0 at the start is no alarm
    measured = [0, 0.064, 0.19, 0.27, 0.32]
    assert all(quickstart_start.observe({"kl": kl}, step) == [] for step, kl in enumerate(measured, 1))


def test_a_resumed_run_does_not_raise_again_what_it_raised_before():
    monitor = HealthMonitor({"kind": "grpo"}, raised=["completions_cut_off"])
    assert all(monitor.observe(logs(completions__clipped_ratio=1.0), step) == [] for step in range(1, 5))


def test_reward_accuracy_near_chance():
    monitor = HealthMonitor({"kind": "reward"})
    assert monitor.reward_accuracy(1.0, 40, 12) is None
    alarm = monitor.reward_accuracy(0.55, 40, 12)
    assert alarm.name == "reward_accuracy_near_chance" and "0.55 <= 0.6" in alarm.line and "--max_steps" in alarm.line
    assert monitor.reward_accuracy(0.5, 40, 12) is None  # once


def test_the_callback_adds_health_values_to_the_log_and_prints_once(capsys):
    callback = health.health_callback({"kind": "grpo", "max_completion_length": 3})

    class State:
        global_step = 0
        log_history = []

    seen = []
    for step in range(1, 5):
        State.global_step = step
        log = {"completions/clipped_ratio": 1.0}
        callback.on_log(None, State, None, logs=log)
        seen.append(log.get("health/completions_cut_off"))
    assert seen == [None, None, 1.0, None]
    assert capsys.readouterr().out.count("health: ") == 1


# ---- The held-out evaluation falling below its best point's interval ----

def evaluation(step, accuracy, half_width=0.15):
    """A held-out evaluation's entry of the log history, as rlhf/evaluation/heldout.py logs it under the verifier."""
    return {"eval/win_rate": 0.5, "eval/win_rate_low": 0.4, "eval/win_rate_high": 0.6, "eval/accuracy": accuracy,
            "eval/accuracy_low": max(0.0, accuracy - half_width), "eval/accuracy_high": accuracy + half_width,
            "step": step}


def test_held_out_fell_compares_the_latest_with_the_best_ones_lower_bound():
    # (step, value, lower bound)
    assert health.held_out_fell([(0, 0.09, 0.0), (3, 0.31, 0.19), (6, 0.18, 0.08)]) == (
        (3, 0.31, 0.19), (6, 0.18, 0.08))  # below 0.19
    assert health.held_out_fell([(0, 0.09, 0.0), (3, 0.31, 0.19), (6, 0.19, 0.08)]) is None  # at the bound: within
    assert health.held_out_fell([(0, 0.1, 0.0), (3, 0.2, 0.1), (6, 0.3, 0.2)]) is None  # rising
    assert health.held_out_fell([(3, 0.31, 0.19)]) is None  # one evaluation: nothing to fall from
    # The starting policy is no candidate for the best: its win rate against itself is 0.5 with no interval
    assert health.held_out_fell([(0, 0.5, 0.5), (2, 0.45, 0.3), (4, 0.42, 0.3)]) is None
    assert health.held_out_fell([(0, 0.5, 0.5), (2, 0.7, 0.6), (4, 0.5, 0.4)])[0] == (2, 0.7, 0.6)
    # Of equal best values, the earliest is the best
    assert health.held_out_fell([(1, 0.5, 0.4), (2, 0.5, 0.45), (3, 0.3, 0.2)])[0] == (1, 0.5, 0.4)


def test_the_issues_falling_held_out_accuracy_is_said_once_with_the_best_checkpoint():
    monitor = HealthMonitor({"kind": "ppo"})
    out = "/runs/ppo"
    raised = [monitor.observe_evaluation(evaluation(step, accuracy), step, f"{out}/checkpoint-3")
              for step, accuracy in ((0, 0.09), (3, 0.31), (6, 0.19), (9, 0.12), (10, 0.06))]
    assert [len(alarms) for alarms in raised] == [0, 0, 0, 1, 0]  # 0.19 is within 0.16-0.46; 0.12 is not; once
    alarm = raised[3][0]
    assert (alarm.name, alarm.metric, alarm.value, alarm.threshold, alarm.step) == (
        "held_out_fell", "eval/accuracy", 0.12, 0.16, 9)
    assert alarm.line.startswith("health: held-out accuracy fell to 12.0%, below the best evaluation's 95% interval "
                                 "(31.0% at step 3, lower bound 16.0%) (eval/accuracy 0.12 < 0.16, step 9): ")
    assert (f"{out}/checkpoint-3 holds it (checkpoint rotation keeps it): end on it with --end_on_best_checkpoint, "
            f"or evaluate it with evaluate_generations.py --model_path {out}/checkpoint-3") in alarm.line
    # A run that already ends on it is told so; a best step that no checkpoint holds is told how to keep one
    ending = HealthMonitor({"kind": "ppo"})
    for step, accuracy in ((3, 0.31), (6, 0.05)):
        alarms = ending.observe_evaluation(evaluation(step, accuracy), step, f"{out}/checkpoint-3", True)
    assert f"the run ends on {out}/checkpoint-3 (--end_on_best_checkpoint)" in alarms[0].line
    unsaved = HealthMonitor({"kind": "ppo"})
    for step, accuracy in ((3, 0.31), (6, 0.2), (9, 0.05)):
        alarms = unsaved.observe_evaluation(evaluation(step, accuracy), step, f"{out}/checkpoint-6")
    assert "step 3 was saved in no checkpoint: give --save_steps equal to --eval_steps" in alarms[0].line
    assert f"(the best saved one so far: {out}/checkpoint-6)" in alarms[0].line


def test_a_rising_or_noisy_held_out_curve_is_no_alarm():
    rising, noisy = HealthMonitor({"kind": "grpo"}), HealthMonitor({"kind": "grpo"})
    for step, accuracy in enumerate((0.05, 0.1, 0.15, 0.2, 0.3, 0.35)):
        assert rising.observe_evaluation(evaluation(step, accuracy), step) == []
    for step, accuracy in enumerate((0.05, 0.25, 0.18, 0.3, 0.22, 0.16)):  # each within the best's 0.15-0.45
        assert noisy.observe_evaluation(evaluation(step, accuracy), step) == []


def test_the_win_rate_is_judged_without_the_verifier_and_a_resumed_run_keeps_its_evaluations():
    def win_rate(step, value):
        return {"eval/win_rate": value, "eval/win_rate_low": value - 0.25, "eval/win_rate_high": value + 0.25,
                "step": step}

    history = [win_rate(0, 0.5), {"reward": 1.0, "step": 1}, win_rate(2, 0.8), win_rate(4, 0.7)]
    monitor = HealthMonitor({"kind": "grpo"})
    monitor.replay(history)  # the logs before a resume, evaluations among them: nothing raised
    expected = [(0, 0.5, 0.25), (2, 0.8, 0.55), (4, 0.7, 0.45)]
    assert [list(each) for each in monitor.evaluations] == [pytest.approx(list(each)) for each in expected]
    assert monitor.alarms == []
    alarm, = monitor.observe(win_rate(6, 0.5), 6)  # an evaluation's entry, as the log history holds it
    assert alarm.metric == "eval/win_rate" and "held-out win rate fell to 0.50, below the best evaluation's 95% " \
        "interval (0.80 at step 2, lower bound 0.55)" in alarm.line


def test_the_callback_reads_evaluations_from_the_log_history_and_says_the_alarm_once(capsys):
    from transformers import TrainerControl, TrainerState

    callback = health.health_callback({"kind": "ppo"})
    written = []

    class Reporter:  # a reporting callback (TensorBoard) after it
        def on_log(self, args, state, control, logs=None, **kwargs):
            written.append((state.global_step, logs))

    callback.reporters = [Reporter()]
    state, args = TrainerState(), type("Args", (), {"end_on_best_checkpoint": False})()
    for step, accuracy in ((0, 0.09), (3, 0.31), (6, 0.19), (9, 0.12), (10, 0.06)):
        state.global_step = step
        state.log_history += [{"loss": 1.0, "step": step}, evaluation(step, accuracy)]
        callback.on_step_end(args, state, TrainerControl())
    state.global_step = 11
    state.log_history.append({"loss": 1.0, "step": 11})
    log = {"loss": 1.0}
    callback.on_log(args, state, TrainerControl(), logs=log)
    callback.on_train_end(args, state, TrainerControl())
    assert written == [(9, {"health/held_out_fell": 1.0})] and "health/held_out_fell" not in log
    assert capsys.readouterr().out.count("health: held-out accuracy fell to 12.0%") == 1


def read_report(folder):
    return json.loads((folder / "run_report.json").read_text())


@pytest.mark.slow
def test_grpo_with_three_token_completions_warns_they_are_cut_off(tiny_models, tmp_path):
    out = tmp_path / "run"
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "3",
                                                        "--max_completion_length", "3"))
    assert_ok(result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("health:")]
    assert len(lines) == 1 and "--max_completion_length 3" in lines[0], result.stdout[-3000:]
    assert "step 3" in lines[0] and lines[0].endswith("raise --max_completion_length or --missing_eos_penalty")
    assert scalars(out)["train/health/completions_cut_off"] == [(3, 1.0)]
    report = read_report(out)
    assert [alarm["name"] for alarm in report["health"]] == ["completions_cut_off"]
    assert report["health"][0]["step"] == 3 and report["health"][0]["threshold"] == 0.6
    assert "completions hit --max_completion_length 3" in (out / "run_report.md").read_text()
    assert_report(out, "train_grpo.py", 3)


MATH_ROWS = [{"question": f"What is {a} + {b}?", "ground_truth": str(a + b)} for a in range(4) for b in range(4)]


@pytest.mark.slow
def test_grpo_whose_reward_never_varies_in_a_group_warns_there_is_no_learning_signal(tiny_models, tmp_path):
    # A random tiny model never writes \boxed{}: boxed_format gives every completion the same 0.
    data = tiny.write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    out = tmp_path / "run"
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--dataset_name", data, "--max_steps", "5",
                                                        "--reward_funcs", "boxed_format", "--save_steps", "5"))
    assert_ok(result)
    assert "health: in 100% of groups every completion got the same reward" in result.stdout, result.stdout[-3000:]
    names = {alarm["name"] for alarm in read_report(out)["health"]}
    assert {"no_learning_signal", "reward_constant/boxed_format"} <= names  # (and cut off: it never writes EOS)
    logged = scalars(out)
    assert logged["train/health/no_learning_signal"] == [(5, 1.0)]


@pytest.mark.slow
def test_a_reward_model_no_better_than_chance_is_an_alarm(tiny_models, tmp_path):
    # chosen == rejected: no model can rank them, and a tie counts as wrong.
    rows = [dict(row, rejected=row["chosen"]) for row in tiny.orca_rows(30)]
    data = tiny.write_jsonl(tmp_path / "pairs.jsonl", rows)
    out = tmp_path / "reward"
    result = run_in_process("train_reward_model.py", "--model_name_or_path", tiny_models["policy"],
                                "--dataset_name", data,
                            "--output_dir", out, "--max_steps", "2", "--per_device_train_batch_size", "4",
                            "--eval_samples", "6", "--save_steps", "2", "--logging_steps", "1")
    assert_ok(result)
    assert "health: the reward model ranks 0% of 6 held-out pairs right" in result.stdout, result.stdout[-3000:]
    report = read_report(out)
    assert [alarm["name"] for alarm in report["health"]] == ["reward_accuracy_near_chance"]
    assert report["finished"] is True
    assert scalars(out)["train/health/reward_accuracy_near_chance"] == [(2, 1.0)]


# Varies at the first 2 steps, then gives every completion 0 (a format every completion has come to follow).
LEARNT = '''
def learnt(completions, trainer_state, **kwargs):
    if trainer_state.global_step < 2:
        return [float(i % 2) for i in range(len(completions))]
    return [0.0] * len(completions)
'''


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_a_continued_run_raises_no_alarm_its_whole_history_contradicts(tiny_models, tmp_path, script):
    # 3 steps, then continued to 6 from checkpoint-3: the continued launch sees the reward constant at each of its
    # own 3 logs, but over the run it varied first. Before, each launch judged only its own logs: a false alarm.
    (tmp_path / "learnt.py").write_text(LEARNT)
    out = tmp_path / "run"

    def run(steps):
        if script == "train_grpo.py":
            args = grpo_args(tiny_models, out, "--max_steps", steps)
        else:  # rollouts of 2 prompts; no missing-EOS penalty, so that the scores are the reward's
            args = ppo_args(tiny_models, out, "--total_episodes", 2 * steps, "--missing_eos_penalty", "0")
        return run_in_process(script, *args, "--save_steps", "3", "--reward_funcs", "learnt.learnt", cwd=tmp_path)

    assert_ok(run(3))
    result = run(6)
    assert_ok(result)
    assert "checkpoint-3" in result.stdout
    logged = scalars(out)["train/rewards/learnt.learnt/std"]
    assert [step for step, _ in logged] == [1, 2, 3, 4, 5, 6] and logged[0][1] > 0 and logged[-1][1] == 0
    assert "gave every completion the same score" not in result.stdout
    assert not [alarm for alarm in read_report(out)["health"] if alarm["name"].startswith("reward_constant")]


# The gamed H200 run at seed 1 (math quickstart, the seeds' 1 / -1 / -0.5 with boxed_format paid at weight 1):
# boxed_answer from -0.52 to -1.0, 0.28 lower over its last 3 logs than its first 3, while boxed_format rose to 1.0.
GAMED = {"boxed_answer": [-0.52, -0.66, -0.77, -0.85, -0.88, -0.90, -0.93, -0.96],
         "boxed_format": [0.10, 0.25, 0.45, 0.70, 0.85, 0.95, 1.00, 1.00]}
# A healthy run of the same recipe: boxed_answer 0.08 lower at its end (the most the healthy runs fell), its format
# learnt.
HEALTHY = {"boxed_answer": [-0.50, -0.42, -0.60, -0.55, -0.45, -0.62, -0.58, -0.60],
           "boxed_format": [0.10, 0.25, 0.45, 0.70, 0.85, 0.95, 1.00, 1.00]}


def observe_rewards(monitor, means, weights, total_key="reward"):
    raised = []
    for step in range(len(next(iter(means.values())))):
        logs = {f"rewards/{name}/mean": values[step] for name, values in means.items()}
        logs[total_key] = sum(weights[name] * values[step] for name, values in means.items())
        raised.append(monitor.observe(logs, step + 1))
    return raised


@pytest.mark.parametrize("kind, total_key", [("grpo", "reward"), ("ppo", "objective/scores")])
def test_a_reward_function_falling_while_the_total_rises_is_an_alarm_while_the_run_trains(kind, total_key):
    weights = {"boxed_answer": 1.0, "boxed_format": 1.0}
    raised = observe_rewards(HealthMonitor({"kind": kind, "reward_weights": weights}), GAMED, weights, total_key)
    # from the 6th log on (3 logs to compare with the first 3): at once, and once
    assert [len(alarms) for alarms in raised] == [0, 0, 0, 0, 0, 1, 0, 0]
    alarm = raised[5][0]
    assert alarm.name == "reward_gamed" and alarm.metric == "fall of rewards/boxed_answer/mean"
    assert "boxed_answer fell by 0.23 since the run began while boxed_format rose" in alarm.line
    assert "(fall of rewards/boxed_answer/mean 0.227 > 0.15, step 6)" in alarm.line
    assert "docs/rewards.md" in alarm.advice and alarm.value == pytest.approx(0.226667, abs=1e-6)
    # the whole run, replayed: 0.28 at its end, as measured
    from rlhf.lifecycle.health import gamed_reward

    assert gamed_reward(GAMED, [], weights) == ("boxed_answer", pytest.approx(0.28, abs=1e-9), "boxed_format")


def test_no_gamed_reward_alarm_on_healthy_runs():
    weights = {"boxed_answer": 1.0, "boxed_format": 1.0}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), HEALTHY, weights))
    # today's quickstart: boxed_format logged, not paid; both rise as the model learns
    weights = {"boxed_answer": 1.0, "boxed_format": 0.0}
    learning = {"boxed_answer": [0.0, 0.02, 0.05, 0.1, 0.2, 0.25, 0.3, 0.35],
                "boxed_format": [0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0, 1.0]}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), learning, weights))
    # a function logged at weight 0 that falls games nothing: no alarm
    falling_format = {"boxed_answer": learning["boxed_answer"], "boxed_format": learning["boxed_format"][::-1]}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), falling_format,
                                   weights))
    # one function alone: the total is that function, it cannot fall while the total rises
    alone = {"reward_model": [0.1, 0.5, 0.2, 0.9, -0.3, 0.4, 0.0, 0.2]}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo"}), alone, {"reward_model": 1.0}))


# The reward-model quickstart's GRPO with --missing_eos_penalty 3 at seed 3 (4 prompts a step): the reward model's
# mean per log jumps with the prompts drawn (0.2-1.1 from one log to the next), and its first 3 logs' mean is 0.16
# above that of steps 6-8 while the penalty's rose by 0.63: noise, and the old rule's alarm at step 8. The run ended
# 74% of its evaluation answers (the base 32%) and won, 0.72 and 0.75 under the judge (docs/results.md, "A cut-off
# answer costs 3").
NOISY = {"reward_model": [0.58, 0.37, 0.65, 0.33, 0.81, 0.29, 0.98, -0.16, 0.37, 0.47, 0.73, 0.63],
         "missing_eos_penalty": [-1.5, -2.06, -0.94, -1.5, -1.12, -2.06, -0.19, -0.38, 0.0, -0.94, -0.75, -0.75]}


def test_a_fall_within_the_noise_of_a_reward_models_scores_is_no_alarm():
    from rlhf.lifecycle.health import GAMED_FALL, GAMED_NOISE, gamed_reward, window_noise

    weights = {"reward_model": 1.0, "missing_eos_penalty": 1.0}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), NOISY, weights))
    steps_1_to_8 = {name: values[:8] for name, values in NOISY.items()}
    assert gamed_reward(steps_1_to_8, [], weights, noise=0) == (  # the old rule: GAMED_FALL alone
        "reward_model", pytest.approx(0.163, abs=1e-3), "missing_eos_penalty")
    assert GAMED_NOISE * window_noise(NOISY["reward_model"][:8]) > 0.6 > GAMED_FALL
    # The same scores falling by 1.5 from step 5 on: beyond the noise, an alarm.
    falling = {"reward_model": [v - 1.5 * (i >= 4) for i, v in enumerate(NOISY["reward_model"])],
               "missing_eos_penalty": NOISY["missing_eos_penalty"]}
    raised = observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), falling, weights)
    alarm = next(alarm for alarms in raised for alarm in alarms)
    assert alarm.name == "reward_gamed" and "reward function reward_model fell by" in alarm.line
    # A smooth series (the calibrated math runs) has noise below GAMED_FALL, which decides as before.
    assert GAMED_NOISE * window_noise(GAMED["boxed_answer"]) < GAMED_FALL


def test_accuracy_falling_while_an_unpaid_format_term_saturates_is_an_alarm():
    weights = {"boxed_answer": 1.0, "boxed_format": 0.0}
    means = {"boxed_answer": [0.30, 0.28, 0.25, 0.15, 0.10, 0.05, 0.02, 0.0],
             "boxed_format": [0.4, 0.5, 0.6, 0.8, 0.95, 1.0, 1.0, 1.0]}
    raised = observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), means, weights)
    assert [alarm.name for alarms in raised for alarm in alarms] == ["reward_gamed"]


# A length penalty (the share of over-long completions) paid at weight -0.1, falling from 0.6 to 0.27 as the policy
# learns while the verifier rises: the penalty pays more, as intended (it fired when any non-zero weight counted as
# paid and any fall as gaming).
PENALTY_FALLS = {"boxed_answer": [0.1, 0.12, 0.15, 0.2, 0.22, 0.25, 0.27, 0.3],
                 "too_long": [0.6, 0.6, 0.6, 0.5, 0.4, 0.27, 0.27, 0.27]}


def test_a_penalty_that_falls_pays_more_and_is_no_alarm():
    weights = {"boxed_answer": 1.0, "too_long": -0.1}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), PENALTY_FALLS,
                                   weights))
    from rlhf.lifecycle.health import gamed_reward

    assert gamed_reward(PENALTY_FALLS, [], weights) is None
    # the same fall of a function paid at weight 1 pays 0.33 less: that is an alarm
    assert gamed_reward(PENALTY_FALLS, [], {"boxed_answer": 1.0, "too_long": 1.0}) == (
        "too_long", pytest.approx(0.33, abs=1e-9), "boxed_answer")


def test_what_a_term_pays_is_its_weight_times_its_mean():
    from rlhf.lifecycle.health import gamed_reward

    # A penalty at weight -0.5 rising by 0.4 pays 0.2 less while the verifier rises: an alarm, named as a rise.
    rising = {"boxed_answer": PENALTY_FALLS["boxed_answer"], "too_long": [0.2, 0.2, 0.2, 0.3, 0.4, 0.6, 0.6, 0.6]}
    weights = {"boxed_answer": 1.0, "too_long": -0.5}
    raised = observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), rising, weights)
    alarm = next(alarm for alarms in raised for alarm in alarms)
    assert alarm.name == "reward_gamed" and alarm.value == pytest.approx(0.2, abs=1e-6)
    assert "reward function too_long rose by 0.40 (0.20 at weight -0.5) since the run began while boxed_answer rose" \
        in alarm.line and "(fall of -0.5 x rewards/too_long/mean 0.2 > 0.15" in alarm.line
    # At weight -0.1 the same rise costs 0.04 of the total: no alarm.
    assert gamed_reward(rising, [], {"boxed_answer": 1.0, "too_long": -0.1}) is None
    # The verifier falling while a format bonus paid at weight 0.1 saturates, or while a penalty at weight -0.1
    # falls (shorter answers at the cost of right ones): the risers, in their own units, the way their weight pays.
    falling = [0.5, 0.48, 0.45, 0.35, 0.3, 0.28, 0.25, 0.25]
    saturating = [0.1, 0.25, 0.45, 0.7, 0.85, 0.95, 1.0, 1.0]
    assert gamed_reward({"boxed_answer": falling, "boxed_format": saturating}, [],
                        {"boxed_answer": 1.0, "boxed_format": 0.1})[::2] == ("boxed_answer", "boxed_format")
    assert gamed_reward({"boxed_answer": falling, "too_long": PENALTY_FALLS["too_long"]}, [],
                        {"boxed_answer": 1.0, "too_long": -0.1})[::2] == ("boxed_answer", "too_long")
    weights = {"boxed_answer": 1.0, "too_long": -0.1}
    raised = observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}),
                             {"boxed_answer": falling, "too_long": PENALTY_FALLS["too_long"]}, weights)
    assert "boxed_answer fell by 0.17 since the run began while too_long (weight -0.1) fell" in next(
        alarm for alarms in raised for alarm in alarms).line


def test_a_reward_function_named_by_its_file_keeps_its_whole_name():
    # TRL and PPO log `rewards/<name>/mean`, the name as --reward_funcs gave it: a path keeps its slashes.
    from rlhf.evaluation.metrics import reward_function

    assert reward_function("rewards/rewards/len.py:too_long/mean") == "rewards/len.py:too_long"
    assert reward_function("train/rewards/../r/f.py:fn/std", "std") == "../r/f.py:fn"
    assert reward_function("rewards/boxed_answer/std", "mean") is None
    assert reward_function("rewards/boxed_answer/min") is None and reward_function("reward") is None
    assert reward_function("rewards//mean") is None
    # Its weight is found under that name (the split name, "rewards", had none: weight 1, a false alarm), and its
    # alarms name it whole.
    name = "rewards/len.py:too_long"
    weights = {"boxed_answer": 1.0, name: -0.1}
    means = {"boxed_answer": PENALTY_FALLS["boxed_answer"], name: PENALTY_FALLS["too_long"]}
    assert not any(observe_rewards(HealthMonitor({"kind": "grpo", "reward_weights": weights}), means, weights))
    monitor = HealthMonitor({"kind": "ppo"})
    for step in range(1, 4):
        raised = monitor.observe({f"rewards/{name}/std": 0.0, "rewards/boxed_answer/std": 0.5}, step)
    assert [alarm.name for alarm in raised] == [f"reward_constant/{name}"]
    assert f"reward function {name} gave every completion" in raised[0].line
    assert f"--reward_funcs {name} can score" in raised[0].line


CONSTANT = "def zero(completions, **kwargs):\n    return [0.0] * len(completions)\n"
# Each script's 3 logs: 3 GRPO steps, 3 PPO rollouts of 2 prompts.
THREE_LOGS = {"train_grpo.py": (grpo_args, ["--max_steps", "3"]),
              "train_ppo.py": (ppo_args, ["--total_episodes", "6"])}


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_a_reward_function_given_by_file_is_named_whole_in_alarm_report_and_tensorboard(tiny_models, tmp_path, script):
    (tmp_path / "funcs").mkdir()
    (tmp_path / "funcs" / "const.py").write_text(CONSTANT)
    name, out = "funcs/const.py:zero", tmp_path / "run"
    build, length = THREE_LOGS[script]
    result = run_in_process(script, *build(tiny_models, out, *length, "--reward_funcs", name, "reward_model"),
                            cwd=tmp_path)
    assert_ok(result)
    line = f"health: reward function {name} gave every completion the same score"
    assert line in result.stdout, result.stdout[-3000:]
    assert f"reward_constant/{name}" in {alarm["name"] for alarm in read_report(out)["health"]}
    logged = scalars(out)
    assert [value for _, value in logged[f"train/rewards/{name}/std"]] == [0.0, 0.0, 0.0]
    assert logged[f"train/health/reward_constant/{name}"] == [(3, 1.0)]


def test_with_dynamic_sampling_no_signal_is_judged_on_the_groups_drawn_and_a_cap_reached_on_most_steps_is_said():
    # Dynamic sampling trains on groups whose rewards differ: frac_reward_zero_std is 0 while 19 of 20 groups drawn
    # got one reward. The same alarm reads the groups drawn; the cap, reached at more than half the generations of 3
    # logs in a row, is an alarm of its own.
    monitor = HealthMonitor({"kind": "grpo", "dynamic_sampling_max_gen_batches": 5})
    drawn = logs(frac_reward_zero_std=0.0, dynamic_sampling__groups_drawn=20.0,
                 dynamic_sampling__groups_one_reward=19.0, dynamic_sampling__cap_reached=0.75)
    raised = [monitor.observe(drawn, step) for step in range(1, 6)]
    assert [[alarm.name for alarm in alarms] for alarms in raised] == [
        [], [], ["dynamic_sampling_cap_reached"], [], ["no_learning_signal"]]
    assert raised[4][0].line.startswith("health: in 95% of the groups drawn every completion got the same reward")
    assert "groups_one_reward / groups_drawn 0.95 > 0.9 for 5 logs" in raised[4][0].line
    assert raised[2][0].line == (
        "health: dynamic sampling found too few groups whose rewards differ in 5 generation batches in 75% of "
        "generations, so those steps trained on groups of one reward (dynamic_sampling/cap_reached 0.75 > 0.5 for 3 "
        "logs, step 3): raise --dynamic_sampling_max_gen_batches, or make rewards differ within more groups (the "
        "advice of no_learning_signal)")
    # Most groups discarded (75%, the math quickstart's share) and the cap reached at half the generations at most:
    # dynamic sampling doing its work, no alarm.
    working = HealthMonitor({"kind": "grpo", "dynamic_sampling_max_gen_batches": 10})
    assert all(working.observe(logs(frac_reward_zero_std=0.0, dynamic_sampling__groups_drawn=16.0,
                                    dynamic_sampling__groups_one_reward=12.0, dynamic_sampling__cap_reached=cap),
                               step) == [] for step, cap in enumerate([0.5, 1.0, 0.0, 0.5, 0.5, 1.0, 0.5], 1))
