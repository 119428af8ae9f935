"""`train_grpo.py` run end to end as a subprocess on tiny local models, as a user would run it."""

import itertools
import json
import shutil

import pytest

from conftest import ROOT, assert_ok, error_line, grpo_args, run_in_process, run_script, scalars
from rlhf import tiny


@pytest.mark.slow
def test_help_exits_zero():
    result = run_script("train_grpo.py", "--help")
    assert result.returncode == 0
    assert "--use_lora" in result.stdout and "--prompts_per_step" in result.stdout


@pytest.mark.slow
def test_full_run_logs_kl_and_reward_and_saves_a_loadable_model(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    # 4 prompts generated together, trained on over 2 optimizer steps of 2 prompts each (the GPU default's shape).
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "2",
                                                        "--prompts_per_generation", "4"))
    assert_ok(result)
    logged = scalars(out)
    assert [step for step, _ in logged["train/kl"]] == [1, 2]
    assert [step for step, _ in logged["train/reward"]] == [1]  # rewards are logged where they are generated
    assert "train/rewards/reward_model/mean" in logged
    # The console: the progress bar with the latest reward, KL and loss beside it, not each log's dict (in the logs)
    assert "{'loss'" not in result.stdout + result.stderr and "'grad_norm'" not in result.stdout + result.stderr
    assert "2/2 [" in result.stderr and ", reward=" in result.stderr and ", kl=" in result.stderr
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == AutoModelForCausalLM.from_pretrained(tiny_models["policy"]).config.vocab_size
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["finished_at"] and manifest["global_step"] == 2
    assert manifest["config"]["GRPOTrainingConfig"]["beta"] == 0.04
    assert manifest["config"]["GRPOTrainingConfig"]["steps_per_generation"] == 2
    import trl

    assert manifest["versions"]["trl"] == trl.__version__


@pytest.mark.slow
def test_lora_run_saves_an_adapter_that_merges_into_a_full_model(tiny_models, tmp_path):
    from peft import AutoPeftModelForCausalLM

    out = tmp_path / "lora"
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "2", "--use-lora"))
    assert_ok(result)
    assert (out / "adapter_config.json").exists() and not (out / "model.safetensors").exists()
    assert [step for step, _ in scalars(out)["train/kl"]] == [1, 2]
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    assert (adapter_config["r"], adapter_config["lora_alpha"]) == (16, 32)
    merged = AutoPeftModelForCausalLM.from_pretrained(out).merge_and_unload()  # docs/training.md's merge recipe
    assert type(merged).__name__ == "LlamaForCausalLM"


@pytest.mark.slow
def test_yaml_config_run_with_a_reward_model_of_another_tokenizer(tiny_models, tmp_path):
    out = tmp_path / "yaml"
    config = tmp_path / "grpo.yaml"
    config.write_text(f"max_steps: 1\nlearning_rate: 1.0e-5\noutput_dir: {out}\nmax_samples: 8\n")
    args = grpo_args(tiny_models, out, "--config", config, reward_model=tiny_models["other_reward_model"])
    args.remove("--output_dir")
    args.remove(out)
    assert_ok(run_in_process("train_grpo.py", *args))
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["config"]["GRPOTrainingConfig"]["learning_rate"] == 1e-5
    assert manifest["config"]["PromptDataArguments"]["max_samples"] == 8
    assert manifest["global_step"] == 1
    assert "train/reward" in scalars(out)


@pytest.mark.slow
def test_rerunning_an_interrupted_run_resumes_from_the_newest_checkpoint(tiny_models, tmp_path):
    full = tmp_path / "full"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, full, "--max_steps", "4")))
    # An interrupted run is what a crash after step 2 leaves: a checkpoint and no final model.
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    (interrupted / "my_notes.txt").write_text("keep me")
    shutil.copytree(full / "checkpoint-2", interrupted / "checkpoint-2")
    # ... and a newer checkpoint cut short by a hard kill while it was written: no trainer_state.json yet.
    (interrupted / "checkpoint-3").mkdir()
    shutil.copy(full / "checkpoint-4" / "model.safetensors", interrupted / "checkpoint-3")
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, interrupted, "--max_steps", "4"))
    assert_ok(result)
    assert "Resuming from" in result.stdout and "checkpoint-2" in result.stdout
    state = json.loads((interrupted / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert [step for step, _ in scalars(interrupted)["train/kl"]] == [3, 4]  # steps 1-2 were not redone
    assert (interrupted / "my_notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "change, message",
    [
        (("--reward_model_path", "./no_such_reward_model"), f"`python {ROOT / 'train_reward_model.py'}` makes one"),
        (("--model_name_or_path", "./no_such_model"), "--model_name_or_path"),
        (("--dataset_name", "./missing.jsonl"), "does not exist"),
        (("--per_device_train_batch_size", "3"), "per_device_train_batch_size"),
        (("--use_vllm",), "vLLM"),
        (("--use_vllm", "--use_lora"), "vLLM"),
        (("--reward_model_dtype", "float8"), "--reward_model_dtype float8"),
    ],
)
def test_user_errors_end_in_one_line_and_exit_code_2(tiny_models, tmp_path, run_cli, change, message):
    args = grpo_args(tiny_models, tmp_path / "run", "--max_steps", "1")
    flag = change[0]
    if flag in args and len(change) == 2:
        args[args.index(flag) + 1] = change[1]
    else:
        args += list(change)
    assert message in error_line(run_cli("train_grpo.py", *args))
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_user_error_in_a_new_process_is_one_line_and_exit_code_2(tiny_models, tmp_path):
    # The in-process tests above see what cli() prints; this one sees what a user's terminal shows.
    result = run_script("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--reward_model_path", "./nothing"))
    assert f"`python {ROOT / 'train_reward_model.py'}` makes one" in error_line(result)  # runs from any folder
    assert not (tmp_path / "run").exists()


def test_a_causal_lm_given_as_reward_model_is_refused(tiny_models, tmp_path, run_cli):
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", reward_model=tiny_models["policy"]))
    assert "num_labels=1" in error_line(result)


def test_dataset_without_known_columns_is_refused(tiny_models, tmp_path, run_cli):
    data = tiny.write_jsonl(tmp_path / "bad.jsonl", [{"instruction": "x", "output": "y"}])
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--dataset_name", data))
    assert "instruction" in error_line(result)


def test_fewer_prompts_than_one_generation_are_refused_in_one_line_before_anything_loads(tiny_models, tmp_path,
                                                                                        run_cli):
    # TRL 1.12 drew no generation from 32 prompts in generations of 64, and stopped in "args.max_steps must be set".
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--prompts_per_generation", "64"))
    line = error_line(result)
    assert "32 prompts" in line and "64" in line and "lower --prompts_per_generation" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_prompts_left_over_from_whole_generations_are_said_in_one_line(tiny_models, tmp_path):
    # 32 prompts in generations of 12: TRL keeps 2 whole generations (24 prompts) of each epoch, 12 steps of 2 prompts.
    out = tmp_path / "run"
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, "--prompts_per_generation", "12",
                                                        "--num_train_epochs", "1", "--save_steps", "100"))
    assert_ok(result)
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: 32 prompts")]
    assert len(notes) == 1 and "8 prompts of each epoch go unused" in notes[0]
    assert "--prompts_per_generation" in notes[0]
    assert json.loads((out / "run_manifest.json").read_text())["global_step"] == 12


def logged_beta(out):
    return [value for _, value in scalars(out)["train/beta"]]


@pytest.mark.slow
def test_target_kl_moves_beta_toward_the_kl_asked_for_and_a_continued_run_keeps_it(tiny_models, tmp_path):
    # 4 completions a step, a horizon of 4: each update moves beta by the clipped +-20%. The policy starts at the
    # reference (kl 0 at step 1: below any target), then moves away from it.
    fast = ["--target_kl", "1e-9", "--kl_horizon", "4", "--learning_rate", "1e-3", "--save_steps", "2"]
    out = tmp_path / "above"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, out, *fast, "--max_steps", "4")))
    beta = logged_beta(out)
    assert beta[:2] == pytest.approx([0.04, 0.032])  # logged as the step's own beta, then adapted
    assert beta[3] > beta[2] > beta[1]  # kl above the target: beta rises
    assert all(kl > 1e-9 for _, kl in scalars(out)["train/kl"][1:])
    # Continued to 6 steps: beta goes on from where it stood, not from --beta
    continued = run_in_process("train_grpo.py", *grpo_args(tiny_models, out, *fast, "--max_steps", "6"))
    assert_ok(continued)
    assert logged_beta(out)[4] == pytest.approx(beta[3] * 1.2)
    # The completion tokens generated (a generation of 4 completions at each step, every one logged): their count
    # grows by 4 x the step's mean length, counted on from the checkpoint by the continued run.
    logged = scalars(out)
    steps, tokens = zip(*logged["train/num_completion_tokens"])
    lengths = dict(logged["train/completions/mean_length"])
    assert steps == (1, 2, 3, 4, 5, 6)
    assert list(tokens) == list(itertools.accumulate(4 * lengths[step] for step in steps))
    # quietly: the tiny policy ties its embeddings, so its checkpoint has no LM head, on purpose (transformers warned
    # "There were missing keys in the checkpoint model loaded: ['lm_head.weight']")
    assert "missing keys" not in continued.stdout + continued.stderr

    out = tmp_path / "below"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, out, *fast, "--max_steps", "4",
                                                         "--target_kl", "1000")))
    assert logged_beta(out) == pytest.approx([0.04, 0.032, 0.0256, 0.02048])  # kl below the target: beta falls


@pytest.mark.slow
def test_a_kl_horizon_too_long_for_the_run_is_said_with_the_runs_own(tiny_models, tmp_path):
    # 3 steps of 4 completions, logged at each: beta adapts twice for a later step, by at most 0.2 x 4 / 10000 each.
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out", "--max_steps", "3",
                                                        "--target_kl", "0.1"))
    assert_ok(result)
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: --target_kl")]
    assert notes == ["note: --target_kl 0.1 can move --beta by at most 0.02% in this run (2 adaptations of 4 "
                     "completions at --kl_horizon 10000); --kl_horizon 12, the run's own length in completions, lets "
                     "it move by up to 14%"]


def test_target_kl_without_a_kl_term_is_refused(tiny_models, tmp_path, run_cli):
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out", "--beta", "0", "--target_kl", "0.1"))
    assert error_line(result) == ("error: --target_kl adapts --beta, which is 0 here (no reference model, no KL to "
                                  "measure); give --beta > 0 (e.g. 0.04) or drop --target_kl.")


# Lines libraries print in runs that they say nothing new to: DeepSpeed's guess of the CPU on import (accelerate
# imports it wherever it is installed; this run does not use it), accelerate's "no length" at each pass's last PPO
# rollout, transformers' "indexing errors" for a prompt the package drops and counts itself, transformers' deprecation
# of PPO's generate call.
NOISE = ("Setting accelerator to CPU", "The used dataset had no length", "Token indices sequence length is longer",
         "Passing `generation_config` together with")


def prompts_with_one_too_long(tmp_path, n):
    """`n` tiny ORCA prompts and one longer than the tiny tokenizer's 512 tokens (dropped by the package)."""
    rows = tiny.orca_rows(n) + [dict(tiny.orca_rows(1)[0], question="word " * 900)]
    return tiny.write_jsonl(tmp_path / "prompts.jsonl", rows)


@pytest.mark.slow
def test_a_run_prints_no_library_line_that_tells_nothing_new(tiny_models, tmp_path):
    data = prompts_with_one_too_long(tmp_path, 8)
    result = run_script("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run", "--dataset_name", data,
                                                    "--max_steps", "2"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert_ok(result)
    output = result.stdout + result.stderr
    assert "8 prompts kept, 1 dropped as longer than 512 tokens" in output  # the package's own line says it
    assert [line for line in NOISE if line in output] == []


def ended_is_what_the_verifier_pays(completions):
    """No box in a random model's text: a completion that ended earns "no answer" (0), one cut off the lower of wrong
    (-1) and no answer. True where every held-out completion (`heldout_baseline.json`) is paid so."""
    return all(c["reward"] == (0.0 if c["ended_with_eos"] else -1.0) for cs in completions for c in cs)


@pytest.mark.slow
def test_grpo_from_an_adapter_folder_rewards_completions_ended_at_its_bases_end_of_turn_id(
        tiny_models, end_of_turn_models, tmp_path):
    """The adapter folder has no generation config; TRL trains its merge into the base, which declares `<|im_start|>`
    an end beside EOS, and stops generation there. The rewards, and the held-out evaluation, count those completions
    as ended (they scored as cut off: the stop set was read from the adapter folder)."""
    from test_cli_reward_funcs import MATH_ROWS

    data = tiny.write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    out = tmp_path / "run"
    args = grpo_args(tiny_models, out, "--dataset_name", data, "--max_steps", "2", "--temperature", "1",
                     "--reward_funcs", "boxed_answer", "--reward_wrong", "-1", "--reward_no_answer", "0",
                     "--max_samples", "12", "--eval_prompts", "2", "--eval_steps", "2")
    args[args.index("--model_name_or_path") + 1] = end_of_turn_models["adapter"]
    assert_ok(run_in_process("train_grpo.py", *args))
    logged = scalars(out)
    clipped = dict(logged["train/completions/clipped_ratio"])  # TRL's: cut at its own stop tokens
    assert sum(clipped.values()) / len(clipped) < 0.5  # most ended (at <|im_start|>: 0.3 a token)
    for step, mean in logged["train/rewards/boxed_answer/mean"]:
        assert mean == pytest.approx(-clipped[step], abs=1e-6)
    baseline = json.loads((out / "heldout_baseline.json").read_text())["completions"]
    assert ended_is_what_the_verifier_pays(baseline) and any(c["ended_with_eos"] for cs in baseline for c in cs)


@pytest.mark.slow
def test_grpo_missing_eos_penalty_is_taken_from_completions_cut_off_before_the_runs_stop_tokens(
        tiny_models, end_of_turn_models, tmp_path):
    """PPO's flag in GRPO: a reward function at weight 1 after the reward model, -2 for each completion cut off at the
    limit (one ended at the policy's declared end `<|im_start|>` is spared), logged as its own reward; the held-out
    evaluation reads the reward model alone, as PPO's does."""
    out = tmp_path / "run"
    args = grpo_args(tiny_models, out, "--max_steps", "3", "--temperature", "1", "--max_completion_length", "4",
                     "--missing_eos_penalty", "2", "--max_samples", "24", "--eval_prompts", "2", "--eval_steps", "2")
    args[args.index("--model_name_or_path") + 1] = end_of_turn_models["policy"]
    assert_ok(run_in_process("train_grpo.py", *args))
    logged = scalars(out)
    clipped = dict(logged["train/completions/clipped_ratio"])
    assert 0 < sum(clipped.values()) < len(clipped)  # some cut off, some ended (0.3 a token over 4 tokens)
    model = dict(logged["train/rewards/reward_model/mean"])
    for step, mean in logged["train/rewards/missing_eos_penalty/mean"]:
        assert mean == pytest.approx(-2 * clipped[step], abs=1e-6)
        assert dict(logged["train/reward"])[step] == pytest.approx(model[step] + mean, abs=1e-5)
    baseline = json.loads((out / "heldout_baseline.json").read_text())
    assert baseline["record"]["reward_funcs"] == ["reward_model"]
