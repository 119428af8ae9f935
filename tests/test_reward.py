import pytest

from rlhf import tiny
from rlhf.cli import UserError
from rlhf.rewards.reward_model import load_reward_model, pairwise_accuracy, score_conversations


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


def test_reward_is_read_at_the_final_end_of_turn_token(tmp_path):
    import torch

    from rlhf.rewards.reward_model import ensure_distinct_pad, render_for_reward

    tokenizer = tiny.build_tokenizer()
    assert tokenizer.pad_token_id == tokenizer.eos_token_id  # like SmolLM2
    ensure_distinct_pad(tokenizer)
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id != tokenizer.eos_token_id

    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]
    text = render_for_reward(tokenizer, conversation)
    assert text.endswith("Hello there.<|im_end|>")

    model, reward_tokenizer = load_reward_model(str(tiny.build_reward_model(tmp_path / "rm", tiny.build_tokenizer())))
    assert model.config.pad_token_id == reward_tokenizer.pad_token_id != reward_tokenizer.eos_token_id
    ids = reward_tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert ids[0, -1].item() == reward_tokenizer.eos_token_id
    with torch.inference_mode():
        per_token = model.score(model.model(input_ids=ids).last_hidden_state)[0, :, 0]
    score = score_conversations(model, reward_tokenizer, [conversation])[0]
    assert score == pytest.approx(per_token[-1].item(), abs=1e-5)


@pytest.mark.parametrize("pairs, asked, held, note", [
    (400, 50, 50, None),  # a quarter of the set or less: what was asked
    (32, 8, 8, None),
    (52, 50, 5, "a tenth of the 52 pairs"),  # not 50 of 52: a tenth, so that training keeps 47
    (20, 50, 4, "a tenth of the 20 pairs"),  # a tenth is 2: at least 4
    (8, 50, 4, "a tenth of the 8 pairs"),  # 4 held out, 4 to train on
    (7, 50, 0, "only 7 pairs"),  # 4 held out would leave 3 to train on: no accuracy
    (100, 0, 0, "--eval_samples 0"),
])
def test_held_out_pairs_on_small_sets(pairs, asked, held, note):
    from rlhf.rewards.reward_model import held_out_size

    size, why = held_out_size(pairs, asked)
    assert size == held
    assert (why is None) if note is None else (note in why)


def test_pairs_longer_than_max_length_are_dropped_and_counted_and_a_huge_one_is_never_tokenized(tiny_models, capsys):
    """A 50 MB preference row cost the reward model 3 minutes and 11 GB of tokenizing before TRL's length filter
    dropped it without a count."""
    import json

    from datasets import Dataset
    from transformers import AutoTokenizer

    from conftest import texts_tokenized
    from rlhf.data import build_preference_dataset, longest_token
    from rlhf.rewards.reward_model import tokenize_pairs

    rows = [json.loads(line) for line in open(tiny_models["prompts"], encoding="utf-8")][:6]
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    huge = "word " * (150 * longest_token(tokenizer))  # more characters than 150 tokens could spell
    rows[1]["chosen"], rows[2]["rejected"] = huge, "word " * 300  # over 150 tokens, under the characters' bound
    pairs, _ = build_preference_dataset(Dataset.from_list(rows))
    with texts_tokenized(tokenizer) as tokenized:
        kept = tokenize_pairs(pairs, tokenizer, max_length=150)
    assert len(kept) == 4 and max(map(len, [*kept["chosen_ids"], *kept["rejected_ids"]])) <= 150
    assert tokenized and max(tokenized) < len(huge)  # the huge answer never reached the tokenizer
    assert capsys.readouterr().out.splitlines()[-1] == (
        "4 training pairs kept, 2 dropped as longer than --max_length 150 tokens.")
