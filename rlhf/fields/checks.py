"""The checks config.py's classes run in their `__post_init__`, from the config's own fields.

Each raises ValueError naming the flag, the value and the rule: the parser turns it into one `error:` line. Nothing
here prints or reads the machine or the installed packages; of the launch, `apply_batch_flags` reads the process
count alone, as TRL's configs read `world_size`. `CONFIG_CHECKS` names each class's: the flag tables (`rlhf.flags`)
run them on a script's flags before TRL, transformers and torch load, so that a refused value is said at once.
"""

from rlhf.batches import at_least, grpo_flags, ppo_flags


def check_model(config):
    """`ModelArguments` (after TRL's `ModelConfig` checks its own): LoRA's settings, quantization only with LoRA, no
    Hub revision."""
    # TRL turns a one-name list into a string, and so does a YAML scalar (`lora_target_modules: q_proj`); PEFT would
    # read that string as a pattern for the whole module name. Commas separate names too.
    names = [config.lora_target_modules] if isinstance(config.lora_target_modules, str) else config.lora_target_modules
    config.lora_target_modules = [part for name in names for part in str(name).replace(",", " ").split()]
    at_least(config, 1, "lora_r")
    if not config.lora_target_modules:
        raise ValueError("--lora_target_modules needs a module name (e.g. q_proj v_proj) or all-linear.")
    if config.lora_alpha <= 0:
        raise ValueError(f"--lora_alpha must be > 0, got {config.lora_alpha}.")
    if not 0 <= config.lora_dropout < 1:
        raise ValueError(f"--lora_dropout must be in [0, 1), got {config.lora_dropout}.")
    for bits in ("4bit", "8bit"):
        if getattr(config, f"load_in_{bits}") and not config.use_peft:
            raise ValueError(f"--load_in_{bits} trains a LoRA adapter on frozen {bits[0]}-bit weights (QLoRA); "
                             "add --use_peft.")
    if config.model_revision != "main":
        raise ValueError(f"--model_revision {config.model_revision} is not supported; download that revision "
                         "(huggingface-cli download ID --revision REV --local-dir DIR) and pass the folder.")


def check_dataset_source(config):
    """`DatasetSource`: a dataset and a split named; TRL's fields this package does not implement refused rather than
    ignored."""
    for name in ("dataset_name", "dataset_train_split"):
        if not str(getattr(config, name) or "").strip():
            raise ValueError(f"--{name} is empty; give a value (or drop the flag for its default).")
    if config.dataset_config is not None:
        raise ValueError(f"--dataset_config {config.dataset_config} is not supported; point --dataset_name at a "
                         "local copy of that configuration (a file or a folder).")
    for name in ("dataset_streaming", "ignore_bias_buffers"):
        if getattr(config, name):
            raise ValueError(f"--{name} is not supported by this package; drop it.")


def check_data(config):
    """`DataArguments`: its source, and how many rows are read."""
    check_dataset_source(config)
    at_least(config, 0, "max_samples")


def check_prompt_data(config):
    """`PromptDataArguments` (GRPO, PPO)."""
    check_data(config)
    at_least(config, 1, "max_prompt_length")


def check_preference_data(config):
    """`PreferenceDataArguments` (the reward model)."""
    check_data(config)
    at_least(config, 0, "eval_samples")


def check_evaluation(config):
    """`EvalArguments` (evaluate_generations.py)."""
    check_dataset_source(config)
    check_sampling(config)
    at_least(config, 1, "max_prompt_length", "num_prompts", "num_completions", "max_new_tokens", "batch_size")
    at_least(config, 0, "train_samples")


def check_sampling(config):
    if config.temperature <= 0:
        raise ValueError(f"--temperature must be > 0 for sampling, got {config.temperature}.")
    if not 0 < getattr(config, "top_p", 1) <= 1:
        raise ValueError(f"--top_p must be in (0, 1], got {config.top_p}.")


def apply_batch_flags(config, translate):
    """Set `config`'s batch in TRL's terms, as the parser settles it from the same flags (`translate`:
    `rlhf.batches.grpo_flags` or `ppo_flags`), for the launch's process count (as TRL's configs derive their batches
    from `world_size`). Silent: the parser says each change in a `note:` line. Settled flags stay as they are."""
    from rlhf.processes import launched_processes

    changes, _ = translate(config, launched_processes())
    for name, value, _ in changes:
        setattr(config, name, value)


def check_missing_eos_penalty(config):
    """GRPO's and PPO's --missing_eos_penalty is subtracted from a cut-off completion's reward: a negative one would
    pay running past the length limit, an infinite one make a cut-off completion's reward infinite."""
    penalty = config.missing_eos_penalty
    if penalty is not None and not 0 <= penalty < float("inf"):
        raise ValueError(f"--missing_eos_penalty must be >= 0 and finite (it is subtracted from the reward of a "
                         f"completion cut off before a stop token; a negative one pays running on), got {penalty}.")


def check_training_run(config):
    """The checks of the fields all three training configs have (each config checks its own), before TRL's."""
    if config.learning_rate <= 0:
        raise ValueError(f"--learning_rate must be > 0, got {config.learning_rate}.")
    at_least(config, 1, "per_device_train_batch_size", "gradient_accumulation_steps")
    for name in ("num_train_epochs", "logging_steps", "save_steps"):
        if getattr(config, name) <= 0:
            raise ValueError(f"--{name} must be > 0, got {getattr(config, name)}.")
    if config.max_steps == 0 or config.max_steps < -1:
        raise ValueError(f"--max_steps must be >= 1 (or -1: train --num_train_epochs), got {config.max_steps}.")
    at_least(config, 0, "seed")  # a negative seed fails in numpy
    # These scripts hand the Trainer no evaluation set: --eval_strategy would fail once the models have loaded (the
    # held-out evaluation, --eval_prompts, is the package's own and needs none).
    strategy = getattr(config.eval_strategy, "value", config.eval_strategy)
    if strategy != "no":
        raise ValueError(f"--eval_strategy {strategy} needs an evaluation set, which this script has none of; "
                         "drop it (train_reward_model.py measures held-out accuracy after training).")
    if config.seed >= 2**32:
        raise ValueError(f"--seed must be below 2**32 (numpy's limit), got {config.seed}.")
    if config.output_dir is not None and not str(config.output_dir).strip():
        raise ValueError("--output_dir is empty; give the folder the run writes to.")


def check_held_out(config):
    """The held-out evaluation's checks (GRPO, PPO); --eval_steps follows --save_steps unless given."""
    at_least(config, 0, "eval_prompts")
    at_least(config, 1, "eval_completions")
    if config.load_best_model_at_end:  # transformers' would ask for an evaluation set and eval_strategy steps
        raise ValueError("--load_best_model_at_end needs transformers' own evaluation, which this script has none "
                         "of; use --end_on_best_checkpoint with --eval_prompts (the held-out evaluation names the "
                         "best checkpoint).")
    if not config.eval_prompts:
        if config.end_on_best_checkpoint:
            raise ValueError("--end_on_best_checkpoint needs the held-out evaluation that names the best "
                             "checkpoint; add --eval_prompts N (e.g. 16), or drop it.")
        return
    if config.eval_steps is None:
        config.eval_steps = config.save_steps
    elif config.eval_steps <= 0:
        raise ValueError(f"--eval_steps must be > 0, got {config.eval_steps}.")
    elif config.save_steps >= 1 and config.eval_steps >= 1:
        if config.eval_steps != int(config.eval_steps) or config.save_steps % config.eval_steps:
            raise ValueError(f"--eval_steps {config.eval_steps} does not divide --save_steps {config.save_steps}: "
                             "each checkpoint must hold evaluated weights to be named the best one; pass a "
                             "divisor of it (or drop --eval_steps: it then follows --save_steps).")
    elif config.eval_steps != config.save_steps:
        raise ValueError(f"--eval_steps {config.eval_steps} with --save_steps {config.save_steps}: give both in steps "
                         "(>= 1), eval_steps a divisor of save_steps, or drop --eval_steps (it follows "
                         "--save_steps).")


def check_grpo_config(config):
    """`GRPOTrainingConfig` (before TRL's `GRPOConfig` checks its own and derives its generation batch)."""
    check_grpo(config)
    apply_batch_flags(config, grpo_flags)
    if config.gradient_accumulation_steps is None:  # TRL's batch flags as they are, without it: TrainingArguments' 1
        config.gradient_accumulation_steps = 1
    check_grpo_rewards(config)
    check_held_out(config)
    check_training_run(config)


def check_ppo_config(config):
    """`PPOTrainingConfig` (before transformers' `TrainingArguments` checks its own)."""
    config.response_length = config.max_completion_length  # what TRL's PPOTrainer generates to
    if str(config.stop_token).lower() == "none":  # --stop_token none: completions end at --stop_token_id
        config.stop_token = None
    check_ppo(config)
    apply_batch_flags(config, ppo_flags)
    check_held_out(config)
    check_training_run(config)


def check_reward_config(config):
    """`RewardTrainingConfig` (before TRL's `RewardConfig` checks its own)."""
    at_least(config, 1, "max_length")
    check_training_run(config)


def check_grpo(config):
    """`GRPOTrainingConfig`'s sampling, clip range and adaptive KL, before its batches are translated."""
    check_sampling(config)
    at_least(config, 1, "max_completion_length", "kl_horizon", "steps_per_generation")
    at_least(config, 0, "top_k")  # a negative top_k fails in generation
    if config.epsilon <= 0:  # the clip range: a negative one trains silently
        raise ValueError(f"--epsilon must be > 0, got {config.epsilon}.")
    if config.target_kl is not None and config.target_kl <= 0:
        raise ValueError(f"--target_kl must be > 0 (or unset for a fixed --beta), got {config.target_kl}.")
    if config.target_kl is not None and config.beta == 0:
        raise ValueError("--target_kl adapts --beta, which is 0 here (no reference model, no KL to measure); "
                         "give --beta > 0 (e.g. 0.04) or drop --target_kl.")


def check_grpo_rewards(config):
    """`GRPOTrainingConfig`'s KL coefficient, cut-off penalty and dynamic sampling, once its batches are translated."""
    if config.beta < 0:
        raise ValueError(f"--beta must be >= 0, got {config.beta}.")
    check_missing_eos_penalty(config)
    at_least(config, 2, "dynamic_sampling_max_gen_batches",
             why="1 would never draw a second batch; give 2 or more, or drop --use_dynamic_sampling")
    if not config.dynamic_sampling_tolerance >= 0:
        raise ValueError(f"--dynamic_sampling_tolerance must be >= 0, got {config.dynamic_sampling_tolerance}.")


def check_ppo(config):
    """`PPOTrainingConfig`'s own fields, before its batches are translated."""
    if config.push_to_hub:  # TRL's PPO pushed through transformers' Trainer, which ours is not (saving is its own)
        raise ValueError("--push_to_hub is not supported by train_ppo.py; upload the output folder once it has "
                         "trained: huggingface-cli upload NAME ./ppo_training_output (or your --output_dir).")
    if config.target_kl is not None and config.target_kl <= 0:
        raise ValueError(f"--target_kl must be > 0 (or unset for a fixed kl_coef), got {config.target_kl}.")
    if config.kl_coef < 0:
        raise ValueError(f"--kl_coef must be >= 0, got {config.kl_coef}.")
    for name in ("lam", "value_lam"):
        value = getattr(config, name)
        if value is not None and not 0 <= value <= 1:
            raise ValueError(f"--{name} must be between 0 and 1, got {value}.")
    if config.critic_warmup < 0:
        raise ValueError(f"--critic_warmup must be >= 0 rollouts (0: none), got {config.critic_warmup}.")
    check_missing_eos_penalty(config)
    if config.target_kl is not None and config.kl_coef == 0:  # the controller multiplies: 0 would stay 0 for ever
        raise ValueError("--target_kl adapts --kl_coef, which is 0 here (a coefficient of 0 never moves); give "
                         "--kl_coef > 0 (e.g. 0.05) or drop --target_kl.")
    check_sampling(config)
    at_least(config, 1, "per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length",
             "local_rollout_forward_batch_size", "num_ppo_epochs", "num_mini_batches", "total_episodes",
             "kl_horizon")
    if config.stop_token not in ("eos", None):
        raise ValueError(f"--stop_token {config.stop_token} is not supported; use eos, or none with "
                         "--stop_token_id.")
    if config.stop_token and config.stop_token_id is not None:
        raise ValueError(f"--stop_token {config.stop_token} and --stop_token_id {config.stop_token_id} both set where "
                         "completions end; give one (--stop_token none --stop_token_id ID)")


# Each config class's checks (its parents' included), by the class's name: its `__post_init__` runs them (a subclass,
# its nearest parent's), and `rlhf.cli.check_quickly` runs those of a script's configs on its flags, from the
# script's flag table, before the heavy imports.
CONFIG_CHECKS = {
    "ModelArguments": check_model,
    "DatasetSource": check_dataset_source,
    "DataArguments": check_data,
    "PromptDataArguments": check_prompt_data,
    "PreferenceDataArguments": check_preference_data,
    "EvalArguments": check_evaluation,
    "GRPOTrainingConfig": check_grpo_config,
    "PPOTrainingConfig": check_ppo_config,
    "RewardTrainingConfig": check_reward_config,
}
