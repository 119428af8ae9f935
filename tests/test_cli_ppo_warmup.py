"""`train_ppo.py --critic_warmup` and `--value_lam` run end to end as subprocesses on tiny local models: the policy
held still through the warm-up, resumed runs equal to one uninterrupted run, and the refusals."""

import pytest
import torch

from conftest import assert_ok, error_line, ppo_args, run_in_process, run_script, scalars
from test_interruption import final_weights

# A reward function that varies on the tiny policy's random completions (beside the reward model).
CHARACTERS = '''
def characters(prompts, completions, **kwargs):
    return [len(str(completion)) / 100 for completion in completions]
'''


def warmup_args(models, out, *extra):
    """Rollouts of 2 prompts, a checkpoint after each, the first 2 the critic's warm-up; the value model regresses on
    the rewards to come (--value_lam 1.0) while the policy's advantages keep --lam 0.95."""
    return ppo_args(models, out, "--critic_warmup", "2", "--value_lam", "1.0", "--save_steps", "1",
                    "--save_total_limit", "10", "--learning_rate", "1e-3", *extra)


def policy_weights(folder):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


@pytest.mark.slow
def test_a_critic_warmup_holds_the_policy_and_a_run_resumed_in_it_or_after_it_trains_what_one_run_trains(
        tiny_models, tmp_path):
    whole = tmp_path / "whole"
    result = run_in_process("train_ppo.py", *warmup_args(tiny_models, whole, "--max_steps", "4"))
    assert_ok(result)
    assert ("note: --critic_warmup 2: the first 2 of the run's 4 rollouts train the value model alone, at "
            "--learning_rate; the policy trains in the other 2") in result.stdout
    logged = scalars(whole)
    assert [value for _, value in logged["train/objective/critic_warmup"]] == [1.0, 1.0, 0.0, 0.0]
    start = policy_weights(tiny_models["policy"])
    for step, held in ((1, True), (2, True), (3, False)):
        weights = policy_weights(whole / f"checkpoint-{step}")
        assert all(torch.equal(start[name], tensor) for name, tensor in weights.items()) == held, step
    values = [policy_weights(whole / f"checkpoint-{step}" / "value_model") for step in (1, 2)]
    assert any(not torch.equal(values[0][name], values[1][name]) for name in values[0])  # it learns
    for checkpoint in (1, 3):  # inside the warm-up, and after it
        resumed = tmp_path / f"resumed-{checkpoint}"
        assert_ok(run_in_process("train_ppo.py", *warmup_args(tiny_models, resumed, "--max_steps", "4"),
                                 "--resume_from_checkpoint", whole / f"checkpoint-{checkpoint}"))
        expected, weights = final_weights(whole), final_weights(resumed)
        assert weights.keys() == expected.keys()
        differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
        assert not differ, f"from checkpoint-{checkpoint}: {len(differ)} of {len(expected)} tensors differ"


@pytest.mark.slow
def test_a_critic_warmup_with_lora_and_reward_functions_on_two_processes_resumes_inside_it(tiny_models, tmp_path):
    from safetensors.torch import load_file

    functions = tmp_path / "characters.py"
    functions.write_text(CHARACTERS)

    def args(out, *extra):  # 3 rollouts of 4 prompts (2 per process), the first 2 the warm-up
        return warmup_args(tiny_models, out, "--max_steps", "3", "--use_lora", "--reward_funcs", "reward_model",
                           f"{functions}:characters", *extra)

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert_ok(run_script("train_ppo.py", *args(whole), processes=2))
    logged = scalars(whole)
    assert [value for _, value in logged["train/objective/critic_warmup"]] == [1.0, 1.0, 0.0]
    adapters = [load_file(whole / f"checkpoint-{step}" / "adapter_model.safetensors") for step in (1, 2, 3)]
    assert all(torch.equal(adapters[0][name], adapters[1][name]) for name in adapters[0])  # held in the warm-up
    assert any(not torch.equal(adapters[1][name], adapters[2][name]) for name in adapters[0])  # then trained
    assert_ok(run_script("train_ppo.py", *args(resumed, "--resume_from_checkpoint", whole / "checkpoint-1"),
                         processes=2))
    expected, weights = final_weights(whole), final_weights(resumed)
    differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


@pytest.mark.parametrize("flags, expected", [
    (["--critic_warmup", "4"], "--critic_warmup 4 leaves the policy no rollout of the run's 4 to train on"),
    (["--critic_warmup", "-1"], "--critic_warmup must be >= 0 rollouts (0: none), got -1"),
    (["--value_lam", "1.5"], "--value_lam must be between 0 and 1, got 1.5"),
])
def test_a_critic_warmup_or_value_lambda_out_of_range_is_refused_in_one_line_before_any_model_loads(
        tiny_models, tmp_path, run_cli, flags, expected):
    out = tmp_path / "out"
    error = error_line(run_cli("train_ppo.py", *ppo_args(tiny_models, out, "--max_steps", "4", *flags)))
    assert expected in error
    assert not (out / "value_model").exists() and not list(out.glob("checkpoint-*"))
