"""The batch arithmetic (rlhf.batches), on values worked out by hand; how the parser uses it: tests/test_config.py."""

from types import SimpleNamespace

import pytest

from rlhf.batches import (
    CPU_ROLLOUT_CHUNK,
    GPU_PROMPTS_PER_GENERATION,
    GROUP_WHY,
    generation_prompts,
    grpo_batch,
    grpo_flags,
    grpo_step_prompts,
    ppo_episodes,
    ppo_flags,
    ppo_rollout,
    ppo_sizes,
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


def grpo_values(**given):
    """GRPO's batch flags as the parser has them before settling: the defaults, `given` on top."""
    return SimpleNamespace(**{"prompts_per_step": None, "batch_size": None, "prompts_per_generation": None,
                              "num_generations": 4, "per_device_train_batch_size": 16,
                              "gradient_accumulation_steps": None, "generation_batch_size": None,
                              "steps_per_generation": None, **given})


def test_grpo_flags_translate_the_default_step_into_trls_batch():
    # 4 prompts x 4 completions = 16 a step: one pass of 16 on one process, 8 each on two
    changes, notes = grpo_flags(grpo_values(), processes=1)
    assert {name: value for name, value, _ in changes} == {
        "prompts_per_step": 4, "prompts_per_generation": 4, "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 1, "generation_batch_size": 16}
    assert notes == []
    changes, _ = grpo_flags(grpo_values(prompts_per_generation=64), processes=2)
    assert {name: value for name, value, _ in changes}["per_device_train_batch_size"] == 8
    assert ("generation_batch_size", 256, "derived from --prompts_per_generation x --num_generations; pass "
            "--prompts_per_step 0 to set it") in changes
    assert ("per_device_train_batch_size", 8, "one optimizer step's share per process") in changes


def test_grpo_flags_take_a_hand_written_batch_size_and_say_what_it_became():
    # 2 prompts per pass and device x 3 passes x 2 processes = 12 prompts a step, 2 x 4 = 8 completions per pass
    changes, notes = grpo_flags(grpo_values(batch_size=2, gradient_accumulation_steps=3), processes=2)
    values = {name: value for name, value, _ in changes}
    assert (values["batch_size"], values["prompts_per_step"], values["per_device_train_batch_size"]) == (None, 12, 8)
    assert (values["gradient_accumulation_steps"], values["generation_batch_size"]) == (3, 48)
    assert notes == ["note: --batch_size 2 -> --prompts_per_step 12 --per_device_train_batch_size 8 (2 prompts x 4 "
                     "completions per pass on each of 2 processes, 3 passes per optimizer step; this package counts "
                     "prompts per optimizer step)"]
    with pytest.raises(ValueError, match="--batch_size 2 and --prompts_per_step 8 both set the prompts of a step"):
        grpo_flags(grpo_values(batch_size=2, prompts_per_step=8), processes=1)


def test_grpo_flags_leave_trls_batch_flags_as_they_are_and_say_they_count_completions():
    changes, notes = grpo_flags(grpo_values(per_device_train_batch_size=4, gradient_accumulation_steps=2), 1)
    assert changes == [("prompts_per_step", 0, None)]  # nothing else: TRL's GRPOConfig derives the rest
    assert notes == ["note: --gradient_accumulation_steps 2 sets TRL's batch, counted in completions: "
                     "--per_device_train_batch_size 4 x 2 = 8 completions per optimizer step, 2 prompts x 4 "
                     "completions (--prompts_per_step N counts prompts instead)"]
    assert grpo_flags(grpo_values(steps_per_generation=3), processes=1) == ([("prompts_per_step", 0, None)], [])
    assert grpo_flags(grpo_values(prompts_per_step=0), processes=1) == ([], [])


@pytest.mark.parametrize("given, message", [
    ({"per_device_train_batch_size": 0}, "--per_device_train_batch_size must be >= 1, got 0."),
    ({"num_generations": 1}, "--num_generations must be >= 2, got 1: " + GROUP_WHY),
    ({"prompts_per_step": -1}, "--prompts_per_step must be >= 0, got -1."),
    ({"batch_size": 0}, "--batch_size must be >= 1, got 0."),
    ({"prompts_per_generation": 0}, "--prompts_per_generation must be >= 1, got 0."),
    ({"gradient_accumulation_steps": 0, "prompts_per_step": 4}, "--gradient_accumulation_steps must be >= 1, got 0."),
])
def test_grpo_flags_refuse_counts_below_their_minimum_before_any_arithmetic(given, message):
    with pytest.raises(ValueError) as error:
        grpo_flags(grpo_values(**given), processes=1)
    assert str(error.value) == message


def test_ppo_flags_cut_a_rollout_into_mini_batches_of_one_optimizer_steps_prompts():
    def ppo(processes=1, **given):
        values = SimpleNamespace(**{"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
                                    "prompts_per_rollout": None, "num_mini_batches": None, "total_episodes": None,
                                    "max_steps": -1, **given})
        return ppo_flags(values, processes)

    assert ppo() == ([("prompts_per_rollout", 4, None), ("num_mini_batches", 1, "derived from --prompts_per_rollout")],
                     [])
    # 64 prompts, 4 a pass x 2 passes x 2 processes = 16 per optimizer step: 4 mini-batches
    assert ppo(processes=2, gradient_accumulation_steps=2, prompts_per_rollout=64)[0][1][1] == 4
    assert ppo(num_mini_batches=3)[0][0] == ("prompts_per_rollout", 12, None)  # TRL's flag: 3 mini-batches of 4
    # PPO's steps are rollouts: --max_steps 3 is 3 rollouts of 4 prompts; --total_episodes 2 is raised to one rollout
    assert ppo(max_steps=3)[0][2][:2] == ("total_episodes", 12)
    assert ppo(total_episodes=2)[0][2] == ("total_episodes", 4, "whole rollouts: 1 rollout of --prompts_per_rollout 4")
    for name in ("num_mini_batches", "prompts_per_rollout", "per_device_train_batch_size"):
        with pytest.raises(ValueError, match=f"--{name} must be >= 1, got 0"):
            ppo(**{name: 0})


def test_grpo_flags_refuse_prompts_and_trls_completion_counts_setting_one_generation():
    # TRL's batch flags used as they are: --prompts_per_generation would be dropped without a word
    with pytest.raises(ValueError, match="--prompts_per_generation 4 counts prompts of --prompts_per_step, but TRL's"):
        grpo_flags(grpo_values(generation_batch_size=16, prompts_per_generation=4), processes=1)
    with pytest.raises(ValueError, match="give --prompts_per_step N with it"):
        grpo_flags(grpo_values(prompts_per_step=0, prompts_per_generation=8), processes=1)
    # this package's step with TRL's passes per generation: TRL would refuse both, naming a flag never given
    with pytest.raises(ValueError, match="--steps_per_generation 4 is TRL's, and this package's --prompts_per_step 2 "
                                         "sets the batch here: give --prompts_per_generation"):
        grpo_flags(grpo_values(prompts_per_step=2, steps_per_generation=4, prompts_per_generation=4), processes=1)
    with pytest.raises(ValueError, match="this package's --batch_size 2 sets"):
        grpo_flags(grpo_values(batch_size=2, steps_per_generation=2), processes=1)


def ppo_config(**given):
    return SimpleNamespace(**{"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
                              "num_mini_batches": 3, "total_episodes": None, "num_train_epochs": 1.5,
                              "max_steps": -1, **given})


def test_ppo_sizes_are_a_rollouts_prompts_cut_into_mini_batches_and_the_runs_length_in_rollouts():
    """What PPO's trainer holds (TRL's PPOTrainer wrote these onto its config): worked out by hand."""
    # 2 prompts a pass x 2 passes = 4 per mini-batch and process, x 3 mini-batches = 12 per process, x 2 processes = 24
    sizes = ppo_sizes(ppo_config(total_episodes=50), processes=2, num_prompts=100)
    assert (sizes.world_size, sizes.local_mini_batch_size, sizes.local_batch_size, sizes.batch_size) == (2, 4, 12, 24)
    assert (sizes.total_episodes, sizes.num_total_batches) == (50, 3)  # 50 / 24: the last rollout whole
    # without --total_episodes, --num_train_epochs passes over the prompts: 1.5 x 100 = 150 episodes, 7 rollouts of 24
    assert (lambda s: (s.total_episodes, s.num_total_batches))(ppo_sizes(ppo_config(), 2, 100)) == (150, 7)
    # --max_steps counts rollouts, over --total_episodes and the epochs
    sizes = ppo_sizes(ppo_config(max_steps=5, total_episodes=50), processes=1, num_prompts=100)
    assert (sizes.batch_size, sizes.total_episodes, sizes.num_total_batches) == (12, 60, 5)


def test_ppo_sizes_leave_the_config_as_it_was():
    config = ppo_config(total_episodes=None)
    before = dict(vars(config))
    ppo_sizes(config, processes=2, num_prompts=10)
    assert vars(config) == before
