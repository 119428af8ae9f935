"""`rlhf.ppo` as units: the adaptive KL maths, completion lengths, the tokenizer check.

The trainer itself (logging, checkpoints, resume) runs end to end in test_cli_ppo.py; what it assumes about TRL
is checked by behaviour in test_trl_compat.py (the fixes of TRL bugs in rlhf/trl_compat/ppo_fixes.py too).
"""

import pytest


def test_adaptive_kl_moves_toward_the_target():
    from rlhf.ppo import adaptive_kl_coef

    assert adaptive_kl_coef(0.1, kl=12.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 1.02)
    assert adaptive_kl_coef(0.1, kl=3.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 0.98)
    assert adaptive_kl_coef(0.1, kl=6.6, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 1.01)
    assert adaptive_kl_coef(0.1, kl=6.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1)


def test_completion_lengths_count_up_to_and_including_the_first_stop_token():
    import torch

    from rlhf.ppo import completion_lengths

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
