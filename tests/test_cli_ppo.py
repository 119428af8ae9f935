"""`train_ppo.py` run end to end as a subprocess on tiny local models."""

import json
import math
import signal

import pytest

from conftest import (
    assert_ok,
    error_line,
    grpo_args,
    ppo_args,
    run_in_process,
    run_script,
    scalars,
    start_script,
    wait_for,
)
from rlhf import tiny


@pytest.mark.slow
def test_full_run_saves_policy_and_value_model_and_logs_the_objective(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    out = tmp_path / "ppo"
    # Rollouts of 4 prompts, trained on in mini-batches of 2 (--per_device_train_batch_size): 8 episodes, 2 rollouts.
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "8",
                                                   "--prompts_per_rollout", "4"))
    assert_ok(result)
    logged = scalars(out)
    assert [step for step, _ in logged["train/objective/kl"]] == [1, 2]
    assert "{'eps'" not in result.stdout + result.stderr and "2/2 [" in result.stderr and ", reward=" in result.stderr
    for tag in ("train/objective/scores", "train/loss/policy_avg", "train/loss/value_avg", "train/objective/kl_coef"):
        assert tag in logged
    assert all(value == pytest.approx(0.05) for _, value in logged["train/objective/kl_coef"])  # fixed without target
    # The tiny random policy almost never says EOS: all 8 completions of 8 tokens are cut at the maximum.
    for tag, expected in (("mean_length", 8), ("min_length", 8), ("max_length", 8), ("clipped_ratio", 1)):
        assert [value for _, value in logged[f"train/completions/{tag}"]] == [expected] * 2
    AutoModelForCausalLM.from_pretrained(out)
    assert AutoModelForSequenceClassification.from_pretrained(out / "value_model").config.num_labels == 1
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert (manifest["global_step"], manifest["episode"]) == (2, 8)


@pytest.mark.slow
def test_lora_run_uses_the_adapter_disabled_policy_as_reference(tiny_models, tmp_path):
    out = tmp_path / "ppo_lora"
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "4", "--use_lora"))
    assert_ok(result)
    assert (out / "adapter_config.json").exists() and (out / "value_model" / "config.json").exists()
    assert "train/objective/kl" in scalars(out)


@pytest.mark.slow
def test_target_kl_moves_the_logged_coefficient(tiny_models, tmp_path):
    out = tmp_path / "ppo_kl"
    # The tiny policy's KL stays near 0, far below the target, so the coefficient must shrink every batch.
    args = ppo_args(tiny_models, out, "--total_episodes", "8", "--target_kl", "6", "--kl_horizon", "10")
    assert_ok(run_in_process("train_ppo.py", *args))
    coefs = [value for _, value in sorted(scalars(out)["train/objective/kl_coef"])]
    assert coefs[0] == pytest.approx(0.05)
    assert all(later < earlier for earlier, later in zip(coefs, coefs[1:]))


def test_reward_model_with_another_tokenizer_is_refused_before_model_work(tiny_models, tmp_path, run_cli):
    args = ppo_args(tiny_models, tmp_path / "out", reward_model=tiny_models["other_reward_model"])
    error = error_line(run_cli("train_ppo.py", *args))
    assert str(tiny_models["other_reward_model"]) in error and str(tiny_models["policy"]) in error
    assert "train_grpo.py" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_ppo_takes_a_reward_model_without_a_chat_template_as_it_reads_the_policys_token_ids(tiny_models, tmp_path):
    # GRPO and the evaluation refuse one (tests/test_cli_errors.py): they render text with the reward model's template
    tokenizer = tiny.build_tokenizer()  # the policy's vocabulary
    tokenizer.chat_template = None
    reward_model = tiny.build_reward_model(tmp_path / "no_template", tokenizer)
    assert_ok(run_in_process("train_ppo.py", *ppo_args(tiny_models, tmp_path / "out", "--total_episodes", "2",
                                                       reward_model=reward_model)))
    assert (tmp_path / "out" / "model.safetensors").exists()


# With LoRA the learning rate is high enough for a trained adapter's KL (about 1e-2 after two batches) to stand far
# above a fresh adapter's (the reference itself: float noise, about 1e-7).
@pytest.mark.slow
@pytest.mark.parametrize("lora", [[], ["--use_lora", "--learning_rate", "1e-3"]], ids=["full", "lora"])
def test_interrupted_then_resumed_run_ends_at_the_same_episode_count(tiny_models, tmp_path, lora):
    out = tmp_path / "ppo_resume"
    args = ppo_args(tiny_models, out, "--total_episodes", "40", "--target_kl", "6", "--kl_horizon", "10", *lora)
    process = start_script("train_ppo.py", *args)
    wait_for(out / "checkpoint-2" / "trainer_state.json", process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    stopped_at = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert 2 <= stopped_at < 20
    kl_coef_at_stop = json.loads((out / f"checkpoint-{stopped_at}" / "ppo_state.json").read_text())["kl_coef"]

    result = run_in_process("train_ppo.py", *args)
    assert_ok(result)
    assert f"Resuming from {out / f'checkpoint-{stopped_at}'}" in result.stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert (manifest["global_step"], manifest["episode"]) == (20, 40)  # 40 episodes / 2 prompts per batch
    logged = scalars(out)
    steps = sorted(step for step, _ in logged["train/objective/kl"])
    assert steps[-1] == 20 and len(set(steps)) == 20  # every step logged once across both launches
    resumed = dict(logged["train/objective/kl_coef"])[stopped_at + 1]
    assert resumed == pytest.approx(kl_coef_at_stop)  # the adaptive coefficient carried over
    if lora:
        # A new adapter starts as the reference (KL 0 up to float noise); the resumed one from the checkpoint's.
        kl = dict(logged["train/objective/kl"])
        assert abs(kl[1]) < 1e-4 and abs(kl[stopped_at + 1]) > 1e-3, kl


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_reward_model_in_bfloat16_scores_finite_rewards(tiny_models, tmp_path, script):
    out = tmp_path / "bf16_reward_model"
    if script == "train_grpo.py":
        args, tag = grpo_args(tiny_models, out, "--max_steps", "1"), "train/rewards/reward_model/mean"
    else:
        args, tag = ppo_args(tiny_models, out, "--total_episodes", "4"), "train/objective/scores"
    assert_ok(run_in_process(script, *args, "--reward_model_dtype", "bfloat16"))
    rewards = [value for _, value in scalars(out)[tag]]
    assert rewards and all(math.isfinite(value) for value in rewards)


@pytest.mark.slow
def test_completion_length_is_logged_from_the_completions_as_generated(tiny_models, tmp_path):
    from transformers import AutoTokenizer

    # A policy that says EOS first almost surely (0.9999 per token): every completion is that one token long.
    eos = AutoTokenizer.from_pretrained(tiny_models["policy"]).eos_token_id
    policy = tiny.ending_policy(tiny_models["policy"], tmp_path / "eos_policy", eos, 0.9999)
    out = tmp_path / "ppo_eos"
    args = ppo_args(tiny_models, out, "--total_episodes", "8", "--temperature", "1")
    args[args.index("--model_name_or_path") + 1] = policy
    assert_ok(run_in_process("train_ppo.py", *args))
    logged = scalars(out)
    assert [value for _, value in logged["train/completions/mean_length"]] == [1] * 4
    assert [value for _, value in logged["train/completions/clipped_ratio"]] == [0] * 4


@pytest.mark.slow
def test_fewer_prompts_than_one_rollout_are_refused_in_one_line_before_anything_loads(tiny_models, tmp_path):
    # TRL 1.12 drew no rollout from 32 prompts in rollouts of 64 and waited for one for good.
    out = tmp_path / "ppo"
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--prompts_per_rollout", "64"))
    line = error_line(result)
    assert "32 prompts" in line and "64" in line and "lower --prompts_per_rollout" in line
    assert not out.exists()


@pytest.mark.slow
def test_prompts_left_over_from_whole_rollouts_are_said_in_one_line(tiny_models, tmp_path):
    out = tmp_path / "ppo"
    # 32 prompts in rollouts of 6: TRL's dataloader keeps 5 whole rollouts (30 prompts) per pass.
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--prompts_per_rollout", "6",
                                                      "--total_episodes", "6"))
    assert_ok(result)
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: 32 prompts")]
    assert len(notes) == 1 and "2 prompts of each epoch go unused" in notes[0] and "--prompts_per_rollout" in notes[0]


@pytest.mark.slow
def test_dtype_auto_loads_the_value_model_in_the_policys_dtype_not_the_reward_models(tiny_models, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification

    from test_config import save_in_bfloat16

    # A float32 policy and a bfloat16 reward model: the value model (trained in full, from the reward model) once
    # loaded in the reward model's own bfloat16 under --dtype auto, and trained bfloat16 weights.
    reward_model = save_in_bfloat16(tiny_models["reward_model"], tmp_path / "bf16_reward_model")
    out = tmp_path / "ppo"
    assert_ok(run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "2", "--dtype", "auto",
                                                       reward_model=reward_model)))
    value_model = AutoModelForSequenceClassification.from_pretrained(out / "value_model", dtype="auto")
    assert value_model.dtype == torch.float32


@pytest.mark.slow
def test_ppo_models_are_built_with_the_tokenizers_distinct_pad_so_eos_trains(tiny_models, tmp_path):
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path / "ppo"
    # The tiny models' configs pad with EOS, as SmolLM2's do; PPO pads with a distinct token (ensure_distinct_pad).
    assert_ok(run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "4", "--learning_rate",
                                                       "1e-2")))
    tokenizer = AutoTokenizer.from_pretrained(out)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert pad != eos and AutoConfig.from_pretrained(out).pad_token_id == pad  # the policy's saved config
    before = AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"]).get_input_embeddings()
    value_model = AutoModelForSequenceClassification.from_pretrained(out / "value_model")
    after = value_model.get_input_embeddings()
    assert value_model.config.pad_token_id == after.padding_idx == pad
    assert not after.weight[eos].equal(before.weight[eos]), "the value model's EOS row got no gradient"


@pytest.mark.slow
def test_a_run_prints_no_library_line_that_tells_nothing_new(tiny_models, tmp_path):
    from test_cli_grpo import NOISE, prompts_with_one_too_long

    # 5 prompts in rollouts of 2: 2 rollouts a pass, 4 rollouts end 2 passes (accelerate said "no length" at each
    # gather of a pass's last rollout: 48 lines in 3 passes of the default data)
    data = prompts_with_one_too_long(tmp_path, 5)
    result = run_script("train_ppo.py", *ppo_args(tiny_models, tmp_path / "run", "--dataset_name", data,
                                              "--total_episodes", "8"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert_ok(result)
    output = result.stdout + result.stderr
    assert "5 prompts kept, 1 dropped as longer than 512 tokens" in output
    assert [line for line in NOISE if line in output] == []


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["eos", "end_of_turn"])
def test_ppo_ends_cuts_rewards_and_penalises_completions_at_the_runs_stop_tokens(tiny_models, end_of_turn_models,
                                                                                 tmp_path, stop):
    """A policy that declares `<|im_start|>` an end beside EOS: with --stop_token eos PPO stops at both; with
    --stop_token none --stop_token_id <that id> at it alone. Either way a completion that ended there is cut there,
    paid by the verifier as ended and spared --missing_eos_penalty, and counted in val/num_eos_tokens (EOS alone was
    read for the stop of the generation, the reward functions and the penalty)."""
    from test_cli_grpo import ended_is_what_the_verifier_pays
    from test_cli_reward_funcs import MATH_ROWS

    data = tiny.write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    out = tmp_path / "run"
    flags = [] if stop == "eos" else ["--stop_token", "none", "--stop_token_id", end_of_turn_models["end_of_turn"]]
    args = ppo_args(tiny_models, out, "--dataset_name", data, "--total_episodes", "8", "--prompts_per_rollout", "4",
                    "--temperature", "1", "--reward_funcs", "boxed_answer", "--reward_wrong", "-1",
                    "--reward_no_answer", "0", "--missing_eos_penalty", "1", "--max_samples", "12", "--eval_prompts",
                    "2", "--eval_steps", "2", *flags)
    args[args.index("--model_name_or_path") + 1] = end_of_turn_models["policy"]
    assert_ok(run_in_process("train_ppo.py", *args))
    logged = scalars(out)
    clipped = dict(logged["train/completions/clipped_ratio"])
    assert len(clipped) == 2 and sum(clipped.values()) / 2 < 0.5  # most ended (0.3 a token)
    for tag, per_clipped in (("rewards/boxed_answer/mean", -1), ("objective/scores", -2)):  # -1 and the penalty
        for step, value in logged[f"train/{tag}"]:
            assert value == pytest.approx(per_clipped * clipped[step], abs=1e-6), tag
    for step, value in logged["train/val/num_eos_tokens"]:
        assert value == pytest.approx(4 * (1 - clipped[step]))
    baseline = json.loads((out / "heldout_baseline.json").read_text())["completions"]
    assert ended_is_what_the_verifier_pays(baseline) and any(c["ended_with_eos"] for cs in baseline for c in cs)


@pytest.mark.slow
def test_max_steps_trains_that_many_rollouts_and_a_kl_horizon_too_long_for_them_is_said(tiny_models, tmp_path):
    out = tmp_path / "ppo"
    # 2 rollouts of 4 prompts (num_train_epochs' 3 passes over 32 prompts would be 24); --target_kl at the default
    # horizon of 10000 episodes can move kl_coef by 0.008% between them.
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--max_steps", "2", "--prompts_per_rollout",
                                "4",
                                                      "--target_kl", "6"))
    assert_ok(result)
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert (manifest["global_step"], manifest["episode"]) == (2, 8)
    assert manifest["config"]["PPOTrainingConfig"]["max_steps"] == 2
    assert "- steps: 2 of 2;" in (out / "run_report.md").read_text()
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert [step for step, _ in scalars(out)["train/objective/kl"]] == [1, 2]
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: --target_kl")]
    assert notes == ["note: --target_kl 6 can move --kl_coef by at most 0.01% in this run (1 adaptation of 4 episodes "
                     "at --kl_horizon 10000); --kl_horizon 8, the run's own length in episodes, lets it move by up "
                     "to 10%"]


@pytest.mark.slow
def test_total_episodes_below_one_rollout_trains_one_and_says_so(tiny_models, tmp_path):
    out = tmp_path / "ppo"
    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "2",
                                "--prompts_per_rollout",
                                                      "4", "--target_kl", "6", "--kl_horizon", "4"))
    assert_ok(result)
    assert "note: --total_episodes 2 -> 4 (whole rollouts: 1 rollout of --prompts_per_rollout 4)" in result.stdout
    assert ("note: --target_kl 6 cannot move --kl_coef in this run: it adapts between rollouts, and the run has one"
            in result.stdout)  # whatever the horizon
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert (manifest["global_step"], manifest["episode"]) == (1, 4)



@pytest.mark.slow
def test_the_first_update_is_at_ratio_1_and_kl_0_whatever_sampling_the_policys_generation_config_asks(tiny_models,
                                                                                                      tmp_path):
    """Qwen2.5-Instruct's generation_config.json sampling fields (repetition_penalty 1.05, top_k 20, top_p 0.8,
    temperature 0.7) reached the rollout's log-probs through transformers' defaults: ratio 0.991, approx-KL 7e-5 and
    KL 0.07 at step 1, where the policy is its own old policy and reference. The flags decide sampling, said once."""
    import shutil

    from transformers import GenerationConfig

    policy = shutil.copytree(tiny_models["policy"], tmp_path / "qwen_like")
    config = GenerationConfig.from_pretrained(policy)
    config.update(do_sample=True, repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20)
    config.save_pretrained(policy)
    out = tmp_path / "ppo"
    args = ppo_args(tiny_models, out, "--total_episodes", "2")
    args[args.index("--model_name_or_path") + 1] = policy
    result = run_in_process("train_ppo.py", *args)
    assert_ok(result)
    logged = scalars(out)
    assert logged["train/val/ratio"][0] == (1, 1.0)
    assert abs(logged["train/policy/approxkl_avg"][0][1]) < 1e-9
    # summed over the completion's tokens: fp32's noise (0 alone; 4.8e-7 once in the whole suite), as on 2 processes
    assert logged["train/objective/kl"][0] == (1, pytest.approx(0, abs=8e-6))
    assert [line for line in result.stdout.splitlines() if "generation_config.json samples with" in line] == [
        f"note: {policy}'s generation_config.json samples with repetition_penalty 1.05, temperature 0.7, top_k 20, "
        "top_p 0.8; PPO samples as its flags say (--temperature 0.7, --top_p 1) (docs/training.md, Sampling)"]
