"""GRPO and evaluation with rule-based, custom and mixed rewards, run as subprocesses on tiny models."""

import json
from pathlib import Path

import pytest

from conftest import assert_ok, error_line, grpo_args, ppo_args, run_in_process, scalars
from rlhf import tiny

MATH_ROWS = [{"question": f"What is {a} + {b}?", "ground_truth": str(a + b)} for a in range(4) for b in range(4)]
CUSTOM = '''
def brevity(prompts, completions, **kwargs):
    return [-len(c[-1]["content"]) / 100 for c in completions]


def crashes(prompts, completions, ground_truth, **kwargs):
    raise RuntimeError("no score for " + ground_truth[0])
'''


# Each script's tiny run and its length: 2 GRPO steps, 4 PPO episodes.
MATH_RUNS = {"train_grpo.py": (grpo_args, ["--max_steps", "2"]), "train_ppo.py": (ppo_args, ["--total_episodes", "4"])}


def math_args(tiny_models, tmp_path, *extra, script="train_grpo.py"):
    """A short run of `script` on tiny math data with reference answers, into tmp_path/run."""
    data = tiny.write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    build, length = MATH_RUNS[script]
    return build(tiny_models, tmp_path / "run", "--dataset_name", data, *length,
                 "--system_prompt", r"Put your final answer within \boxed{}.", *extra)


@pytest.mark.slow
def test_grpo_with_the_boxed_answer_verifier_on_question_ground_truth_data(tiny_models, tmp_path):
    result = run_in_process("train_grpo.py", *math_args(tiny_models, tmp_path, "--reward_funcs", "boxed_answer",
                                                        "--reward_wrong", "-1", "--reward_no_answer", "-0.5"))
    assert_ok(result)
    logged = scalars(tmp_path / "run")
    # A random tiny model never writes \boxed{...}: every completion that ended gets the "no answer" reward (-0.5),
    # every one cut off at the length limit the lower of wrong and missing (-1), read from TRL's completion_ids.
    clipped = dict(logged["train/completions/clipped_ratio"])
    for step, mean in logged["train/rewards/boxed_answer/mean"]:
        assert mean == pytest.approx(-0.5 - 0.5 * clipped[step], abs=1e-6)
    assert "train/rewards/boxed_answer/std" in logged
    assert "schema 'question'" in result.stderr


@pytest.mark.slow
def test_grpo_with_a_custom_function_by_import_path(tiny_models, tmp_path):
    (tmp_path / "my_rewards.py").write_text(CUSTOM)
    result = run_in_process("train_grpo.py", *math_args(tiny_models, tmp_path, "--reward_funcs", "my_rewards.brevity"),
                            cwd=tmp_path)
    assert_ok(result)
    assert all(value < 0 for _, value in scalars(tmp_path / "run")["train/rewards/my_rewards.brevity/mean"])


@pytest.mark.slow
def test_grpo_and_evaluation_with_a_custom_function_by_file_path_from_another_folder(tiny_models, tmp_path):
    """`path/to/file.py:function`, as other RL frameworks take it: it answered that the module 'does not import:
    TypeError: the 'package' argument is required'."""
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "my_rewards.py").write_text(CUSTOM)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    name = "../rewards/my_rewards.py:brevity"
    result = run_in_process("train_grpo.py", *math_args(tiny_models, tmp_path, "--reward_funcs", name), cwd=elsewhere)
    assert_ok(result)
    assert all(value < 0 for _, value in scalars(tmp_path / "run")[f"train/rewards/{name}/mean"])
    out = tmp_path / "eval.json"
    by_path = f"{tmp_path / 'rewards' / 'my_rewards.py'}:brevity"  # absolute, this time
    result = run_in_process("evaluate_generations.py", "--model_path", tiny_models["policy"], "--dataset_name",
                            tmp_path / "math.jsonl", "--train_samples", "0", "--num_prompts", "2", "--num_completions",
                            "1", "--max_new_tokens", "4", "--reward_funcs", by_path, "--output_file", out,
                            cwd=elsewhere)
    assert_ok(result)
    assert json.loads(out.read_text())["models"][0]["summary"]["mean_reward"] < 0


@pytest.mark.parametrize("name, message", [
    ("my_rewards.py:nope", "cannot import reward function 'my_rewards.py:nope' (module "),
    ("my_reward.py:brevity", "reward function 'my_reward.py:brevity': my_reward.py is not a file (did you mean "
     "my_rewards.py?)"),
    ("my_rewards.txt:brevity", "give module.function or path/to/file.py:function"),
])
def test_a_reward_function_file_that_cannot_work_is_one_line(tiny_models, tmp_path, run_cli, monkeypatch, name,
                                                             message):
    (tmp_path / "my_rewards.py").write_text(CUSTOM)
    monkeypatch.chdir(tmp_path)
    result = run_cli("train_grpo.py", *math_args(tiny_models, tmp_path, "--reward_funcs", name))
    assert message in error_line(result)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_grpo_with_a_weighted_mix_of_reward_model_and_function(tiny_models, tmp_path):
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "reward_model", "boxed_format",
                     "--reward_weights", "1.0", "0.5")
    assert_ok(run_in_process("train_grpo.py", *args))
    logged = scalars(tmp_path / "run")
    model_mean = dict(logged["train/rewards/reward_model/mean"])
    format_mean = dict(logged["train/rewards/boxed_format/mean"])
    total = dict(logged["train/reward"])
    for step in total:  # TRL's reward is the weighted sum of the functions
        assert total[step] == __import__("pytest").approx(model_mean[step] + 0.5 * format_mean[step], abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_a_custom_function_that_raises_is_named_in_one_line(tiny_models, tmp_path, script):
    (tmp_path / "my_rewards.py").write_text(CUSTOM)
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "my_rewards.crashes", script=script)
    result = run_in_process(script, *args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: reward function 'my_rewards.crashes' raised RuntimeError: no score for ")


# TRL's GRPO guide writes a reward function of one argument: the batch as dicts, a numpy array back.
GUIDE = '''
import numpy as np


def simple_reward(samples):
    return np.array([len(sample["completion"]) / 100 + (sample["ground_truth"] == "2") for sample in samples])
'''


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_a_function_of_the_batch_as_dicts_returning_a_numpy_array_trains(tiny_models, tmp_path, script):
    (tmp_path / "guide.py").write_text(GUIDE)
    result = run_in_process(script, *math_args(tiny_models, tmp_path, "--reward_funcs", "guide.simple_reward",
                                               script=script), cwd=tmp_path)
    assert_ok(result)
    assert all(value >= 0 for _, value in scalars(tmp_path / "run")["train/rewards/guide.simple_reward/mean"])


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
@pytest.mark.parametrize("code, message", [
    ("def f(prompts, completions):\n    return [0.0] * len(completions)\n",
     "reward function 'bad.f' takes f(prompts, completions), which no reward call can fill; write it as def "
     "f(prompts, completions, **kwargs) -> list of floats"),
    ("def f(a, b, c=1):\n    return []\n", "reward function 'bad.f' takes f(a, b, c=1), which no reward call"),
    ("def f(samples)\n    return []\n", "the module of reward function 'bad.f' does not import: SyntaxError (bad.py "
     "line 1): expected ':'; fix it and run again"),
    ("import not_installed_anywhere\n", "the module of reward function 'bad.f' does not import: "
     "ModuleNotFoundError"),
], ids=["no-kwargs", "two-arguments", "syntax-error", "its-import-fails"])
def test_a_reward_function_that_cannot_work_is_refused_in_one_line_before_anything_loads(
        tiny_models, tmp_path, run_cli, monkeypatch, script, code, message):
    import sys

    (tmp_path / "bad.py").write_text(code)
    monkeypatch.delitem(sys.modules, "bad", raising=False)  # each case's own module, imported afresh
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run_cli(script, *math_args(tiny_models, tmp_path, "--reward_funcs", "bad.f", script=script))
    assert message in error_line(result)
    assert not (tmp_path / "run").exists()  # refused before the output folder is taken


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_mismatched_reward_weights_are_refused(tiny_models, tmp_path, run_cli, script):
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "boxed_answer", "--reward_weights", "1", "2",
                     script=script)
    assert "--reward_weights has 2 values for 1" in error_line(run_cli(script, *args))


@pytest.mark.slow
def test_evaluation_reports_format_rate_verifier_accuracy_and_the_gain(tiny_models, tmp_path):
    data = tiny.write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    out = tmp_path / "eval.json"
    result = run_in_process("evaluate_generations.py", "--model_path", tiny_models["policy"], tiny_models["policy"],
                            "--dataset_name", data, "--train_samples", "8", "--num_prompts", "3",
                            "--num_completions", "2",
                            "--max_new_tokens", "6", "--reward_funcs", "boxed_answer", "reward_model",
                            "--reward_model_path", tiny_models["reward_model"], "--output_file", out)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    summary = report["models"][0]["summary"]
    # The tiny random model never writes a \boxed{} answer: no format, no accuracy, no spread.
    assert (summary["format_rate"], summary["verifier_accuracy"], summary["verifier_timeouts"]) == (0.0, 0.0, 0)
    assert (summary["verifier_accuracy_ci_low"], summary["verifier_accuracy_ci_high"]) == (0.0, 0.0)
    completion = report["models"][0]["prompts"][0]["completions"][0]
    assert completion["verdict"] == "missing" and completion["rewards"]["boxed_answer"] == 0.0  # ended or cut off
    assert completion["reward"] == pytest.approx(completion["rewards"]["reward_model"])
    (comparison,) = report["comparison"]  # the same model again: no gain
    assert (comparison["accuracy_delta"], comparison["accuracy_delta_ci_low"],
            comparison["accuracy_delta_ci_high"]) == (0.0, 0.0, 0.0)
    assert "accuracy gain vs baseline" in result.stdout


PPO_CUSTOM = '''
def brevity(prompts, completions, ground_truth, trainer_state=None, **kwargs):
    # what GRPO passes: the prompt conversation, one assistant message per completion, the row's columns
    import re

    assert prompts[0][-1]["role"] == "user" and completions[0][0]["role"] == "assistant"
    for prompt, answer in zip(prompts, ground_truth):  # each completion's own row
        a, b = re.search(r"What is (\\d+) \\+ (\\d+)", prompt[-1]["content"]).groups()
        assert int(a) + int(b) == int(answer), (prompt, answer)
    assert trainer_state is None or trainer_state.global_step >= 0
    return [-len(c[0]["content"]) / 100 for c in completions]
'''


@pytest.mark.slow
def test_ppo_with_the_verifier_and_a_custom_function_and_no_reward_model(tiny_models, tmp_path):
    (tmp_path / "my_rewards.py").write_text(PPO_CUSTOM)
    # No reward model anywhere: the value model starts from the policy, with a new one-output head.
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "boxed_answer", "my_rewards.brevity",
                     "--reward_weights", "1", "0.5", "--reward_model_name_or_path", tmp_path / "no_such_model",
                     "--missing_eos_penalty", "0", "--reward_wrong", "-1", "--reward_no_answer", "-0.5",
                     script="train_ppo.py")
    result = run_in_process("train_ppo.py", *args, cwd=tmp_path)
    assert_ok(result)
    assert "note: --reward_model_name_or_path" in result.stdout and "is not used" in result.stdout
    assert f"value model: the policy {tiny_models['policy']} with a new one-output head" in result.stdout
    logged = scalars(tmp_path / "run")
    # A random tiny model never writes \boxed{...}: every completion that ended gets the "no answer" reward (-0.5),
    # every one cut off the lower of wrong and missing (-1)
    clipped = dict(logged["train/completions/clipped_ratio"])
    answer = dict(logged["train/rewards/boxed_answer/mean"])
    brevity = dict(logged["train/rewards/my_rewards.brevity/mean"])
    for step, score in logged["train/objective/scores"]:  # PPO's score is the weighted sum of the functions
        assert answer[step] == pytest.approx(-0.5 - 0.5 * clipped[step], abs=1e-6)
        assert score == pytest.approx(answer[step] + 0.5 * brevity[step], abs=1e-5)
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    value_model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "value_model")
    policy = AutoModelForCausalLM.from_pretrained(tiny_models["policy"])
    reward_model = AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"])
    assert value_model.score.out_features == 1
    # Two small optimizer steps away from the policy's body (the tiny reward model's body is another random draw).
    start = value_model.model.embed_tokens.weight
    assert torch.allclose(start, policy.model.embed_tokens.weight, atol=1e-3)
    assert not torch.allclose(start, reward_model.model.embed_tokens.weight, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("skip", [True, False])
def test_ppo_takes_no_policy_step_from_rollouts_whose_completions_all_scored_the_same(tiny_models, tmp_path, skip):
    import torch
    from safetensors.torch import load_file

    # A random tiny model never writes \boxed{...}: every completion scores 0, no rollout has a reward signal.
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "boxed_answer", "--missing_eos_penalty", "0",
                     "--skip_rollouts_without_signal", str(skip), script="train_ppo.py")
    result = run_in_process("train_ppo.py", *args)
    assert_ok(result)
    logged = scalars(tmp_path / "run")
    assert {value for _, value in logged["train/objective/scores"]} == {0.0}
    assert {value for _, value in logged["train/objective/advantages_zeroed"]} == {float(skip)}
    assert {value for _, value in logged["train/objective/rollout_without_signal"]} == {1.0}  # either way
    assert result.stdout.count("no reward signal, so its advantages are 0") == int(skip)  # said once
    start = load_file(Path(tiny_models["policy"]) / "model.safetensors")
    trained = load_file(tmp_path / "run" / "model.safetensors")
    unchanged = all(torch.equal(trained[name], start[name]) for name in start)
    assert unchanged == skip


@pytest.mark.slow
def test_ppo_with_a_weighted_mix_of_reward_model_and_function_evaluates_with_both(tiny_models, tmp_path):
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "reward_model", "boxed_format",
                     "--reward_weights", "1.0", "0.5", "--missing_eos_penalty", "0", "--max_samples", "12",
                     "--eval_prompts", "2", "--eval_steps", "2", script="train_ppo.py")
    assert_ok(run_in_process("train_ppo.py", *args))
    logged = scalars(tmp_path / "run")
    model_mean = dict(logged["train/rewards/reward_model/mean"])
    format_mean = dict(logged["train/rewards/boxed_format/mean"])
    for step, score in logged["train/objective/scores"]:
        assert score == pytest.approx(model_mean[step] + 0.5 * format_mean[step], abs=1e-5)
    assert [step for step, _ in logged["eval/win_rate_low"]] == [0, 2]
    record = json.loads((tmp_path / "run" / "heldout_baseline.json").read_text())["record"]
    assert record["reward_funcs"] == ["reward_model", "boxed_format"] and record["reward_weights"] == [1.0, 0.5]


def test_ppo_refuses_boxed_answer_on_data_without_reference_answers(tiny_models, tmp_path, run_cli):
    args = ppo_args(tiny_models, tmp_path / "run", "--reward_funcs", "boxed_answer")
    error = error_line(run_cli("train_ppo.py", *args))
    assert "--reward_funcs boxed_answer needs each row's reference answer" in error
    assert not (tmp_path / "run").exists()


def test_ppo_refuses_unknown_functions(tiny_models, tmp_path, run_cli):
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "boxed_answr", script="train_ppo.py")
    assert "unknown reward function 'boxed_answr'" in error_line(run_cli("train_ppo.py", *args))


def test_ppo_checks_the_reward_models_tokenizer_only_when_the_reward_model_scores(tiny_models, tmp_path, run_cli):
    other = tiny_models["other_reward_model"]
    args = math_args(tiny_models, tmp_path, "--reward_funcs", "boxed_format", "--reward_model_name_or_path",
                     other, "--value_model_path", other, script="train_ppo.py")
    assert error_line(run_cli("train_ppo.py", *args)).startswith("error: value model ")  # it reads the ids
