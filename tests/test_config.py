import pytest

from config import GRPOTrainingConfig, ModelArguments, PromptDataArguments, RewardArguments
from rlhf.cli import UserError, parse_args
from rlhf.models import reward_model_dtype

GRPO_TYPES = (ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig)


def parse(*args):
    return parse_args(GRPO_TYPES, list(args))


def test_defaults_follow_the_seeds():
    model, data, reward, train = parse()
    assert model.model_name_or_path == "HuggingFaceTB/smollm2-135M-SFT-Only"
    assert (model.lora_r, model.lora_alpha, model.lora_dropout) == (16, 32, 0.05)
    assert model.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert (data.dataset_name, data.max_samples) == ("Intel/orca_dpo_pairs", 10_000)
    assert reward.reward_model_path == "./reward_model_output"
    assert train.output_dir == "./grpo_training_output"
    assert train.beta == 0.04  # TRL's default 0.0 would drop the reference model and the kl metric
    assert (train.temperature, train.top_p, train.max_completion_length) == (0.7, 0.9, 256)
    assert (train.learning_rate, train.lr_scheduler_type.value, train.num_train_epochs) == (5e-6, "cosine", 3.0)
    assert (train.epsilon, train.save_total_limit, train.gradient_checkpointing) == (0.2, 2, True)
    assert train.report_to == ["tensorboard"]
    assert train.bf16 is False  # no CUDA GPU here


def test_four_prompts_of_four_completions_per_optimizer_step():
    *_, train = parse()
    assert (train.num_generations, train.prompts_per_step) == (4, 4)
    assert train.per_device_train_batch_size * train.gradient_accumulation_steps == 16
    *_, train = parse("--per_device_train_batch_size", "4")
    assert train.gradient_accumulation_steps == 4
    assert train.generation_batch_size == 16  # TRL generates the whole step's completions at once
    *_, train = parse("--prompts_per_step", "8", "--num_generations", "2", "--per_device_train_batch_size", "4")
    assert train.gradient_accumulation_steps == 4


def test_batch_values_that_cannot_work_are_refused_in_one_line():
    with pytest.raises(UserError, match="not a multiple of per_device_train_batch_size"):
        parse("--per_device_train_batch_size", "5")
    with pytest.raises(UserError, match="--prompts_per_step 0"):
        parse("--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2")
    *_, train = parse("--prompts_per_step", "0", "--per_device_train_batch_size", "4",
                      "--gradient_accumulation_steps", "2")
    assert train.gradient_accumulation_steps == 2


def test_use_lora_spelled_with_dash_or_underscore():
    assert parse("--use-lora")[0].use_lora is True
    assert parse("--use_lora")[0].use_lora is True
    assert parse()[0].use_lora is False


def test_yaml_overrides_defaults_and_flags_override_yaml(tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text("learning_rate: 1.0e-6\nbeta: 0.1\nmax_samples: 50\nuse_lora: true\n")
    model, data, _, train = parse("--config", str(config), "--beta", "0.2")
    assert train.learning_rate == 1e-6
    assert train.beta == 0.2
    assert data.max_samples == 50
    assert model.use_lora is True


def test_yaml_and_flag_typos_name_the_key_and_a_fix(tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text("lerning_rate: 1.0e-6\n")
    with pytest.raises(UserError, match="unknown key 'lerning_rate'.*did you mean 'learning_rate'"):
        parse("--config", str(config))
    with pytest.raises(UserError, match="does not exist"):
        parse("--config", str(tmp_path / "missing.yaml"))
    config.write_text("beta: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        parse("--config", str(config))
    with pytest.raises(UserError, match="unknown flag --max-step .*max_steps"):
        parse("--max-step", "3")


def test_out_of_range_values_are_refused_in_one_line():
    with pytest.raises(UserError, match="--learning_rate must be > 0"):
        parse("--learning_rate", "0")
    with pytest.raises(UserError, match="--temperature must be > 0"):
        parse("--temperature", "-1")
    with pytest.raises(UserError, match="--beta must be >= 0"):
        parse("--beta", "-0.1")
    with pytest.raises(UserError, match="at least 2 generations"):
        parse("--num_generations", "1", "--prompts_per_step", "0")


def test_ppo_config_defaults_and_checks():
    from config import PPOTrainingConfig

    ppo_types = (ModelArguments, PromptDataArguments, PPOTrainingConfig)
    *_, ppo = parse_args(ppo_types, [])
    assert (ppo.per_device_train_batch_size, ppo.num_ppo_epochs, ppo.kl_coef) == (4, 4, 0.05)
    assert (ppo.gamma, ppo.lam, ppo.cliprange, ppo.learning_rate, ppo.temperature) == (1.0, 0.95, 0.2, 5e-6, 0.7)
    assert ppo.response_length == ppo.max_completion_length == 256
    assert ppo.output_dir == "./ppo_training_output" and ppo.reward_model_path == "./reward_model_output"
    assert ppo.stop_token == "eos" and ppo.missing_eos_penalty == 1.0 and ppo.target_kl is None
    assert parse_args(ppo_types, ["--response_length", "64"])[-1].max_completion_length == 64
    with pytest.raises(UserError, match="--target_kl must be > 0"):
        parse_args(ppo_types, ["--target_kl", "0"])


def test_frozen_reward_model_dtype_follows_bf16_training_unless_set():
    assert reward_model_dtype("auto", "float32", bf16=True) == "bfloat16"  # bf16 training on a GPU
    assert reward_model_dtype("auto", "float32", bf16=False) == "float32"  # CPU: the policy's dtype
    assert reward_model_dtype("float32", "float32", bf16=True) == "float32"
    with pytest.raises(UserError, match="--reward_model_dtype float8"):
        reward_model_dtype("float8", "float32", bf16=False)
