"""What each script checks before any weights load or any folder is taken: one call per script, read top to bottom.

A mistake ends here in one line (`UserError`), in seconds. Each call also settles what the checks resolve: a default
`--max_prompt_length` fitted to the model's context, `--dtype auto` named, so that what trains is what was checked.
"""

from rlhf.checks import (
    check_lora_targets,
    check_model_source,
    check_policy,
    check_precision,
    check_quantization,
    fit_prompt_length,
)
from rlhf.errors import UserError
from rlhf.reward import REWARD_HINT, check_reward_model, check_value_model
from rlhf.reward_funcs import check_reward_funcs, check_reward_order, check_reward_weights


def grpo(model_args, data_args, reward_args, training_args):
    """train_grpo.py: the policy and its lengths, LoRA, the rewards, quantization and precision, vLLM if asked."""
    trust = training_args.trust_remote_code
    policy = _policy(model_args.model_name_or_path, data_args, training_args.max_completion_length, trust)
    check_lora_targets(model_args, policy, trust_remote_code=trust)
    if "reward_model" in reward_args.reward_funcs:
        check_model_source(reward_args.reward_model_name_or_path, "reward model", "--reward_model_name_or_path",
                           REWARD_HINT)
    check_reward_weights(training_args.reward_weights, reward_args.reward_funcs)
    check_reward_funcs(reward_args.reward_funcs)  # a user's module imports, its signature can be called
    _warn(check_reward_order(reward_args.reward_funcs, training_args.reward_weights, reward_args.boxed_rewards))
    check_quantization(model_args)
    model_args.dtype = check_precision(model_args, training_args)  # `auto` named: every model loads in it
    if training_args.use_vllm:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise UserError("--use_vllm needs vLLM (Linux + CUDA): pip install -r requirements-vllm.txt, or drop "
                            "the flag")


def ppo(model_args, data_args, training_args):
    """train_ppo.py: as GRPO's, plus the value model, and the tokenizers PPO feeds the policy's token ids to.
    Returns the policy's tokenizer."""
    from rlhf.models import load_tokenizer
    from rlhf.ppo import check_same_tokenizer, value_model_source

    trust = training_args.trust_remote_code
    policy_path, reward_path = model_args.model_name_or_path, training_args.reward_model_name_or_path
    value_path = value_model_source(training_args, policy_path)
    reward_funcs = training_args.reward_funcs
    policy = _policy(policy_path, data_args, training_args.max_completion_length, trust)
    check_lora_targets(model_args, policy, trust_remote_code=trust)
    check_reward_weights(training_args.reward_weights, reward_funcs)
    check_reward_funcs(reward_funcs)  # a user's module imports, its signature can be called
    _warn(check_reward_order(reward_funcs, training_args.reward_weights, training_args.boxed_rewards))
    if "reward_model" in reward_funcs:
        check_reward_model(reward_path, trust)
    check_value_model(value_path, trust)
    check_quantization(model_args)
    model_args.dtype = check_precision(model_args, training_args)  # `auto` named: every model loads in it
    tokenizer = load_tokenizer(policy_path, trust)
    if "reward_model" in reward_funcs:  # it reads the policy's token ids; the other functions read text
        check_same_tokenizer(tokenizer, reward_path, "reward model", "--reward_model_name_or_path", trust)
    check_same_tokenizer(tokenizer, value_path, "value model", "--value_model_path", trust)
    return tokenizer


def reward_model(model_args, training_args):
    """train_reward_model.py: the model, LoRA (a sequence classifier's), quantization and precision."""
    from rlhf.models import model_config

    trust = training_args.trust_remote_code
    check_model_source(model_args.model_name_or_path, "model", "--model_name_or_path")
    check_lora_targets(model_args, model_config(model_args.model_name_or_path, trust), "SEQ_CLS", trust)
    check_quantization(model_args)
    model_args.dtype = check_precision(model_args, training_args)  # `auto` named: every model loads in it


def evaluation(args, rewards):
    """evaluate_generations.py: every model (one prompt length for all, fitted to the shortest context where it is
    the default), the rewards, and the report's path."""
    from rlhf.evaluation_report import check_writable

    if not args.model_path:
        raise UserError("pass at least one model with --model_path (a folder or a Hub id)")
    for path in args.model_path:
        check_model_source(path, "model", "--model_path")
        fit_prompt_length(path, args, args.max_new_tokens, args.trust_remote_code, "--max_new_tokens")
    for path in args.model_path:
        check_policy(path, "--model_path", {"--max_prompt_length": args.max_prompt_length,
                                            "--max_new_tokens": args.max_new_tokens}, args.trust_remote_code)
    if "reward_model" in rewards.reward_funcs:
        check_model_source(rewards.reward_model_name_or_path, "reward model", "--reward_model_name_or_path",
                           REWARD_HINT)
    check_reward_weights(args.reward_weights, rewards.reward_funcs)
    check_writable(args.output_file)


def _policy(name_or_path, data_args, completion_length, trust_remote_code):
    """The policy: where it is, a default prompt length fitted to its context, a causal LM whose context holds the
    prompt and completion lengths. Returns its config (None where it cannot be read before loading)."""
    check_model_source(name_or_path, "model", "--model_name_or_path")
    fit_prompt_length(name_or_path, data_args, completion_length, trust_remote_code)
    lengths = {"--max_prompt_length": data_args.max_prompt_length, "--max_completion_length": completion_length}
    return check_policy(name_or_path, "--model_name_or_path", lengths, trust_remote_code)


def _warn(line):
    """Print a warning line once (the main process), where a check found something to say but nothing to refuse."""
    from rlhf.processes import is_main_process

    if line and is_main_process():
        print(line, flush=True)
