"""PPO's pure functions as units (the adaptive KL maths, completion lengths in `rlhf.ppo_trainer`), the tokenizer
check and `PPORewards` (`rlhf.ppo`).

The trainer in memory on tiny models: test_ppo_trainer.py; end to end (logging, checkpoints, resume): test_cli_ppo.py.
"""

import pytest


def test_adaptive_kl_moves_toward_the_target():
    from rlhf.kl_control import adaptive_kl_coef

    assert adaptive_kl_coef(0.1, kl=12.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 1.02)
    assert adaptive_kl_coef(0.1, kl=3.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 0.98)
    assert adaptive_kl_coef(0.1, kl=6.6, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 1.01)
    assert adaptive_kl_coef(0.1, kl=6.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1)


@pytest.mark.parametrize("kl", [0.0, 1e-9, 3.0, 6.0, 60.0, 1e9])
@pytest.mark.parametrize("n_steps, horizon", [(1, 10_000), (16, 1), (6, 1), (640, 100), (10**9, 1)])
def test_adaptive_kl_stays_positive_and_moves_by_a_bounded_factor(kl, n_steps, horizon):
    """Whatever the horizon and batch, one update multiplies the coefficient by a factor in [0.8, 1.2]: uncapped,
    `adaptive_kl_coef(0.05, 0, 6, 16, 1)` was -0.11 (the sign flipped, rewarding distance from the reference)."""
    from rlhf.kl_control import adaptive_kl_coef

    coef = 0.05
    for _ in range(50):  # many updates in a row: still positive, never below 0.8 ** 50 of where it began
        new = adaptive_kl_coef(coef, kl=kl, target=6.0, n_steps=n_steps, horizon=horizon)
        assert 0.8 * coef - 1e-15 <= new <= 1.2 * coef + 1e-15 and new > 0
        coef = new
    assert adaptive_kl_coef(0.05, 0, 6, 16, 1) == pytest.approx(0.04)  # the case: the floor, not -0.11
    assert adaptive_kl_coef(0.05, 100, 6, 16, 1) == pytest.approx(0.06)


def test_completion_lengths_count_up_to_and_including_the_first_stop_token():
    import torch

    from rlhf.ppo_trainer import completion_lengths

    eos = 2
    completions = torch.tensor([[5, 6, eos, eos, eos],  # ended at its 3rd token; the rest is padding
                                [eos, eos, eos, eos, eos],  # ended at once
                                [5, 6, 7, 8, 9]])  # cut at the maximum length
    lengths, clipped = completion_lengths(completions, eos)
    assert lengths.tolist() == [3, 1, 5] and clipped.tolist() == [False, False, True]
    lengths, clipped = completion_lengths(completions, None)  # no stop token: every completion runs to the end
    assert lengths.tolist() == [5, 5, 5] and clipped.all()


def test_a_reward_model_with_another_tokenizer_is_refused_naming_both_and_the_way_out(tiny_models):
    from transformers import AutoTokenizer

    from rlhf.errors import UserError
    from rlhf.ppo import check_same_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    check_same_tokenizer(tokenizer, tiny_models["reward_model"], "reward model", "--reward_model_path")  # same one
    other = tiny_models["other_reward_model"]
    with pytest.raises(UserError) as error:
        check_same_tokenizer(tokenizer, other, "reward model", "--reward_model_path")
    message = str(error.value)
    assert f"reward model {other} uses another tokenizer" in message
    assert "--reward_model_path" in message and "train_grpo.py" in message


def test_ppo_rewards_score_each_completion_with_its_own_row_and_log_each_function(tmp_path, monkeypatch):
    """`PPORewards` finds each sequence's dataset row from its left-padded prompt ids, decodes the completion as GRPO
    does, and returns the weighted sum of the functions."""
    import torch
    from datasets import Dataset
    from transformers import TrainerState

    from rlhf import tiny
    from rlhf.data import build_prompt_dataset, tokenize_prompts
    from rlhf.ppo import PPORewards
    from rlhf.reward import ensure_distinct_pad
    from rlhf.reward_funcs import load_reward_funcs

    tokenizer = ensure_distinct_pad(tiny.build_tokenizer())
    rows = Dataset.from_list([{"question": "What is 1 + 1?", "ground_truth": "2"},
                              {"question": "What is 10 + 20?", "ground_truth": "30"}])
    prompts, _, _ = build_prompt_dataset(rows, tokenizer, 512)
    token_ids = tokenize_prompts(prompts, tokenizer)["input_ids"]
    (tmp_path / "echo_rewards.py").write_text(
        "seen = {}\n\n\n"
        "def echo(prompts, completions, ground_truth, trainer_state, **kwargs):\n"
        "    seen.update(prompts=prompts, completions=completions, step=trainer_state.global_step)\n"
        "    return [float(answer) for answer in ground_truth]\n")
    monkeypatch.syspath_prepend(tmp_path)
    names = ["boxed_answer", "echo_rewards.echo"]
    rewards = PPORewards(names, load_reward_funcs(names), [1.0, 0.5], tokenizer, prompts, token_ids)
    rewards.trainer_state = lambda: TrainerState(global_step=3)

    pad = tokenizer.pad_token_id
    answers = [r"1 + 1 = 2. \boxed{2}", r"10 + 20 = 31. \boxed{31}"]
    completions = [tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                   for text in answers]
    # The batch in reverse dataset order, prompts padded on the left, completions on the right (as TRL's rollout).
    prompt_length = max(map(len, token_ids))
    completion_length = max(map(len, completions)) + 2
    batch = torch.tensor([[pad] * (prompt_length - len(token_ids[i])) + token_ids[i] + completions[i]
                          + [pad] * (completion_length - len(completions[i])) for i in (1, 0)])
    scores = rewards.score_completions(batch, prompt_length)

    # Row 1: wrong (-1) + 0.5 x 30; row 0: right (+1) + 0.5 x 2.
    assert scores.tolist() == pytest.approx([-1 + 15.0, 1 + 1.0])
    from echo_rewards import seen

    assert [c[0]["content"] for c in seen["completions"]] == answers[::-1]  # EOS and padding dropped
    assert [p[-1]["content"] for p in seen["prompts"]] == ["What is 10 + 20?", "What is 1 + 1?"]
    assert seen["step"] == 3
    metrics = rewards.recorded_metrics(lambda values: values)
    assert metrics["rewards/boxed_answer/mean"] == pytest.approx(0.0)
    assert metrics["rewards/echo_rewards.echo/mean"] == pytest.approx(16.0)
    assert rewards.recorded_metrics(lambda values: values) == {}  # each log reports the scores since the last
