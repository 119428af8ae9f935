"""Dynamic sampling's pure pieces (`rlhf/trl_compat/dynamic_sampling.py`): which groups' rewards differ, which groups a
generation trains on, the extra prompts drawn, and the rows of several rounds put together as TRL pads them. The
runs themselves are in tests/test_cli_grpo_dynamic_sampling.py."""

import math

import pytest
import torch

from rlhf.trl_compat.dynamic_sampling import choose_groups, data_order, groups_with_spread, take_rows, task_columns

NAN = math.nan


def spread(rewards, num_generations, weights=None, tolerance=1e-6, per_function=False):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    if rewards.ndim == 1:
        rewards = rewards.unsqueeze(1)
    weights = torch.ones(rewards.shape[1]) if weights is None else torch.tensor(weights, dtype=torch.float32)
    return groups_with_spread(rewards, weights, num_generations, tolerance, per_function).tolist()


def test_a_rule_rewards_group_differs_when_one_completion_earns_otherwise():
    # Groups of 2: both right, both wrong, one of each; groups of 4 (DAPO's "accuracy 0 or 1" filter).
    assert spread([1, 1, 0, 0, 1, 0], 2) == [False, False, True]
    assert spread([1, 1, 1, 1, 0, 0, 0, 1], 4) == [False, True]
    assert spread([-0.5, -0.5, -1.0, -0.5], 2) == [False, True]  # a missing answer vs a wrong one (math recipe)


def test_the_missing_eos_penalty_is_not_the_tasks_outcome():
    # GRPO adds the penalty after --reward_funcs: a group that differs only in it is a group of one reward
    assert task_columns(["boxed_answer", "boxed_format", "missing_eos_penalty"]) == [0, 1]
    assert task_columns(["reward_model"]) == [0]
    rewards = [[1.0, -1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]  # (task, penalty) for two groups of 2
    columns = task_columns(["boxed_answer", "missing_eos_penalty"])
    assert spread([[row[i] for i in columns] for row in rewards], 2) == [False, True]
    assert spread(rewards, 2) == [True, True]  # the shaped total would keep both


def test_float_noise_is_not_a_difference_but_a_reward_model_scores_small_gap_is():
    # A std compared to exactly 0 keeps these (NeMo-RL#4158, OpenRLHF#1270): one float32 step apart at 1.0, and a
    # weighted sum that rounds differently from the same total.
    assert torch.tensor([1.0, 1.0 + 1.2e-7]).std() > 0
    assert spread([1.0, 1.0 + 1.2e-7], 2) == [False]
    summed = [[0.4, 0.3], [0.7, 0.0]]  # 0.4 + 0.3 and 0.7 are two float32 values
    assert torch.tensor(summed).sum(dim=1).std() > 0
    assert spread(summed, 2) == [False]
    # Reward-model scores: the tolerance scales with the score (5.0 +- 4e-6 is float noise), a real gap counts.
    assert spread([5.0, 5.0 + 4e-6, -3.0, -3.01], 2) == [False, True]
    # Tolerance 0: exact equality of the values decides.
    assert spread([1.0, 1.0 + 1.2e-7, 2.0, 2.0], 2, tolerance=0.0) == [True, False]


def test_the_weighted_total_decides_as_the_advantage_is_built_from_it():
    # Two functions: an answer right in both completions, a format term that differs. Paid at weight 0 (logged only),
    # the total is one reward; paid, the total differs (and so does the advantage).
    rewards = [[1.0, 0.0], [1.0, 0.5]]
    assert spread(rewards, 2, weights=[1.0, 0.0]) == [False]
    assert spread(rewards, 2, weights=[1.0, 1.0]) == [True]
    # Functions that cancel in the total: one reward under TRL's sum_then_normalize, but normalize_then_sum normalises
    # each function within the group, so its advantage is not 0.
    cancelling = [[1.0, 0.0], [0.0, 1.0]]
    assert spread(cancelling, 2) == [False]
    assert spread(cancelling, 2, per_function=True) == [True]


def test_unscored_completions_are_left_out_and_two_scored_ones_are_needed():
    assert spread([NAN, 1.0, NAN, NAN, NAN, 0.0, 1.0, 0.0], 2) == [False, False, False, True]
    assert spread([NAN, 1.0, 0.0], 3) == [True]
    # One function unscored (None -> NaN), the other scored: the total is the scored one's (TRL's nansum).
    assert spread([[NAN, 1.0], [NAN, 0.0]], 2) == [True]


def test_a_generation_trains_on_the_first_groups_that_differ_then_fills_with_groups_of_one_reward():
    assert choose_groups([[False, True], [True, True]], 2) == [(0, 1), (1, 0)]
    assert choose_groups([[True, True]], 2) == [(0, 0), (0, 1)]
    # The cap reached with one group that differs: the first groups of one reward fill the rest.
    assert choose_groups([[False, False], [False, True]], 3) == [(1, 1), (0, 0), (0, 1)]


def test_the_data_order_is_trls_sampler_order_pass_after_pass():
    # TRL's RepeatSampler over 10 prompts, 4 per generation: 2 whole batches a pass (the 2 left over are dropped),
    # each pass a permutation of its own generator. Every round of dynamic sampling takes the next batch of it.
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(list(range(10)), mini_repeat_count=2, batch_size=4, repeat_count=3, seed=5)
    passes = [list(sampler) for _ in range(3)]  # each batch: 4 prompts x 2 completions, repeated 3 times
    trl = [index for order in passes for batch in (order[:24], order[24:]) for index in batch[:8:2]]
    rounds = [data_order(5, taken, 10, 4, 4) for taken in range(0, 24, 4)]
    assert [index for round_ in rounds for index in round_] == trl
    for pass_ in (rounds[:2], rounds[2:4], rounds[4:]):
        prompts = [index for round_ in pass_ for index in round_]
        assert len(set(prompts)) == 8  # no prompt twice within a pass
    assert rounds[:2] != rounds[2:4]  # each pass in its own order
    assert data_order(5, 4, 10, 4, 8) == rounds[1] + rounds[2]  # a resumed run takes up where it stopped
    assert data_order(5, 0, 10, 4, 8, shuffle=False) == list(range(8))  # --shuffle_dataset false


def test_rows_of_several_rounds_are_padded_as_trl_pads_them():
    pad = 9
    first = {"prompt_ids": torch.tensor([[1, 2], [3, 4]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
             "completion_ids": torch.tensor([[5], [6]]), "completion_mask": torch.ones(2, 1, dtype=torch.long),
             "advantages": torch.tensor([0.5, -0.5]), "old_per_token_logps": None,
             "ref_per_token_logps": torch.tensor([[-1.0], [-2.0]]), "num_items_in_batch": torch.tensor(2)}
    second = {"prompt_ids": torch.tensor([[7, 7, 7]]), "prompt_mask": torch.ones(1, 3, dtype=torch.long),
              "completion_ids": torch.tensor([[8, 8, 8]]), "completion_mask": torch.tensor([[1, 1, 0]]),
              "advantages": torch.tensor([1.0]), "old_per_token_logps": None,
              "ref_per_token_logps": torch.tensor([[-3.0, -3.0, 0.0]]), "num_items_in_batch": torch.tensor(2)}
    batch = take_rows({"a": first, "b": second}, [("b", 0), ("a", 1)], pad, "cpu")
    assert batch["prompt_ids"].tolist() == [[7, 7, 7], [pad, 3, 4]]  # prompts padded on the left
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 1, 1]]
    assert batch["completion_ids"].tolist() == [[8, 8, 8], [6, pad, pad]]  # completions on the right
    assert batch["completion_mask"].tolist() == [[1, 1, 0], [1, 0, 0]]
    assert batch["ref_per_token_logps"].tolist() == [[-3.0, -3.0, 0.0], [-2.0, 0.0, 0.0]]
    assert batch["advantages"].tolist() == [1.0, -0.5]
    assert batch["old_per_token_logps"] is None and "num_items_in_batch" not in batch  # the caller counts it
    with pytest.raises(NotImplementedError, match="pixel_values"):
        take_rows({"a": {**first, "pixel_values": torch.zeros(2, 3)}}, [("a", 0)], pad, "cpu")
