import pytest

from config import (
    GRPOTrainingConfig,
    ModelArguments,
    PPOModelArguments,
    PPOTrainingConfig,
    PromptDataArguments,
    RewardArguments,
)
from rlhf import engines
from rlhf.batches import GROUP_WHY
from rlhf.cli import UserError, parse_args
from rlhf.models import reward_model_dtype

GRPO_TYPES = (ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig)
PPO_TYPES = (PPOModelArguments, PromptDataArguments, PPOTrainingConfig)


def parse(*args):
    return parse_args(GRPO_TYPES, list(args))


def test_defaults_follow_the_seeds():
    model, data, reward, train = parse()
    assert model.model_name_or_path == "HuggingFaceTB/smollm2-135M-SFT-Only"
    assert (model.lora_r, model.lora_alpha, model.lora_dropout) == (16, 32, 0.05)
    assert model.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert (data.dataset_name, data.max_samples) == ("Intel/orca_dpo_pairs", 10_000)
    assert reward.reward_model_name_or_path == "./reward_model_output"
    assert train.output_dir == "./grpo_training_output"
    assert train.beta == 0.04  # TRL's default 0.0 would drop the reference model and the kl metric
    assert (train.temperature, train.max_completion_length) == (0.7, 256)
    assert (train.learning_rate, train.lr_scheduler_type.value, train.num_train_epochs) == (5e-6, "cosine", 3.0)
    assert (train.epsilon, train.save_total_limit, train.gradient_checkpointing) == (0.2, 2, True)
    assert train.report_to == ["tensorboard"]
    assert train.bf16 is False and train.tf32 is engines._cuda_supports_tf32()  # TF32 where the GPU has it


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
        parse("--prompts_per_step", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2")
    *_, train = parse("--prompts_per_step", "0", "--per_device_train_batch_size", "4",
                      "--gradient_accumulation_steps", "2")
    assert train.gradient_accumulation_steps == 2


def test_trls_batch_flags_given_without_prompts_per_step_are_used_as_trl_uses_them(monkeypatch):
    """`trl grpo` and TRL's PPO take these flags as they are: so does a YAML written for them, run here."""
    on_a_gpu(monkeypatch, gpu=False)
    *_, train = parse("--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2")
    assert (train.prompts_per_step, train.gradient_accumulation_steps, train.generation_batch_size) == (0, 2, 8)
    *_, train = parse("--per_device_train_batch_size", "4", "--steps_per_generation", "3")
    assert (train.prompts_per_step, train.gradient_accumulation_steps, train.generation_batch_size) == (0, 1, 12)
    assert parse()[-1].prompts_per_step == 4
    ppo = ppo_parse("--num_mini_batches", "3", "--per_device_train_batch_size", "2")
    assert (ppo.prompts_per_rollout, ppo.num_mini_batches) == (6, 3)


def test_use_peft_and_the_older_use_lora_spelled_with_dash_or_underscore():
    for flag in ("--use_peft", "--use-peft", "--use-lora", "--use_lora"):
        assert parse(flag)[0].use_peft is True
    assert parse()[0].use_peft is False


def test_yaml_overrides_defaults_and_flags_override_yaml(tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text("learning_rate: 1.0e-6\nbeta: 0.1\nmax_samples: 50\nuse_peft: true\n")
    model, data, _, train = parse("--config", str(config), "--beta", "0.2")
    assert train.learning_rate == 1e-6
    assert train.beta == 0.2
    assert data.max_samples == 50
    assert model.use_peft is True


def test_yaml_keys_may_be_spelled_with_dashes_like_flags(tmp_path):
    config = tmp_path / "grpo.yaml"
    config.write_text("use-lora: true\nlearning-rate: 2.0e-6\nmax_steps: 7\n")
    model, _, _, train = parse("--config", str(config))
    assert model.use_peft is True and train.learning_rate == 2e-6 and train.max_steps == 7


def test_help_lists_the_package_flags_first_in_groups_then_every_flag_by_argument_class():
    from rlhf.cli import HELP_GROUPS, SUMMARY_TITLE, Parser

    text = Parser(GRPO_TYPES, description="Usage:\n\n    python train_grpo.py --use_peft\n").parser.format_help()
    assert "\n    python train_grpo.py --use_peft\n" in text  # examples keep their lines
    summary = text[text.index(SUMMARY_TITLE):text.index("\noptions:\n")]
    positions = [summary.index(f"\n  {title}:") for title in HELP_GROUPS if title != "Output"]
    assert positions == sorted(positions)
    for flag in ("--use_peft", "--dataset_train_split", "--reward_model_name_or_path", "--prompts_per_step", "--beta"):
        assert flag in summary
    assert "--adam_beta1" not in summary and "--adam_beta1" in text
    titles = ("Model and LoRA (TRL's ModelConfig)", "Data (TRL's ScriptArguments)", "Reward",
              "Training (TRL's GRPOConfig and transformers' TrainingArguments)")
    groups = [text.index(f"\n{title}:\n") for title in titles]
    assert groups == sorted(groups)


def test_ppos_help_names_its_critic_flags_first_and_a_derived_default_once():
    import re

    from rlhf.cli import SUMMARY_TITLE, Parser

    text = Parser(PPO_TYPES).parser.format_help()
    summary = text[text.index(SUMMARY_TITLE):text.index("\noptions:\n")]
    assert "--critic_warmup" in summary and "--value_lam" in summary
    entry = " ".join(re.search(r"\n  --value_lam VALUE_LAM.*?\n(.*?)\n  --", text, re.DOTALL).group(1).split())
    assert entry.endswith("Default: --lam.") and "(default: None)" not in entry, entry
    assert "(default: 0.95)" in text  # a plain default is still shown (--lam)


@pytest.mark.parametrize("args, values", [(["foo"], "argument 'foo'"),
                                          (["--max_steps", "2", "foo", "bar"], "arguments 'foo', 'bar'")])
def test_a_value_without_a_flag_is_one_line_naming_it_and_the_fix(args, values):
    with pytest.raises(UserError) as refused:
        parse(*args)
    message = str(refused.value)
    assert message.startswith(f"unexpected {values}: these scripts take no positional arguments")
    assert "give each value after the flag it sets" in message and "HfArgumentParser" not in message


def test_help_says_a_negated_flag_turns_its_option_off(tmp_path):
    import re

    from rlhf.cli import Parser

    text = Parser(GRPO_TYPES).parser.format_help()
    entry = re.search(r"\n  --no_gradient_checkpointing, --no-gradient-checkpointing\n(.*?)\n  --", text, re.DOTALL)
    entry = " ".join(entry.group(1).split())
    assert not entry.startswith("Enable") and "--gradient_checkpointing false" in entry, entry
    assert "defaults to True" in entry and "(default: False)" not in entry, entry
    assert "--gradient_checkpointing [GRADIENT_CHECKPOINTING]" in text and "Enable gradient checkpointing" in text
    # Parsing is unchanged: on by default, off with the negated flag or with `false` from a flag or YAML.
    assert parse()[3].gradient_checkpointing is True
    assert parse("--no_gradient_checkpointing")[3].gradient_checkpointing is False
    config = tmp_path / "grpo.yaml"
    config.write_text("gradient_checkpointing: false\n")
    assert parse("--config", str(config))[3].gradient_checkpointing is False


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
    with pytest.raises(UserError, match="--num_generations must be >= 2, got 1"):
        parse("--num_generations", "1", "--prompts_per_step", "0")
    with pytest.raises(UserError, match="argument --max_steps/--max-steps: invalid int value: 'ten'"):
        parse("--max_steps", "ten")


@pytest.mark.parametrize("script, flags, message", [
    ("grpo", ["--max_completion_length", "0"], "--max_completion_length must be >= 1, got 0"),
    ("grpo", ["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be >= 1, got 0"),
    ("grpo", ["--use_peft", "--lora_r", "0"], "--lora_r must be >= 1, got 0"),
    ("grpo", ["--lora_dropout", "1"], "--lora_dropout must be in [0, 1)"),
    ("grpo", ["--max_samples", "-5"], "--max_samples must be >= 0, got -5"),
    ("grpo", ["--max_prompt_length", "0"], "--max_prompt_length must be >= 1, got 0"),
    ("grpo", ["--top_p", "0"], "--top_p must be in (0, 1]"),
    ("grpo", ["--num_train_epochs", "0"], "--num_train_epochs must be > 0"),
    ("grpo", ["--save_steps", "0"], "--save_steps must be > 0"),
    ("grpo", ["--max_steps", "0"], "--max_steps must be >= 1 (or -1"),
    ("grpo", ["--load_in_4bit"], "add --use_peft"),
    ("grpo", ["--load_in_8bit"], "add --use_peft"),
    ("grpo", ["--dataset_config", "main"], "--dataset_config main is not supported"),
    # each trainer checks its own fields (RunDefaults only those all three share)
    ("grpo", ["--epsilon", "-0.2"], "--epsilon must be > 0, got -0.2"),
    ("grpo", ["--missing_eos_penalty", "-1"], "--missing_eos_penalty must be >= 0 and finite"),
    ("grpo", ["--missing_eos_penalty", "inf"], "--missing_eos_penalty must be >= 0 and finite"),
    ("ppo", ["--missing_eos_penalty", "-0.5"], "--missing_eos_penalty must be >= 0 and finite"),
    ("ppo", ["--missing_eos_penalty", "nan"], "--missing_eos_penalty must be >= 0 and finite"),
    ("grpo", ["--top_k", "-1"], "--top_k must be >= 0, got -1"),
    ("grpo", ["--kl_horizon", "0"], "--kl_horizon must be >= 1, got 0"),
    ("grpo", ["--temperature", "0"], "--temperature must be > 0"),
    ("grpo", ["--prompts_per_step", "0", "--steps_per_generation", "0"], "--steps_per_generation must be >= 1, got 0"),
    ("ppo", ["--stop_token", "bos"], "--stop_token bos is not supported; use eos, or none with --stop_token_id"),
    ("ppo", ["--stop_token_id", "2"], "--stop_token eos and --stop_token_id 2 both set where completions end"),
    ("ppo", ["--num_mini_batches", "0"], "--num_mini_batches must be >= 1, got 0"),
    ("ppo", ["--local_rollout_forward_batch_size", "0"], "--local_rollout_forward_batch_size must be >= 1, got 0"),
    ("grpo", ["--model_revision", "v2"], "--model_revision v2 is not supported"),
    ("ppo", ["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be >= 1, got 0"),
    ("ppo", ["--max_completion_length", "0"], "--max_completion_length must be >= 1, got 0"),
    ("ppo", ["--num_ppo_epochs", "0"], "--num_ppo_epochs must be >= 1, got 0"),
    ("ppo", ["--total_episodes", "0"], "--total_episodes must be >= 1, got 0"),
    ("ppo", ["--kl_horizon", "0"], "--kl_horizon must be >= 1, got 0"),
    ("ppo", ["--top_p", "1.5"], "--top_p must be in (0, 1]"),
    ("ppo", ["--temperature", "0"], "--temperature must be > 0"),
    ("reward", ["--eval_samples", "-5"], "--eval_samples must be >= 0, got -5"),
    ("reward", ["--max_length", "0"], "--max_length must be >= 1, got 0"),
    ("evaluate", ["--num_prompts", "0"], "--num_prompts must be >= 1, got 0"),
    ("evaluate", ["--train_samples", "-1"], "--train_samples must be >= 0, got -1"),
])
def test_sizes_lengths_ranks_and_counts_below_their_minimum_are_refused(script, flags, message):
    from config import (
        EvalArguments,
        PPOModelArguments,
        PPOTrainingConfig,
        PreferenceDataArguments,
        RewardArguments,
        RewardTrainingConfig,
    )

    types = {"grpo": GRPO_TYPES, "ppo": (PPOModelArguments, PromptDataArguments, PPOTrainingConfig),
             "reward": (ModelArguments, PreferenceDataArguments, RewardTrainingConfig),
             "evaluate": (EvalArguments, RewardArguments)}[script]
    with pytest.raises(UserError) as error:
        parse_args(types, flags)
    assert message in str(error.value)


def test_ppo_completions_end_at_eos_or_at_a_stop_token_id_given_with_stop_token_none():
    from config import PPOModelArguments, PPOTrainingConfig

    ppo_types = (PPOModelArguments, PromptDataArguments, PPOTrainingConfig)
    ppo = parse_args(ppo_types, ["--stop_token", "none", "--stop_token_id", "2"])[-1]
    assert (ppo.stop_token, ppo.stop_token_id, ppo.missing_eos_penalty) == (None, 2, 1.0)
    assert parse_args(ppo_types, [])[-1].stop_token == "eos"


def test_ppo_without_any_stop_token_drops_the_missing_eos_penalty_and_says_so(capsys):
    """No completion can end: the penalty would only lower every score alike."""
    from config import PPOModelArguments, PPOTrainingConfig

    capsys.readouterr()
    ppo = parse_args((PPOModelArguments, PromptDataArguments, PPOTrainingConfig), ["--stop_token", "none"])[-1]
    assert ppo.missing_eos_penalty is None
    assert capsys.readouterr().out.splitlines() == [
        "note: --missing_eos_penalty 1.0 -> None (--stop_token none without --stop_token_id: completions run to "
        "--max_completion_length, none can end before it)"]


def test_ppo_config_defaults_and_checks():
    from config import PPOModelArguments, PPOTrainingConfig

    ppo_types = (PPOModelArguments, PromptDataArguments, PPOTrainingConfig)
    *_, ppo = parse_args(ppo_types, [])
    assert (ppo.per_device_train_batch_size, ppo.num_ppo_epochs, ppo.kl_coef) == (4, 4, 0.05)
    assert (ppo.gamma, ppo.lam, ppo.cliprange, ppo.learning_rate, ppo.temperature) == (1.0, 0.95, 0.2, 5e-6, 0.7)
    assert ppo.top_p == 1.0 and parse_args(ppo_types, ["--top_p", "0.9"])[-1].top_p == 0.9  # TRL's PPO samples at 1.0
    assert ppo.response_length == ppo.max_completion_length == 256
    assert ppo.output_dir == "./ppo_training_output" and ppo.reward_model_name_or_path == "./reward_model_output"
    assert ppo.stop_token == "eos" and ppo.missing_eos_penalty == 1.0 and ppo.target_kl is None
    assert parse_args(ppo_types, ["--response_length", "64"])[-1].max_completion_length == 64
    with pytest.raises(UserError, match="--target_kl must be > 0"):
        parse_args(ppo_types, ["--target_kl", "0"])
    with pytest.raises(UserError, match="--target_kl adapts --kl_coef, which is 0 here"):
        parse_args(ppo_types, ["--kl_coef", "0", "--target_kl", "6"])


def test_ppo_max_steps_counts_rollouts_and_total_episodes_is_whole_rollouts_said_where_rounded(capsys):
    from config import PPOModelArguments, PPOTrainingConfig

    ppo_types = (PPOModelArguments, PromptDataArguments, PPOTrainingConfig)
    ppo = parse_args(ppo_types, ["--max_steps", "3", "--prompts_per_rollout", "8"])[-1]
    assert (ppo.max_steps, ppo.total_episodes) == (3, 24)
    assert parse_args(ppo_types, ["--total_episodes", "16", "--prompts_per_rollout", "8"])[-1].total_episodes == 16
    assert "note:" not in capsys.readouterr().out  # a whole number of rollouts: nothing to say
    assert parse_args(ppo_types, ["--total_episodes", "2", "--prompts_per_rollout", "8"])[-1].total_episodes == 8
    assert capsys.readouterr().out == ("note: --total_episodes 2 -> 8 (whole rollouts: 1 rollout of "
                                       "--prompts_per_rollout 8)\n")
    with pytest.raises(UserError, match="--max_steps 3 .* and --total_episodes 16 both set how long PPO trains"):
        parse_args(ppo_types, ["--max_steps", "3", "--total_episodes", "16", "--prompts_per_rollout", "8"])
    assert parse_args(ppo_types, [])[-1].total_episodes is None  # --num_train_epochs decides


@pytest.mark.parametrize("flag, value", [("eval_steps", "10"), ("eval_completions", "4"),
                                         ("eval_dataset_name", "data/math_test.jsonl")])
def test_a_held_out_evaluation_flag_without_eval_prompts_is_said_to_do_nothing(capsys, flag, value):
    from config import PPOModelArguments

    for types in (GRPO_TYPES, (PPOModelArguments, PromptDataArguments, PPOTrainingConfig)):
        parse_args(types, [f"--{flag}", value])
        assert capsys.readouterr().out == (f"note: --{flag} does nothing without --eval_prompts N: the held-out "
                                           "evaluation is off (--eval_prompts 0)\n")
        parse_args(types, [f"--{flag}", value, "--eval_prompts", "8", "--save_steps", "10"])
        assert "note:" not in capsys.readouterr().out  # on: nothing to say


def test_eval_steps_of_the_reward_model_is_said_to_do_nothing(capsys):
    from config import PreferenceDataArguments, RewardTrainingConfig

    parse_args((ModelArguments, PreferenceDataArguments, RewardTrainingConfig), ["--eval_steps", "10"])
    assert capsys.readouterr().out == ("note: --eval_steps does nothing in train_reward_model.py: the held-out pairs "
                                       "(--eval_samples) are scored once, after training\n")


def test_frozen_reward_model_dtype_is_bfloat16_on_a_gpu_unless_set():
    assert reward_model_dtype("auto", "float32", on_gpu=True) == "bfloat16"
    assert reward_model_dtype("auto", "float32", on_gpu=False) == "float32"  # CPU: the policy's dtype
    assert reward_model_dtype("float32", "float32", on_gpu=True) == "float32"
    with pytest.raises(UserError, match="--reward_model_dtype float8"):
        reward_model_dtype("float8", "float32", on_gpu=False)


@pytest.mark.parametrize("name", ["grpo", "grpo_math_long", "ppo", "reward_model"])
def test_the_shipped_example_configs_parse_and_set_what_they_say_without_a_note_about_themselves(name, capsys):
    import yaml

    from config import PPOModelArguments, PPOTrainingConfig, PreferenceDataArguments, RewardTrainingConfig
    from conftest import ROOT

    types = {"grpo": GRPO_TYPES, "grpo_math_long": GRPO_TYPES,
             "ppo": (PPOModelArguments, PromptDataArguments, PPOTrainingConfig),
             "reward_model": (ModelArguments, PreferenceDataArguments, RewardTrainingConfig)}[name]
    path = ROOT / "configs" / f"{name}.yaml"
    parsed = {key: value for config in parse_args(types, ["--config", str(path)])
              for key, value in vars(config).items()}
    for key, value in yaml.safe_load(path.read_text()).items():
        assert parsed[key.replace("-", "_")] == value, key
    # a config we ship sets nothing that does nothing (grpo.yaml's lora_r and lora_alpha without use_peft did)
    assert "note:" not in capsys.readouterr().out


def test_grpo_samples_from_the_whole_distribution_its_loss_uses_while_evaluation_keeps_top_p_0_9():
    from config import EvalArguments

    *_, train = parse()
    assert (train.temperature, train.top_p) == (0.7, 1.0)  # the log-probs, ratio and KL are on the full softmax
    assert parse("--top_p", "0.95")[-1].top_p == 0.95
    evaluation, _ = parse_args((EvalArguments, RewardArguments), [])
    assert (evaluation.temperature, evaluation.top_p) == (0.7, 0.9)


def test_evaluation_takes_the_training_scripts_names_for_the_same_things(tmp_path):
    from config import EvalArguments

    config = tmp_path / "eval.yaml"
    config.write_text("model-name-or-path: [a, b]\nsystem_prompt: Be brief.\n")
    args, _ = parse_args((EvalArguments, RewardArguments), ["--config", str(config), "--top_p", "0.5"])
    assert args.model_path == ["a", "b"] and args.system_prompt == "Be brief." and args.top_p == 0.5
    assert parse_args((EvalArguments, RewardArguments), ["--model_name_or_path", "c"])[0].model_path == ["c"]
    with pytest.raises(UserError, match="--top_p must be in"):
        parse_args((EvalArguments, RewardArguments), ["--top_p", "2"])


@pytest.mark.slow
def test_the_configs_import_no_trainer_and_the_package_imports_no_top_level_module():
    import ast
    import subprocess
    import sys

    from conftest import ROOT

    # config.py holds every script's config, TRL's config classes under them, and no trainer (PPO's loop, TRL's).
    code = ("import sys, config; print(sorted(name for name in sys.modules if name in ('rlhf.ppo.trainer', "
            "'rlhf.ppo.maths', 'rlhf.ppo.models') or name.startswith('trl.trainer.grpo_trainer')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
    top_level = {path.stem for path in ROOT.glob("*.py")}
    for path in (ROOT / "rlhf").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            assert not {name.split(".")[0] for name in names} & top_level, f"{path} imports {names}"


def on_a_gpu(monkeypatch, gpu=True):
    """Resolve the defaults as on an Ampere-or-newer CUDA GPU (or, gpu=False, on a CPU), whatever this machine is."""
    import transformers.training_args

    from rlhf import processes

    monkeypatch.setattr(processes, "cuda_available", lambda: gpu)
    monkeypatch.setattr(engines, "_cuda_supports_tf32", lambda: gpu)
    monkeypatch.setattr(transformers.training_args, "is_torch_tf32_available", lambda: gpu)
    monkeypatch.setattr(transformers.training_args, "enable_tf32", lambda enable: None)


def ppo_parse(*args):
    from config import PPOModelArguments, PPOTrainingConfig

    return parse_args((PPOModelArguments, PromptDataArguments, PPOTrainingConfig), list(args))[-1]


def test_on_a_gpu_generation_is_batched_over_steps_and_matmuls_use_tf32(monkeypatch):
    on_a_gpu(monkeypatch)
    *_, train = parse()
    # 64 prompts x 4 completions generated at once, then 16 optimizer steps of 4 prompts x 4 completions.
    assert (train.prompts_per_generation, train.generation_batch_size, train.steps_per_generation) == (64, 256, 16)
    assert train.per_device_train_batch_size * train.gradient_accumulation_steps == 16
    assert (train.bf16, train.tf32) == (False, True)
    ppo = ppo_parse()
    # 64 prompts per rollout, trained on in 16 mini-batches of the 4 prompts of one optimizer step.
    assert (ppo.prompts_per_rollout, ppo.num_mini_batches, ppo.per_device_train_batch_size) == (64, 16, 4)
    assert ppo.local_rollout_forward_batch_size is None  # sized by the trainer from the GPU's memory


def test_on_a_gpu_the_default_generation_is_whole_steps_whatever_a_step_holds(monkeypatch):
    # rlhf.engines.resolve_machine sizes it before the configs are built (48 prompts a step: 96, a whole two steps;
    # max(64, 48) was refused as not a multiple of 48). Given, or with TRL's --num_mini_batches, it is left alone.
    on_a_gpu(monkeypatch)
    *_, train = parse("--prompts_per_step", "48", "--num_generations", "2")
    # 96 completions a step in 6 passes of 16: a generation serves 2 steps, 12 passes (TRL's steps_per_generation)
    assert (train.prompts_per_generation, train.gradient_accumulation_steps, train.steps_per_generation) == (96, 6, 12)
    assert parse("--prompts_per_step", "48", "--prompts_per_generation", "48")[-1].prompts_per_generation == 48
    assert parse("--prompts_per_step", "0", "--gradient_accumulation_steps", "2")[-1].prompts_per_generation is None
    ppo = ppo_parse("--per_device_train_batch_size", "48")
    assert (ppo.prompts_per_rollout, ppo.num_mini_batches) == (96, 2)
    assert ppo_parse("--num_mini_batches", "2").prompts_per_rollout == 8  # TRL's flag: 2 mini-batches of 4
    assert ppo_parse("--prompts_per_rollout", "8").prompts_per_rollout == 8


def test_on_a_cpu_each_step_generates_its_own_prompts(monkeypatch):
    on_a_gpu(monkeypatch, gpu=False)
    *_, train = parse()
    assert (train.prompts_per_generation, train.generation_batch_size, train.steps_per_generation) == (4, 16, 1)
    assert (train.bf16, train.tf32) == (False, False)
    ppo = ppo_parse()
    assert (ppo.prompts_per_rollout, ppo.num_mini_batches) == (4, 1)


def test_generation_and_rollout_sizes_that_cannot_work_are_refused(monkeypatch):
    on_a_gpu(monkeypatch, gpu=False)
    *_, train = parse("--prompts_per_generation", "12", "--per_device_train_batch_size", "4")
    assert (train.generation_batch_size, train.steps_per_generation, train.gradient_accumulation_steps) == (48, 12, 4)
    with pytest.raises(UserError, match="--prompts_per_generation 6 is not a multiple of --prompts_per_step 4"):
        parse("--prompts_per_generation", "6")
    assert ppo_parse("--prompts_per_rollout", "32", "--per_device_train_batch_size", "8").num_mini_batches == 4
    with pytest.raises(UserError, match="--prompts_per_rollout 6 is not a multiple of the 4 prompts"):
        ppo_parse("--prompts_per_rollout", "6")
    with pytest.raises(UserError, match="--num_mini_batches 3 conflicts"):
        ppo_parse("--prompts_per_rollout", "16", "--num_mini_batches", "3")


def test_lora_target_modules_as_a_yaml_scalar_is_a_list_and_all_linear_reaches_peft_as_peft_spells_it(tmp_path):
    from rlhf.models import peft_config

    config = tmp_path / "lora.yaml"
    config.write_text("use_peft: true\nlora_target_modules: q_proj\n")
    assert parse("--config", str(config))[0].lora_target_modules == ["q_proj"]
    assert peft_config(parse("--config", str(config))[0]).target_modules == {"q_proj"}  # a string: a pattern
    config.write_text("use_peft: true\nlora_target_modules: all-linear\n")
    model = parse("--config", str(config))[0]
    assert peft_config(model).target_modules == "all-linear"  # ['all-linear'] would be a module called so
    assert peft_config(parse("--use_peft", "--lora_target_modules", "all-linear")[0]).target_modules == "all-linear"
    assert parse("--lora_target_modules", "q_proj,v_proj")[0].lora_target_modules == ["q_proj", "v_proj"]


def save_in_bfloat16(source, path):
    """A copy of a tiny model saved in bfloat16 (its config.json then says "dtype": "bfloat16")."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    causal = AutoConfig.from_pretrained(source).architectures[0].endswith("ForCausalLM")
    auto = AutoModelForCausalLM if causal else AutoModelForSequenceClassification
    auto.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(path)
    AutoTokenizer.from_pretrained(source).save_pretrained(path)
    return path


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "train_reward_model.py"])
def test_dtype_auto_on_a_bfloat16_checkpoint_is_refused_like_dtype_bfloat16(tiny_models, tmp_path, run_cli, script):
    from conftest import error_line

    policy = save_in_bfloat16(tiny_models["policy"], tmp_path / "bf16_policy")
    args = ["--model_name_or_path", policy, "--dataset_name", tiny_models["prompts"], "--output_dir", tmp_path / "out",
            "--dtype", "auto"]
    if script != "train_reward_model.py":
        args += ["--reward_model_path", tiny_models["reward_model"]]
    line = error_line(run_cli(script, *args))
    assert "--dtype auto (the checkpoint's bfloat16) would train bfloat16 weights" in line
    assert "--allow_half_precision_weights" in line
    assert not (tmp_path / "out").exists()


def test_the_checkpoint_dtype_is_read_from_its_config_without_loading_it(tiny_models, tmp_path):
    import json
    import shutil

    from rlhf.models import checkpoint_dtype, resolve_dtype

    assert checkpoint_dtype(tiny_models["policy"]) == "float32"
    old = tmp_path / "old"
    shutil.copytree(tiny_models["policy"], old)
    config = json.loads((old / "config.json").read_text())
    config.pop("dtype")
    (old / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    (old / "model.safetensors").unlink()  # nothing is loaded
    assert resolve_dtype("auto", old) == "bfloat16"  # transformers 4 wrote torch_dtype
    assert resolve_dtype("float16", old) == "float16"
    (old / "config.json").write_text(json.dumps(config))
    assert checkpoint_dtype(old) == "float32"  # none named: transformers loads float32
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(old)}))
    assert checkpoint_dtype(adapter) == "float32"


def trl_grpo_yaml(models, path, output_dir):
    """A YAML in `trl grpo`'s vocabulary (TRL's ScriptArguments, ModelConfig, GRPOConfig keys) on the tiny models."""
    import yaml

    config = {"model_name_or_path": str(models["policy"]), "dataset_name": str(models["prompts"]),
              "dataset_train_split": "train", "reward_model_name_or_path": str(models["reward_model"]),
              "use_peft": True, "lora_r": 8, "lora_alpha": 16, "lora_target_modules": ["q_proj", "v_proj"],
              "learning_rate": 1.0e-4, "lr_scheduler_type": "constant", "max_steps": 2,
              "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 2,
              "max_completion_length": 8, "logging_steps": 1,
              "save_steps": 2, "seed": 0, "bf16": False, "output_dir": str(output_dir)}  # bf16: TRL on a CPU
    path.write_text(yaml.safe_dump(config))
    return config


@pytest.mark.slow
def test_a_yaml_written_for_trl_grpo_runs_unchanged_with_train_grpo(tiny_models, tmp_path):
    import json

    from trl.scripts.grpo import make_parser

    from conftest import assert_ok, run_in_process

    path = tmp_path / "trl_grpo.yaml"
    config = trl_grpo_yaml(tiny_models, path, tmp_path / "out")
    # TRL's own parser (the one `trl grpo` uses) takes every key: the file is TRL's.
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(["--config", str(path)])
    assert (script_args.reward_model_name_or_path, model_args.use_peft, training_args.max_steps) == (
        config["reward_model_name_or_path"], True, 2)

    result = run_in_process("train_grpo.py", "--config", path)
    assert_ok(result)
    adapter = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], sorted(adapter["target_modules"])) == (8, 16, ["q_proj", "v_proj"])
    state = json.loads((tmp_path / "out" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["log_history"][0]["learning_rate"] == 1e-4
    # TRL's batch: 4 completions per pass x 2 passes = 8 completions (4 prompts x 2) per optimizer step.
    settings = json.loads((tmp_path / "out" / "run_manifest.json").read_text())["config"]["GRPOTrainingConfig"]
    assert (settings["gradient_accumulation_steps"], settings["generation_batch_size"]) == (2, 8)


@pytest.mark.parametrize("script, trl_names, older_names", [
    ("grpo", ["--use_peft", "--dataset_train_split", "test", "--reward_model_name_or_path", "rm"],
     ["--use-lora", "--dataset_split", "test", "--reward_model_path", "rm"]),
    ("grpo", ["--use_peft"], ["--use_lora"]),
    ("ppo", ["--model_name_or_path", "m", "--max_completion_length", "64", "--reward_model_name_or_path", "rm"],
     ["--sft_model_path", "m", "--response_length", "64", "--reward_model_path", "rm"]),
    ("evaluate", ["--model_path", "a", "b", "--dataset_train_split", "test"],
     ["--model-path", "a", "b", "--dataset_split", "test"]),
    ("evaluate", ["--model_path", "a"], ["--model_name_or_path", "a"]),
])
def test_the_older_spellings_set_what_trl_names_set_as_flags_and_yaml_keys(script, trl_names, older_names, tmp_path):
    import yaml

    from config import EvalArguments, PPOModelArguments, PPOTrainingConfig

    types = {"grpo": GRPO_TYPES, "ppo": (PPOModelArguments, PromptDataArguments, PPOTrainingConfig),
             "evaluate": (EvalArguments, RewardArguments)}[script]

    def parsed(flags):  # every field (the TrainingArguments' accelerate state is an object of its own each time)
        return [{key: value for key, value in vars(config).items() if key != "distributed_state"}
                for config in parse_args(types, flags)]

    def as_yaml(flags):
        keys, values = {}, None
        for flag in flags:
            if flag.startswith("--"):
                values = keys.setdefault(flag[2:], [])
            else:
                values.append(flag)
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump({key: v[0] if len(v) == 1 else v or True for key, v in keys.items()}))
        return ["--config", str(path)]

    expected = parsed(trl_names)
    assert expected != parsed([])
    assert parsed(older_names) == expected
    assert parsed(as_yaml(older_names)) == expected == parsed(as_yaml(trl_names))


def test_every_value_changed_on_the_users_behalf_is_said_in_one_line(monkeypatch, capsys, tmp_path):
    on_a_gpu(monkeypatch, gpu=False)

    def notes(*flags, types=GRPO_TYPES):
        parse_args(types, list(flags))
        return capsys.readouterr().out.splitlines()

    small = ["--prompts_per_step", "2", "--num_generations", "2"]
    assert notes(*small, "--per_device_train_batch_size", "16", "--dataloader_pin_memory", "true") == [
        "note: --per_device_train_batch_size 16 -> 4 (one optimizer step's share per process)",
        "note: --dataloader_pin_memory true -> false (pinned memory helps a GPU only, and there is none)",
    ]
    assert notes("--prompts_per_step", "4", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps",
                 "1", "--generation_batch_size", "32") == [
        "note: --gradient_accumulation_steps 1 -> 4 (derived from --prompts_per_step)",
        "note: --generation_batch_size 32 -> 16 (derived from --prompts_per_generation x --num_generations; pass "
        "--prompts_per_step 0 to set it)",
    ]
    yaml_file = tmp_path / "grpo.yaml"
    yaml_file.write_text("prompts_per_step: 2\nnum_generations: 2\nper_device_train_batch_size: 16\n")
    assert notes("--config", str(yaml_file)) == [notes(*small, "--per_device_train_batch_size", "16")[0]]
    # What the package resolves from its own defaults is no news: the default 16 completions per pass, capped.
    assert notes() == notes(*small) == notes("--prompts_per_step", "0") == []
    assert notes("--reward_funcs", "boxed_format", "--reward_model_path", "rm") == [
        "note: --reward_model_name_or_path rm is not used: --reward_funcs has no reward_model (add it to score with "
        "the model too)"]
    assert notes("--reward_funcs", "boxed_format") == []
    ppo = (ModelArguments, PromptDataArguments, PPOTrainingConfig)
    assert notes("--num_mini_batches", "1", "--prompts_per_rollout", "8", "--per_device_train_batch_size", "2",
                 types=ppo) == ["note: --num_mini_batches 1 -> 4 (derived from --prompts_per_rollout)"]
    # Several processes on a CPU: said although the user set nothing; once, by the main process.
    monkeypatch.setattr("rlhf.processes.launched_processes", lambda: 2)  # (WORLD_SIZE=2 would start a process group)
    assert notes() == [
        "note: --use_cpu false -> true (several processes and no GPU: each trains its share on the CPU)"]
    import rlhf.cli

    monkeypatch.setattr(rlhf.cli, "is_main_process", lambda: False)  # another process of the launch says nothing
    assert notes() == []


def test_trl_model_and_data_fields_this_package_does_not_implement_are_refused_not_ignored(tiny_models, tmp_path,
                                                                                         run_cli):
    from conftest import error_line, grpo_args
    from rlhf.models import trained_model_kwargs

    config = tmp_path / "mixture.yaml"
    config.write_text("datasets:\n  - path: trl-lib/tldr\n")
    with pytest.raises(UserError, match="datasets in .*: TRL's dataset mixtures are not supported; give one dataset"):
        parse("--config", str(config))
    with pytest.raises(UserError, match="--dataset_streaming is not supported"):
        parse("--dataset_streaming")
    line = error_line(run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--use_peft",
                              "--lora_task_type", "SEQ_CLS"))
    assert "--lora_task_type SEQ_CLS does not fit this script, which trains a CAUSAL_LM model" in line
    assert not (tmp_path / "out").exists()
    # What TRL's ModelConfig says about loading reaches from_pretrained.
    assert trained_model_kwargs(parse("--attn_implementation", "eager")[0])["attn_implementation"] == "eager"
    assert "attn_implementation" not in trained_model_kwargs(parse()[0])


def test_building_each_config_reads_no_machine_or_package_and_prints_nothing(monkeypatch, capsys):
    """config.py declares, checks and translates its own batch flags; the parser settles the rest (`rlhf.cli._settle`,
    `rlhf.engines`). Of the launch a config reads its process count alone, as TRL's configs read `world_size`."""
    import ast
    import inspect

    import transformers.integrations.integration_utils as integrations

    import config
    from rlhf import processes

    def refuse(*args):
        raise AssertionError("a config read the machine, the installed packages or the launch beyond its processes")

    for name in ("process_index", "cuda_available", "on_gpu", "launched_engine"):
        monkeypatch.setattr(processes, name, refuse)
    monkeypatch.setattr(processes, "launched_processes", lambda: 1)  # one process, as TRL's world_size here
    monkeypatch.setattr(engines, "_bf16_available", refuse)
    monkeypatch.setattr(integrations, "get_available_reporting_integrations", refuse)
    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(config)))
                if isinstance(node, ast.ImportFrom)}
    assert not imported & {"rlhf.cli", "rlhf.engines"}
    # Values the parser says a note about: here they are translated as the same flags are, unsaid.
    built = [
        config.ModelArguments(lora_r=8), config.PPOModelArguments(), config.PromptDataArguments(),
        config.PreferenceDataArguments(), config.RewardArguments(reward_funcs=["boxed_format"]),
        config.EvalArguments(), config.RewardTrainingConfig(report_to="wandb"),
        config.GRPOTrainingConfig(gradient_accumulation_steps=4, eval_prompts=4, save_total_limit=1),
        config.PPOTrainingConfig(prompts_per_rollout=8, per_device_train_batch_size=2, eval_prompts=4,
                                 save_total_limit=1),
    ]
    assert capsys.readouterr().out == ""
    grpo, ppo = built[-2], built[-1]
    # TRL's batch flags given: used as they are (prompts_per_step 0)
    assert (grpo.prompts_per_step, grpo.per_device_train_batch_size, grpo.gradient_accumulation_steps) == (0, 16, 4)
    assert grpo.generation_batch_size == 64  # TRL's own derivation: 16 x 4 completions
    assert (ppo.num_mini_batches, grpo.save_total_limit, grpo.eval_steps) == (4, 1, 50)  # 8 prompts / 2 per step


# Flags and the same values given to the config in code: each config must mean the same thing both ways.
SAME_BOTH_WAYS = {
    "grpo prompts_per_step": (GRPOTrainingConfig, {"prompts_per_step": 8, "num_generations": 4,
                                                   "per_device_train_batch_size": 8}),
    "grpo a hand-written batch_size": (GRPOTrainingConfig, {"batch_size": 2, "num_generations": 4}),
    "grpo prompts_per_generation": (GRPOTrainingConfig, {"prompts_per_step": 4, "prompts_per_generation": 16}),
    "grpo TRL's flags": (GRPOTrainingConfig, {"gradient_accumulation_steps": 2, "per_device_train_batch_size": 8}),
    "grpo defaults": (GRPOTrainingConfig, {}),
    "ppo prompts_per_rollout": (PPOTrainingConfig, {"prompts_per_rollout": 8, "per_device_train_batch_size": 2}),
    "ppo max_steps": (PPOTrainingConfig, {"max_steps": 3, "prompts_per_rollout": 8, "per_device_train_batch_size": 4}),
    "ppo total_episodes rounded": (PPOTrainingConfig, {"total_episodes": 10, "prompts_per_rollout": 4,
                                                       "per_device_train_batch_size": 2}),
    "ppo TRL's num_mini_batches": (PPOTrainingConfig, {"num_mini_batches": 2, "per_device_train_batch_size": 2}),
}
BATCH_FIELDS = ("prompts_per_step", "batch_size", "prompts_per_generation", "per_device_train_batch_size",
                "gradient_accumulation_steps", "generation_batch_size", "steps_per_generation", "prompts_per_rollout",
                "num_mini_batches", "total_episodes")


@pytest.mark.parametrize("case", SAME_BOTH_WAYS)
def test_a_config_built_in_code_means_what_the_same_flags_mean(case, tmp_path, monkeypatch):
    """GRPOTrainingConfig(prompts_per_step=8, num_generations=4, per_device_train_batch_size=8) among them: 4 passes
    accumulated and 32 completions generated at once, as the flags give (on a CPU: a GPU's default generation sizes
    are the parser's, `rlhf.engines.resolve_machine`)."""
    from rlhf import processes

    monkeypatch.setattr(processes, "on_gpu", lambda use_cpu=False: False)
    config_type, values = SAME_BOTH_WAYS[case]
    types = GRPO_TYPES if config_type is GRPOTrainingConfig else PPO_TYPES
    flags = [item for name, value in values.items() for item in (f"--{name}", str(value))]
    common = {"output_dir": str(tmp_path), "report_to": ["tensorboard"]}
    parsed = parse_args(types, flags + ["--output_dir", str(tmp_path)])[-1]
    built = config_type(**common, **values)
    assert {name: getattr(built, name, None) for name in BATCH_FIELDS} == \
        {name: getattr(parsed, name, None) for name in BATCH_FIELDS}
    if case == "grpo prompts_per_step":
        assert (built.gradient_accumulation_steps, built.generation_batch_size) == (4, 32)


def test_translating_settled_batch_flags_again_changes_nothing():
    """The parser settles the batch flags (`rlhf.cli._settle`), then builds the config, whose `__post_init__`
    translates them again: a no-op."""
    import dataclasses
    from types import SimpleNamespace

    from rlhf.batches import grpo_flags, ppo_flags

    for config_type, translate, given in (
            (GRPOTrainingConfig, grpo_flags, {"prompts_per_step": 8, "per_device_train_batch_size": 8}),
            (GRPOTrainingConfig, grpo_flags, {"batch_size": 2, "gradient_accumulation_steps": 2}),
            (PPOTrainingConfig, ppo_flags, {"prompts_per_rollout": 8, "total_episodes": 10})):
        defaults = {f.name: f.default for f in dataclasses.fields(config_type) if f.default is not dataclasses.MISSING}
        flags = SimpleNamespace(**{**defaults, **given})
        changes, _ = translate(flags, 2)
        for name, value, _ in changes:
            setattr(flags, name, value)
        again, _ = translate(flags, 2)
        assert [change for change in again if getattr(flags, change[0]) != change[1]] == []


def test_each_field_is_declared_once_among_a_configs_own_classes():
    """No default depends on the order of a class's bases: each field this package declares is declared by one of
    its own classes in any config's MRO (TRL's and transformers' declarations are what it overrides)."""
    import dataclasses

    import config

    for cls in vars(config).values():
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == "config"):
            continue
        ours = [base for base in cls.__mro__ if base.__module__ == "config"]
        for name in (field.name for field in dataclasses.fields(cls)):
            owners = [base.__name__ for base in ours if name in vars(base).get("__annotations__", {})]
            assert len(owners) <= 1, f"{cls.__name__}.{name} is declared in {owners}"


def test_dynamic_sampling_flags_are_checked_and_said_to_do_nothing_without_it(capsys):
    grpo = parse_args(GRPO_TYPES, ["--use_dynamic_sampling"])[-1]
    assert (grpo.use_dynamic_sampling, grpo.dynamic_sampling_max_gen_batches, grpo.dynamic_sampling_tolerance) == (
        True, 10, 1e-6)
    for flags, message in [(["--num_generations", "1"], "--num_generations must be >= 2, got 1: " + GROUP_WHY),
                           (["--dynamic_sampling_max_gen_batches", "1"],
                            "--dynamic_sampling_max_gen_batches must be >= 2, got 1: 1 would never draw a "
                            "second batch; give 2 or more, or drop --use_dynamic_sampling"),
                           (["--dynamic_sampling_tolerance", "-0.1"],
                            "--dynamic_sampling_tolerance must be >= 0, got -0.1.")]:
        with pytest.raises(UserError) as error:
            parse_args(GRPO_TYPES, ["--use_dynamic_sampling", *flags])
        assert str(error.value) == message
    assert "note:" not in capsys.readouterr().out
    parse_args(GRPO_TYPES, ["--dynamic_sampling_max_gen_batches", "4"])
    assert capsys.readouterr().out == ("note: --dynamic_sampling_max_gen_batches does nothing without "
                                       "--use_dynamic_sampling: every group drawn is trained on\n")


def test_each_config_names_steps_the_parser_settles_and_each_step_is_named():
    """What the parser settles (`rlhf.cli._settle`) is what the parsed config classes name in `_settled`, never a guess
    from which fields the parsed values have: each name is a step of `rlhf.cli.SETTLE`, and each step is named."""
    import dataclasses

    import config
    from rlhf.cli import SETTLE

    named = {step for cls in vars(config).values() if isinstance(cls, type) and dataclasses.is_dataclass(cls)
             for step in getattr(cls, "_settled", ())}
    assert named == set(SETTLE)
    assert config.PPOModelArguments._settled == config.ModelArguments._settled  # the same LoRA note


def test_the_manifest_records_every_setting_as_it_is_and_hides_the_hubs_token():
    """transformers' `to_dict` masks every `*_token` field ("<STOP_TOKEN>"); the manifest keeps the settings among
    them (PPO's --stop_token, the reward model's --pad_token and --eos_token), which the evaluation and a resume
    read, and hides the Hub's token alone."""
    from config import PreferenceDataArguments, RewardTrainingConfig
    from rlhf.lifecycle.manifest import config_sections, hidden

    runs = ((GRPO_TYPES, [], {}),
            (PPO_TYPES, ["--stop_token", "none", "--stop_token_id", "2"], {"stop_token": None, "stop_token_id": 2}),
            ((ModelArguments, PreferenceDataArguments, RewardTrainingConfig),
             ["--pad_token", "<pad>", "--eos_token", "</s>"], {"pad_token": "<pad>", "eos_token": "</s>"}))
    for types, flags, expected in runs:
        configs = parse_args(types, flags)
        configs[-1].hub_token = "hf_secret"
        sections = config_sections(configs)
        training = sections[type(configs[-1]).__name__]
        masked = {name for values in sections.values() for name, value in values.items() if hidden(name, value)}
        assert masked == {"hub_token"} and {name: training[name] for name in expected} == expected
