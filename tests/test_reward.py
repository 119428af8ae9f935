import pytest

from rlhf import tiny
from rlhf.cli import UserError
from rlhf.reward import load_reward_model, pairwise_accuracy, score_conversations


def test_pairwise_accuracy_counts_strict_wins():
    assert pairwise_accuracy([1.0, 2.0, 3.0, 0.5], [0.0, 2.5, 1.0, 0.5]) == 0.5  # the tie counts as wrong
    with pytest.raises(ValueError):
        pairwise_accuracy([], [])
    with pytest.raises(ValueError):
        pairwise_accuracy([1.0], [1.0, 2.0])


def test_scores_do_not_depend_on_padding_or_batch(tmp_path):
    tokenizer = tiny.build_tokenizer()
    path = tiny.build_reward_model(tmp_path / "rm", tokenizer)
    model, reward_tokenizer = load_reward_model(str(path))
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    conversations = [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there, good day."}],
        [{"role": "user", "content": "A much longer question about the river and the city"},
         {"role": "assistant", "content": "Yes."}],
    ]
    together = score_conversations(model, reward_tokenizer, conversations, batch_size=2)
    alone = [score_conversations(model, reward_tokenizer, [c])[0] for c in conversations]
    assert together == pytest.approx(alone, abs=1e-5)


def test_a_causal_lm_is_not_accepted_as_reward_model(tmp_path):
    path = tiny.build_policy(tmp_path / "policy", tiny.build_tokenizer())
    with pytest.raises(UserError, match="num_labels=1"):
        load_reward_model(str(path))
