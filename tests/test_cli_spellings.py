"""Spellings users bring from the seeds (a hand-written GRPO's dash flags, a math GRPO's YAML, an older TRL PPO):
the same meaning runs as an alias, recorded under this package's name; another meaning is named in the one error line
with what to write here; settings that would do nothing are said.

Parsing only (`rlhf.cli.parse_args`), in this process: nothing loads or trains.
"""

import pytest

from rlhf.errors import UserError


def grpo(*flags):
    from config import GRPOTrainingConfig, ModelArguments, PromptDataArguments, RewardArguments
    from rlhf.cli import parse_args

    types = (ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig)
    return parse_args(types, list(map(str, flags)))


def ppo(*flags):
    from config import PPOModelArguments, PPOTrainingConfig, PromptDataArguments
    from rlhf.cli import parse_args

    return parse_args((PPOModelArguments, PromptDataArguments, PPOTrainingConfig), list(map(str, flags)))


def test_the_seeds_grpo_names_that_mean_the_same_here_are_aliases(tmp_path):
    model, _, rewards, config = grpo(
        "--model-name", "my/model", "--num-epochs", "2", "--max-new-tokens", "64", "--kl-coef", "0.1",
        "--clip-range", "0.3", "--num_return_sequences", "8", "--reward_correct", "2", "--reward_wrong", "-2",
        "--reward_no_answer", "-1", "--output_dir", tmp_path)
    assert model.model_name_or_path == "my/model"
    assert (config.num_train_epochs, config.max_completion_length, config.beta, config.epsilon) == (2, 64, 0.1, 0.3)
    assert config.num_generations == 8
    assert rewards.boxed_rewards == (2.0, -2.0, -1.0, None)
    assert grpo("--model_path", "a/b", "--group_size", "2", "--output_dir", tmp_path)[0].model_name_or_path == "a/b"


def test_the_older_ppo_names_are_aliases(tmp_path):
    model, _, config = ppo("--model_path", "my/model", "--ppo_epochs", "2", "--init_kl_coef", "0.2", "--target", "6",
                           "--max_new_tokens", "32", "--clip_range", "0.1", "--output_dir", tmp_path)
    assert model.model_name_or_path == "my/model"
    assert (config.num_ppo_epochs, config.kl_coef, config.target_kl, config.cliprange) == (2, 0.2, 6, 0.1)
    assert config.max_completion_length == config.response_length == 32


def test_the_hand_written_grpo_command_line_runs_as_written_and_says_what_its_batch_became(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    flags = ["--model-name", "X", "--batch-size", "4", "--num-epochs", "3", "--learning-rate", "1e-6",
             "--num-generations", "4", "--max-new-tokens", "256", "--kl-coef", "0.1", "--clip-range", "0.2",
             "--temperature", "0.7", "--gradient-accumulation-steps", "4", "--max-grad-norm", "1.0", "--warmup-steps",
             "100", "--output-dir", str(tmp_path), "--logging-steps", "10", "--save-steps", "500", "--use-wandb",
             "--wandb-project", "P", "--wandb-run-name", "R", "--device", "cuda"]
    config = grpo(*flags)[-1]
    # 4 prompts x 4 completions per pass, 4 passes per optimizer step: 16 prompts, 64 completions a step.
    assert (config.prompts_per_step, config.per_device_train_batch_size, config.gradient_accumulation_steps) == (
        16, 16, 4)
    assert config.batch_size is None  # recorded as what it became
    assert ("note: --batch_size 4 -> --prompts_per_step 16 --per_device_train_batch_size 16 (4 prompts x 4 "
            "completions per pass, 4 passes per optimizer step; this package counts prompts per optimizer step)"
            ) in capsys.readouterr().out.splitlines()
    with pytest.raises(UserError, match="--batch_size 4 and --prompts_per_step 8 both set the prompts of a step"):
        grpo("--batch_size", "4", "--prompts_per_step", "8", "--output_dir", tmp_path)


def test_the_older_ppo_batch_sizes_run_as_written_and_the_manifest_records_what_trains(tmp_path, capsys):
    config = ppo("--batch_size", "16", "--mini_batch_size", "2", "--output_dir", tmp_path)[-1]
    # rollouts of 16 prompts, one optimizer step per 2: 8 mini-batches
    assert (config.prompts_per_rollout, config.per_device_train_batch_size, config.num_mini_batches) == (16, 2, 8)
    lines = capsys.readouterr().out.splitlines()
    assert "note: --batch_size 16 -> --prompts_per_rollout 16 (this package's spelling)" in lines
    assert "note: --mini_batch_size 2 -> --per_device_train_batch_size 2 (this package's spelling)" in lines
    with pytest.raises(UserError, match="--mini_batch_size two: give a whole number"):
        ppo("--mini_batch_size", "two", "--output_dir", tmp_path)


def test_a_batch_name_is_never_answered_with_a_flag_that_means_something_else(tmp_path):
    with pytest.raises(UserError) as error:
        grpo("--mini_batch_size", "2", "--output_dir", tmp_path)
    assert "auto_find_batch_size" not in str(error.value)
    assert "(here: GRPO: --per_device_train_batch_size counts completions per pass" in str(error.value)


def test_a_field_of_trls_ppo_config_that_this_ppo_does_not_have_is_answered_with_what_does_it(tmp_path):
    """TRL 1.12's sample table (`num_sample_generations`) is cut: a flag or a TRL YAML that sets it gets one line."""
    here = "(here: TRL's sample table is not in this PPO; --eval_prompts N evaluates N held-out prompts"
    with pytest.raises(UserError, match="unknown flag --num_sample_generations") as error:
        ppo("--num_sample_generations", "5", "--output_dir", tmp_path)
    assert here in str(error.value)
    config = tmp_path / "trl_ppo.yaml"
    config.write_text("num_sample_generations: 10\nkl_coef: 0.05\n")
    with pytest.raises(UserError, match="unknown key 'num_sample_generations'") as error:
        ppo("--config", config, "--output_dir", tmp_path)
    assert here in str(error.value)


def test_grpos_dynamic_sampling_given_to_ppo_names_what_ppo_does_instead(tmp_path):
    with pytest.raises(UserError, match="unknown flag --use_dynamic_sampling") as error:
        ppo("--use_dynamic_sampling", "--output_dir", tmp_path)
    assert "(here: GRPO's (train_grpo.py); PPO has no groups" in str(error.value)
    assert "--skip_rollouts_without_signal" in str(error.value)
    assert grpo("--use_dynamic_sampling", "--output_dir", tmp_path)[-1].use_dynamic_sampling


def test_a_yaml_reads_the_seeds_keys_and_a_nested_section_and_names_every_unknown_key_in_one_line(tmp_path, capsys):
    config = tmp_path / "math.yaml"
    config.write_text("model:\n  path: my/model\nnum_return_sequences: 8\nuse_wandb: true\ndevice: cpu\n")
    model, _, _, training = grpo("--config", config, "--output_dir", tmp_path)
    assert model.model_name_or_path == "my/model" and training.num_generations == 8
    assert training.use_cpu and "wandb" in training.report_to
    lines = capsys.readouterr().out.splitlines()
    for line in ("note: model: {path: ...} read as model_path (this package's keys are flat)",
                 "note: --use_wandb true -> --report_to wandb (this package's spelling)",
                 "note: --device cpu -> --use_cpu (this package's spelling)"):
        assert line in lines
    config.write_text("model:\n  path: my/model\n  revison: main\nlerning_rate: 1e-5\nmini_batch_size: 2\n")
    with pytest.raises(UserError) as error:
        grpo("--config", config, "--output_dir", tmp_path)
    message = str(error.value)
    assert message.startswith("unknown keys 'model.revison' (did you mean 'model_revision'?), 'lerning_rate' (did "
                              "you mean 'learning_rate'?), "
                              "'mini_batch_size' (here: GRPO: ")
    assert message.count("\n") == 0


def test_lora_settings_without_use_peft_are_said_to_do_nothing(tmp_path, capsys):
    model = grpo("--lora_r", "16", "--lora_alpha", "32", "--output_dir", tmp_path)[0]
    assert not model.use_peft
    lines = capsys.readouterr().out.splitlines()
    assert lines.count("note: the LoRA settings given (--lora_r, --lora_alpha, ...) do nothing without --use_peft: "
                       "all weights train; add --use_peft (or use_peft: true) to train a LoRA adapter") == 1
    grpo("--use_peft", "--lora_r", "16", "--output_dir", tmp_path)
    assert "LoRA settings" not in capsys.readouterr().out


def test_gradient_accumulation_given_to_grpo_says_it_counts_completions(tmp_path, capsys):
    config = grpo("--gradient-accumulation-steps", "4", "--num-generations", "4", "--output_dir", tmp_path)[-1]
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (16, 4)
    assert ("note: --gradient_accumulation_steps 4 sets TRL's batch, counted in completions: "
            "--per_device_train_batch_size 16 x 4 = 64 completions per optimizer step, 16 prompts x 4 completions "
            "(--prompts_per_step N counts prompts instead)") in capsys.readouterr().out.splitlines()


def test_the_hand_written_grpos_device_and_wandb_flags_run_as_written_and_say_what_they_became(tmp_path, capsys,
                                                                                                monkeypatch):
    import os

    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    config = grpo("--device", "cpu", "--use-wandb", "--wandb-project", "P", "--wandb-run-name", "R",
                  "--output_dir", tmp_path)[-1]
    assert config.use_cpu and "wandb" in config.report_to and config.run_name == "R"
    assert os.environ["WANDB_PROJECT"] == "P"
    lines = capsys.readouterr().out.splitlines()
    for line in ("note: --device cpu -> --use_cpu (this package's spelling)",
                 "note: --use-wandb -> --report_to wandb (this package's spelling)",
                 "note: --wandb-project P -> WANDB_PROJECT=P (this package's spelling)",
                 "note: --wandb-run-name R -> --run_name R (this package's spelling)"):
        assert line in lines
    with pytest.raises(UserError, match="--device tpu: give cpu"):
        grpo("--device", "tpu", "--output_dir", tmp_path)


def test_ppo_says_that_max_grad_norm_does_nothing_outside_deepspeed(tmp_path, capsys):
    ppo("--max_grad_norm", "0.5", "--output_dir", tmp_path)
    assert ("note: --max_grad_norm 0.5 does nothing here: PPO (as TRL's) clips gradients only under DeepSpeed, whose "
            "config takes it") in capsys.readouterr().out.splitlines()
    ppo("--output_dir", tmp_path)  # not given: no news
    assert "max_grad_norm" not in capsys.readouterr().out
