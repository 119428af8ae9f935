"""The batch arithmetic (rlhf.batches), on values worked out by hand; how the configs use it: tests/test_config.py."""

import pytest

from rlhf.batches import (
    CPU_ROLLOUT_CHUNK,
    GPU_PROMPTS_PER_GENERATION,
    generation_prompts,
    grpo_batch,
    grpo_step_prompts,
    ppo_episodes,
    ppo_rollout,
    ppo_update_prompts,
    rollout_chunk,
)


def test_a_gpu_generates_the_smallest_whole_multiple_of_a_step_that_reaches_64_prompts():
    assert GPU_PROMPTS_PER_GENERATION == 64
    assert [generation_prompts(step, on_gpu=False) for step in (0, 4, 48)] == [0, 4, 48]  # a CPU: one step's
    # 48 -> 96, not 64: 64 prompts are not a whole number of steps of 48 (max(64, 48) was refused on a GPU)
    assert [generation_prompts(step, on_gpu=True) for step in (0, 1, 4, 48, 64, 100)] == [0, 64, 64, 96, 64, 100]


def test_grpo_counts_prompts_per_step_from_its_flag_a_hand_written_batch_size_or_trls_flags():
    assert grpo_step_prompts(None, None, None, None, None, processes=1) == 4  # the default
    assert grpo_step_prompts(8, None, None, None, None, processes=2) == 8  # given: over all processes
    assert grpo_step_prompts(None, None, 4, None, None, processes=1) == 0  # TRL's flags, used as they are
    assert grpo_step_prompts(None, None, None, 64, None, processes=1) == 0
    assert grpo_step_prompts(None, None, None, None, 2, processes=1) == 0
    # --batch_size 2 per pass and device, 3 passes, 2 processes
    assert grpo_step_prompts(None, 2, 3, None, None, processes=2) == 12


def test_grpo_translates_prompts_into_trls_completion_counted_batch():
    # 4 prompts x 4 completions per step, 16 per pass: one pass, one step per generation
    assert grpo_batch(4, 4, 16, 1, None, 4) == {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1,
                                                "generation_batch_size": 16}
    # on 2 processes each takes half a step; 64 prompts generated at once serve 16 steps
    assert grpo_batch(4, 4, 16, 2, None, 64) == {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
                                                 "generation_batch_size": 256}
    # 8 prompts x 4 = 32 completions in passes of 4: 8 passes accumulated
    assert grpo_batch(8, 4, 4, 1, 1, 8)["gradient_accumulation_steps"] == 8
    with pytest.raises(ValueError, match="12 completions per optimizer step is not a multiple of .* = 8"):
        grpo_batch(3, 4, 8, 1, None, 3)
    with pytest.raises(ValueError, match="--gradient_accumulation_steps 3 conflicts with --prompts_per_step 8 "
                                         r"\(which needs 8\)"):
        grpo_batch(8, 4, 4, 1, 3, 8)
    with pytest.raises(ValueError, match="--prompts_per_generation 6 is not a multiple of --prompts_per_step 4"):
        grpo_batch(4, 4, 16, 1, None, 6)


def test_ppo_rollouts_are_whole_mini_batches_of_one_optimizer_steps_prompts():
    update = ppo_update_prompts(4, 2, 2)  # 4 prompts a pass, 2 passes, 2 processes
    assert update == 16
    assert ppo_rollout(None, None, update) == (16, 1)  # the default: one mini-batch
    assert ppo_rollout(None, 3, update) == (48, 3)  # TRL's --num_mini_batches
    assert ppo_rollout(64, None, update) == (64, 4)
    assert ppo_rollout(64, 4, update) == (64, 4)
    with pytest.raises(ValueError, match="--prompts_per_rollout 24 is not a multiple of the 16 prompts"):
        ppo_rollout(24, None, update)
    with pytest.raises(ValueError, match="--num_mini_batches 3 conflicts with --prompts_per_rollout 64"):
        ppo_rollout(64, 3, update)


def test_ppo_trains_whole_rollouts_max_steps_of_them_where_given():
    assert ppo_episodes(None, 3, 4) == 12  # --max_steps counts rollouts
    assert ppo_episodes(12, 3, 4) == 12  # both given, and they agree
    with pytest.raises(ValueError, match=r"--max_steps 3 \(3 rollouts of 4 prompts = 12 episodes\) and "
                                         "--total_episodes 8 both set how long PPO trains; give one"):
        ppo_episodes(8, 3, 4)
    assert [ppo_episodes(episodes, -1, 4) for episodes in (1, 2, 4, 5, 8)] == [4, 4, 4, 8, 8]  # up to whole rollouts
    assert ppo_episodes(None, -1, 4) is None  # --num_train_epochs decides, once the prompts are counted


def test_a_gpu_generates_a_whole_rollout_at_once_where_its_memory_budget_holds_it():
    vocabulary, prompt, completion = 49_152, 512, 256
    logits = vocabulary * 4  # float32 bytes per position
    generated = 2 * 64 * completion * logits  # every completion's generation logits, twice while padded: 6.4 GB
    per_sequence = (prompt + completion) * logits  # one sequence's reference logits
    assert CPU_ROLLOUT_CHUNK == 16
    assert rollout_chunk(64, None, vocabulary, prompt, completion) == 16  # a CPU
    assert rollout_chunk(4, None, vocabulary, prompt, completion) == 4
    assert rollout_chunk(64, 80e9 / 4, vocabulary, prompt, completion) == 64  # an H100's quarter: 20 GB
    # room for 40 sequences' reference logits besides the generation's: the largest divisor of 64 below, 32
    assert rollout_chunk(64, generated + 40 * per_sequence, vocabulary, prompt, completion) == 32
    assert rollout_chunk(64, generated + 5 * per_sequence, vocabulary, prompt, completion) == 4
    assert rollout_chunk(64, generated / 2, vocabulary, prompt, completion) == 1  # not even the generation: 1
    assert rollout_chunk(48, generated + 30 * per_sequence, vocabulary, prompt, completion) == 24
