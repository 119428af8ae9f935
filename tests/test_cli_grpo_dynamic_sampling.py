"""`train_grpo.py --use_dynamic_sampling` end to end on the tiny models: every generation trains on groups whose
rewards differ, in one process and two, resumed exactly, with LoRA and the reward model, and the cap said once."""

import json
from collections import defaultdict

import pytest
import torch

from conftest import assert_ok, error_line, grpo_args, run_in_process, run_script, scalars
from rlhf.batches import GROUP_WHY
from test_interruption import final_weights

# Rewards that control which groups differ: `half` gives every completion of half the prompts (by the prompt's
# checksum) the same 0 and scores the others by their text; `half_ids` as `half`, by their token ids; `one` gives
# every completion 1. With PROBE_DIR set, each process writes the step of each call (one call per generation round);
# with DRAWN_FILE set, `half_ids` writes each completion's reward and length; with PROMPTS_FILE set, `half` writes
# each call's prompts, one line a round.
REWARDS = '''
import json, os, zlib
from pathlib import Path


def _probe(trainer_state):
    if os.environ.get("PROBE_DIR"):
        with open(Path(os.environ["PROBE_DIR"]) / f"rank{os.environ.get('RANK', '0')}.txt", "a") as f:
            f.write(f"{trainer_state.global_step}\\n")


def half(prompts, completions, trainer_state=None, **kwargs):
    _probe(trainer_state)
    if os.environ.get("PROMPTS_FILE"):
        with open(os.environ["PROMPTS_FILE"], "a") as f:
            f.write(json.dumps([str(p) for p in prompts]) + "\\n")
    return [0.0 if zlib.crc32(str(p).encode()) % 2 else zlib.crc32(str(c).encode()) % 1000 / 1000
            for p, c in zip(prompts, completions)]


def half_ids(prompts, completions, completion_ids, trainer_state=None, **kwargs):
    rewards = [0.0 if zlib.crc32(str(p).encode()) % 2 else sum(ids) % 1000 / 1000
               for p, ids in zip(prompts, completion_ids)]
    if os.environ.get("DRAWN_FILE"):
        with open(os.environ["DRAWN_FILE"], "a") as f:
            for reward, ids in zip(rewards, completion_ids):
                f.write(json.dumps({"step": trainer_state.global_step + 1, "reward": reward, "length": len(ids)}))
                f.write("\\n")
    return rewards


def one(prompts, completions, **kwargs):
    return [1.0] * len(prompts)
'''


@pytest.fixture
def rewards(tmp_path):
    (tmp_path / "signal_rewards.py").write_text(REWARDS)
    return {"PYTHONPATH": str(tmp_path)}


def trained_groups(checkpoint, processes=1):
    """The generation a checkpoint trains on, every process's rows: [the advantages of each prompt's completions]."""
    groups = defaultdict(list)
    for rank in range(processes):
        state = torch.load(checkpoint / f"grpo_generation_{rank}.pt", weights_only=True)
        for batch in state["buffered_inputs"]:
            for ids, mask, advantage in zip(batch["prompt_ids"], batch["prompt_mask"], batch["advantages"]):
                groups[tuple(ids[mask.bool()].tolist())].append(advantage.item())
    return list(groups.values())


def trained_completions(checkpoint):
    """The generation a checkpoint trains on (one process): each completion's token ids."""
    state = torch.load(checkpoint / "grpo_generation_0.pt", weights_only=True)
    return [ids[mask.bool()].tolist() for batch in state["buffered_inputs"]
            for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])]


def assert_every_group_differs(groups, completions):
    # 2 completions a group: rewards that differ give each one an advantage of the same size, opposite signs. A
    # prompt drawn twice in one generation holds two such groups.
    assert sum(map(len, groups)) == completions
    for advantages in groups:
        assert len(advantages) % 2 == 0 and all(abs(a) > 0.1 for a in advantages), groups
        assert abs(sum(advantages)) < 1e-3, groups


@pytest.mark.slow
def test_each_generation_trains_on_groups_whose_rewards_differ_and_counts_what_it_drew(tiny_models, tmp_path,
                                                                                       rewards):
    out = tmp_path / "run"
    # 4 prompts generated together for 2 steps of 2 prompts (the GPU default's shape), half of them of one reward.
    result = run_in_process("train_grpo.py", *grpo_args(
            tiny_models, out, "--reward_funcs", "signal_rewards.half", "--use_dynamic_sampling", "--max_steps", "6",
            "--prompts_per_generation", "4", "--save_steps", "1", "--save_total_limit", "10"), env=rewards)
    assert_ok(result)
    for step in range(1, 7):
        assert_every_group_differs(trained_groups(out / f"checkpoint-{step}"), 8)
    logged = scalars(out)
    rounds = dict(logged["train/dynamic_sampling/rounds"])
    assert list(rounds) == [1, 3, 5] and max(rounds.values()) > 1  # logged where it generates; it drew more
    assert dict(logged["train/dynamic_sampling/groups_drawn"]) == {step: 4 * n for step, n in rounds.items()}
    assert dict(logged["train/dynamic_sampling/groups_discarded"]) == {step: 4 * n - 4 for step, n in rounds.items()}
    one_reward = dict(logged["train/dynamic_sampling/groups_one_reward"])
    assert all(1 <= one_reward[step] <= 4 * n - 4 for step, n in rounds.items() if n > 1)
    assert {value for _, value in logged["train/frac_reward_zero_std"]} == {0.0}  # the groups trained on
    assert {value for _, value in logged["train/dynamic_sampling/cap_reached"]} == {0.0}
    assert "note: dynamic sampling" not in result.stdout


@pytest.mark.slow
def test_reward_and_completion_metrics_describe_the_groups_trained_on_and_the_drawn_ones_every_draw(tiny_models,
                                                                                                   tmp_path, rewards):
    # TRL logs reward and completions/* once per round: before, a step averaged every round drawn, discarded groups
    # included. Expected values from the rows each checkpoint trains on and from what the reward function saw.
    out, drawn = tmp_path / "run", tmp_path / "drawn.jsonl"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(
            tiny_models, out, "--reward_funcs", "signal_rewards.half_ids", "--use_dynamic_sampling", "--max_steps",
            "3", "--prompts_per_generation", "4", "--save_steps", "1", "--save_total_limit", "10"),
            env={**rewards, "DRAWN_FILE": str(drawn)}))
    logged = {tag: dict(points) for tag, points in scalars(out).items()}
    records = [json.loads(line) for line in drawn.read_text().splitlines()]
    [mean] = [points for tag, points in logged.items() if tag.startswith("train/rewards/") and tag.endswith("/mean")]
    assert set(logged["train/dynamic_sampling/rounds"]) == {1, 3}  # a generation every 2 steps
    assert max(logged["train/dynamic_sampling/rounds"].values()) > 1  # groups were discarded
    for step, rounds in logged["train/dynamic_sampling/rounds"].items():
        completions = trained_completions(out / f"checkpoint-{step}")
        assert len(completions) == 8
        reward = sum(sum(ids) % 1000 / 1000 for ids in completions) / 8  # every group trained on differs
        lengths = [len(ids) for ids in completions]
        assert logged["train/reward"][step] == pytest.approx(reward, abs=1e-6)
        assert mean[step] == pytest.approx(reward, abs=1e-6)  # rewards/<half_ids>/mean: the one function's
        assert logged["train/completions/mean_length"][step] == pytest.approx(sum(lengths) / 8)
        assert logged["train/completions/max_length"][step] == max(lengths)
        # what every round drew, the discarded groups included: 8 completions a round
        seen = [record for record in records if record["step"] == step]
        assert len(seen) == 8 * rounds
        drawn_reward = sum(record["reward"] for record in seen) / len(seen)
        assert logged["train/dynamic_sampling/drawn_reward"][step] == pytest.approx(drawn_reward, abs=1e-6)
        assert logged["train/dynamic_sampling/drawn_mean_length"][step] == pytest.approx(
            sum(record["length"] for record in seen) / len(seen))
        if rounds > 1:
            assert drawn_reward != pytest.approx(reward, abs=1e-3)


@pytest.mark.slow
def test_the_cap_reached_is_said_once_and_the_step_trains_on_what_it_has(tiny_models, tmp_path, rewards):
    out = tmp_path / "run"
    result = run_in_process("train_grpo.py", *grpo_args(
            tiny_models, out, "--reward_funcs", "signal_rewards.one", "--use_dynamic_sampling",
            "--dynamic_sampling_max_gen_batches", "2", "--max_steps", "3"), env=rewards)
    assert_ok(result)
    said = [line for line in result.stdout.splitlines() if line.startswith("note: dynamic sampling")]
    assert said == ["note: dynamic sampling reached --dynamic_sampling_max_gen_batches 2 at step 1: 0 of the 2 groups "
                    "it trains on have rewards that differ, the other 2 got one reward (advantage 0); each "
                    "generation where it happens again is counted in dynamic_sampling/cap_reached, not said"]
    logged = scalars(out)
    assert logged["train/dynamic_sampling/cap_reached"] == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert logged["train/dynamic_sampling/rounds"] == [(1, 2.0), (2, 2.0), (3, 2.0)]
    assert logged["train/frac_reward_zero_std"] == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert "health: dynamic sampling found too few groups whose rewards differ in 2 generation batches" in (
        result.stdout)
    assert logged["train/health/dynamic_sampling_cap_reached"] == [(3, 1.0)]


@pytest.mark.slow
def test_a_long_draw_says_how_far_it_got_every_ten_generation_batches(tiny_models, tmp_path, rewards):
    # --dynamic_sampling_max_gen_batches 100000 with a constant reward sat at 0% for minutes without a word
    result = run_in_process("train_grpo.py", *grpo_args(
            tiny_models, tmp_path / "run", "--reward_funcs", "signal_rewards.one", "--use_dynamic_sampling",
            "--dynamic_sampling_max_gen_batches", "21", "--max_steps", "1"), env=rewards)
    assert_ok(result)
    said = [line for line in result.stdout.splitlines() if line.startswith("dynamic sampling, step")]
    assert said == [f"dynamic sampling, step 1: {n} generation batches drawn of up to "
                    "--dynamic_sampling_max_gen_batches 21, 0 of the 2 groups whose rewards differ found so far"
                    for n in (10, 20)]


@pytest.mark.slow
def test_the_cap_note_says_which_groups_of_one_reward_still_train_with_an_advantage(tiny_models, tmp_path, rewards):
    # A tolerance wider than any spread: every group counts as one reward and the cap fills the batch, but the groups
    # that `half` scores by their text get TRL's advantages, their spread divided by their std.
    out = tmp_path / "run"
    result = run_in_process("train_grpo.py", *grpo_args(
            tiny_models, out, "--reward_funcs", "signal_rewards.half", "--use_dynamic_sampling",
            "--dynamic_sampling_max_gen_batches", "2", "--dynamic_sampling_tolerance", "1e9", "--max_steps", "1",
            "--prompts_per_generation", "4", "--per_device_train_batch_size", "8", "--save_steps", "1"), env=rewards)
    assert_ok(result)
    groups = trained_groups(out / "checkpoint-1")
    pushed = sum(any(abs(a) > 1e-6 for a in g) for g in groups)
    assert 0 < pushed < 4
    said = [line for line in result.stdout.splitlines() if line.startswith("note: dynamic sampling")]
    assert said == ["note: dynamic sampling reached --dynamic_sampling_max_gen_batches 2 at step 1: 0 of the 4 groups "
                    "it trains on have rewards that differ, the other 4 got one reward within "
                    f"--dynamic_sampling_tolerance 1e+09: {4 - pushed} of them train with advantage 0, {pushed} with "
                    "TRL's advantages, what spread they have (--missing_eos_penalty's included) divided by their std; "
                    "each generation where it happens again is counted in dynamic_sampling/cap_reached, not said"]
    assert scalars(out)["train/frac_reward_zero_std"] == [(1, pytest.approx(1 - pushed / 4))]


@pytest.mark.slow
def test_two_processes_keep_the_same_groups_split_between_them_and_resume_exactly(tiny_models, tmp_path, rewards):
    # 3 prompts a step, 2 completions each: 3 completions per process, so the middle group straddles the two.
    probe = tmp_path / "probe"
    probe.mkdir()

    def args(out):
        return grpo_args(tiny_models, out, "--reward_funcs", "signal_rewards.half", "--use_dynamic_sampling",
                         "--prompts_per_step", "3", "--per_device_train_batch_size", "3", "--max_steps", "4",
                         "--max_samples", "12", "--save_steps", "1", "--save_total_limit", "10",
                         "--lr_scheduler_type", "constant", "--learning_rate", "1e-2")

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert_ok(run_script("train_grpo.py", *args(whole), processes=2, env={**rewards, "PROBE_DIR": str(probe)},
                         timeout=300))
    for step in range(1, 5):
        assert_every_group_differs(trained_groups(whole / f"checkpoint-{step}", processes=2), 6)
    # Both processes generated the same rounds at each step (one reward call per round).
    calls = [(probe / f"rank{rank}.txt").read_text().split() for rank in (0, 1)]
    assert calls[0] == calls[1] and len(calls[0]) > 4
    assert max(value for _, value in scalars(whole)["train/dynamic_sampling/rounds"]) > 1

    assert_ok(run_script("train_grpo.py", *args(resumed), "--resume_from_checkpoint", whole / "checkpoint-2",
                         processes=2, env=rewards, timeout=300))
    expected, weights = final_weights(whole), final_weights(resumed)
    differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


@pytest.mark.slow
def test_a_run_resumed_inside_a_generation_trains_what_one_run_trains(tiny_models, tmp_path, rewards):
    # 2 steps per generation, 2 generations per pass over the 8 prompts; resumed at step 3, inside the second
    # generation: step 5 draws extra prompts after the resume.
    def args(out):
        return grpo_args(tiny_models, out, "--reward_funcs", "signal_rewards.half", "--use_dynamic_sampling",
                         "--max_steps", "6", "--prompts_per_generation", "4", "--max_samples", "8", "--save_steps",
                         "1", "--save_total_limit", "10", "--lr_scheduler_type", "constant", "--learning_rate", "1e-2")

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert_ok(run_in_process("train_grpo.py", *args(whole), env=rewards))
    assert max(value for _, value in scalars(whole)["train/dynamic_sampling/rounds"]) > 1
    assert_ok(run_in_process("train_grpo.py", *args(resumed), "--resume_from_checkpoint", whole / "checkpoint-3",
                             env=rewards))
    expected, weights = final_weights(whole), final_weights(resumed)
    differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


@pytest.mark.slow
def test_with_the_reward_model_whose_groups_all_differ_it_trains_what_trl_trains(tiny_models, tmp_path):
    # The tiny reward model scores every completion differently: nothing is discarded, no extra round is drawn, and
    # the weights are those of a run without dynamic sampling: its rounds take TRL's batches, into a second pass over
    # the 4 prompts (2 a step).
    plain, dynamic = tmp_path / "plain", tmp_path / "dynamic"
    short = ("--max_steps", "3", "--max_samples", "4")
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, plain, *short)))
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, dynamic, *short, "--use_dynamic_sampling")))
    logged = scalars(dynamic)
    assert logged["train/dynamic_sampling/rounds"] == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert logged["train/dynamic_sampling/groups_discarded"] == [(1, 0.0), (2, 0.0), (3, 0.0)]
    assert logged["train/dynamic_sampling/passes"] == [(1, 0.5), (2, 1.0), (3, 1.5)]
    expected, weights = final_weights(plain), final_weights(dynamic)
    assert all(torch.equal(tensor, weights[name]) for name, tensor in expected.items())


@pytest.mark.slow
def test_with_epochs_a_run_ends_after_that_many_passes_over_the_prompts_none_twice_in_a_pass(tiny_models, tmp_path,
                                                                                              rewards):
    # 8 prompts, 4 a generation: a pass is 2 rounds, and TRL plans 2 generations (4 steps) a pass. Half the prompts
    # get one reward, so generations draw extra rounds, which take the next batches of the data order.
    out, drawn = tmp_path / "run", tmp_path / "prompts.jsonl"
    result = run_in_process("train_grpo.py", *grpo_args(
        tiny_models, out, "--reward_funcs", "signal_rewards.half", "--use_dynamic_sampling", "--num_train_epochs", "2",
        "--prompts_per_generation", "4", "--max_samples", "8", "--save_steps", "5"),
        env={**rewards, "PROMPTS_FILE": str(drawn)})
    assert_ok(result)
    rounds = [json.loads(line)[::2] for line in drawn.read_text().splitlines()]  # a prompt per group
    assert all(len(prompts) == 4 for prompts in rounds)
    taken = [prompt for prompts in rounds for prompt in prompts]
    passes = [taken[start:start + 8] for start in range(0, len(taken), 8)]
    assert len(passes) >= 2 and all(len(set(prompts)) == 8 for prompts in passes if len(prompts) == 8)
    logged = scalars(out)
    done = [value for _, value in logged["train/dynamic_sampling/passes"]]
    assert done[-1] >= 2 and all(value < 2 for value in done[:-1])  # ended after the generation that took pass 2
    assert done[-1] == len(taken) / 8
    steps = logged["train/dynamic_sampling/passes"][-1][0] + 1  # that generation's 2 steps
    assert max(step for step, _ in logged["train/loss"]) == steps < 8
    assert (out / f"checkpoint-{steps}" / "trainer_state.json").exists()  # saved where it ends, as at a last step
    assert (f"dynamic sampling took --num_train_epochs 2 passes over the prompts by step {steps} of the 8 TRL "
            "planned") in result.stdout


@pytest.mark.slow
def test_rows_of_several_rounds_keep_their_positions_on_a_model_of_absolute_positions(families, tiny_models, tmp_path,
                                                                                       rewards):
    # GPT-2 adds a learnt embedding of each absolute position: a row re-padded to a wider round's prompts sits at other
    # positions than those its old and reference log-probs were taken at, and the first step's KL is no longer 0
    # (0.012 before the log-probs of re-padded rows were taken again).
    from test_families import models_of

    out = tmp_path / "gpt2"
    args = grpo_args(models_of(families, tiny_models, "gpt2"), out, "--reward_funcs",
                     "signal_rewards.half", "--use_dynamic_sampling", "--max_steps", "1", "--prompts_per_generation",
                     "4", "--per_device_train_batch_size", "8")
    assert_ok(run_in_process("train_grpo.py", *args, env=rewards))
    logged = scalars(out)
    assert logged["train/dynamic_sampling/rounds"][0][1] > 1
    assert logged["train/kl"][0] == (1, pytest.approx(0, abs=1e-6))


@pytest.mark.slow
def test_a_lora_run_trains_its_adapter_on_groups_whose_rewards_differ(tiny_models, tmp_path, rewards):
    out = tmp_path / "lora"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(
            tiny_models, out, "--reward_funcs", "signal_rewards.half", "--use_dynamic_sampling", "--use_peft",
            "--max_steps", "3", "--save_steps", "1"), env=rewards))
    assert (out / "adapter_model.safetensors").exists() and not (out / "model.safetensors").exists()
    assert_every_group_differs(trained_groups(out / "checkpoint-3"), 4)
    assert sum(value for _, value in scalars(out)["train/dynamic_sampling/groups_discarded"]) > 0


def test_dynamic_sampling_with_one_completion_per_prompt_is_refused_in_one_line(tiny_models, tmp_path, run_cli):
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--use_dynamic_sampling",
                                                 "--num_generations", "1"))
    assert error_line(result) == "error: --num_generations must be >= 2, got 1: " + GROUP_WHY
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_groups_that_differ_only_in_the_missing_eos_penalty_count_as_one_reward(tiny_models, end_of_turn_models,
                                                                              tmp_path, rewards):
    """DAPO keeps the groups whose outcome differs, judged on the task's reward, not a shaped total (verl#7792): a
    group whose completions all earn 1 and differ only in being cut off (--missing_eos_penalty) is a group of one
    reward. It still trains where the cap fills the batch with such groups: the penalty gives them an advantage."""
    out = tmp_path / "run"
    args = grpo_args(tiny_models, out, "--reward_funcs", "signal_rewards.one", "--use_dynamic_sampling",
                     "--dynamic_sampling_max_gen_batches", "2", "--max_steps", "4", "--prompts_per_generation", "4",
                     "--temperature", "1", "--max_completion_length", "4", "--missing_eos_penalty", "2",
                     "--save_steps", "1", "--save_total_limit", "10")
    args[args.index("--model_name_or_path") + 1] = end_of_turn_models["policy"]
    assert_ok(run_in_process("train_grpo.py", *args, env=rewards))
    # the groups trained on (generated at steps 1 and 3): some held a cut-off completion beside an ended one
    groups = [g for step in (1, 3) for g in trained_groups(out / f"checkpoint-{step}")]
    assert any(abs(a) > 0.1 for g in groups for a in g)
    logged = scalars(out)
    assert logged["train/dynamic_sampling/cap_reached"] == [(1, 1.0), (3, 1.0)]
    assert logged["train/dynamic_sampling/groups_one_reward"] == logged["train/dynamic_sampling/groups_drawn"]
    # frac_reward_zero_std: the groups trained on whose advantages are all 0 (not those the penalty pushes)
    zero = [sum(len(g) for g in groups if all(abs(a) < 1e-6 for a in g)) / sum(map(len, groups))
            for groups in (trained_groups(out / f"checkpoint-{step}") for step in (1, 3))]
    assert [value for _, value in logged["train/frac_reward_zero_std"]] == pytest.approx(zero)
