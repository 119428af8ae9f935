"""What each script checks before any weights load or any folder is taken: one call per script, read top to bottom.

A mistake ends here in one line (`UserError`), in seconds. Each call also settles what the checks resolve: a default
`--max_prompt_length` fitted to the model's context, `--dtype auto` named, so that what trains is what was checked.

Each script's checks that need no model loaded and no library imported (`quick_grpo`, ...: its model folders, a
local dataset, the reward weights, the report's path) also run on its parsed flags before TRL, transformers and torch
load (the script passes them to `rlhf.cli.parse_args`): a mistyped path is refused at once, in the line the full
preflight gives where nothing else is wrong.
"""

from pathlib import Path

from rlhf.checks import (
    check_lora_targets,
    check_model_source,
    check_policy,
    check_precision,
    check_quantization,
    fit_prompt_length,
)
from rlhf.data import check_dataset_source, looks_like_local_path
from rlhf.errors import UserError
from rlhf.processes import launched_engine, launched_zero_stage
from rlhf.rewards.functions import check_reward_funcs, check_reward_order, check_reward_weights
from rlhf.rewards.reward_model import ROLES, check_reward_model, check_scorer, check_value_model


def grpo(model_args, data_args, reward_args, training_args):
    """train_grpo.py: the policy and its lengths, LoRA, the data, the rewards, quantization and precision, vLLM if
    asked. Independent mistakes are said together, in one line."""
    problems = Problems()
    problems.run(_checked_policy, model_args, data_args, training_args)
    problems.run(check_dataset_source, data_args.dataset_name)
    if "reward_model" in reward_args.reward_funcs:
        problems.run(check_scorer, reward_args.reward_model_name_or_path, training_args.trust_remote_code)
    problems.run(check_reward_weights, training_args.reward_weights, reward_args.reward_funcs)
    problems.run(check_reward_funcs, reward_args.reward_funcs)  # a user's module imports, its signature can be called
    problems.run(check_quantization, model_args)
    problems.run(check_report_to, training_args.report_to)
    if training_args.use_dynamic_sampling and (launched_engine() == "FSDP" or launched_zero_stage() == 3):
        # A round's rows whose prompts got extra pads have their log-probabilities taken again on the processes that
        # hold them (`DynamicSampling._logps_again`): sharded weights need every process in each forward pass.
        problems.add("--use_dynamic_sampling is not supported with FSDP or DeepSpeed ZeRO-3 (the weights are sharded "
                     "across processes); use deepspeed_zero2.yaml or multi_gpu.yaml, or drop the flag")
    if training_args.use_vllm:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            problems.add("--use_vllm needs vLLM (Linux + CUDA): pip install -r requirements-vllm.txt, or drop the "
                         "flag")
    problems.raise_them()
    _warn(check_reward_order(reward_args.reward_funcs, training_args.reward_weights, reward_args.boxed_rewards))


def ppo(model_args, data_args, training_args):
    """train_ppo.py: as GRPO's, plus the value model, and the tokenizers PPO feeds the policy's token ids to.
    Returns the policy's tokenizer."""
    from rlhf.models import load_tokenizer
    from rlhf.ppo.models import check_same_tokenizer, value_model_source

    trust = training_args.trust_remote_code
    policy_path, reward_path = model_args.model_name_or_path, training_args.reward_model_name_or_path
    value_path = value_model_source(training_args, policy_path)
    reward_funcs = training_args.reward_funcs
    problems = Problems()
    policy_ok = problems.run(_checked_policy, model_args, data_args, training_args)
    problems.run(check_dataset_source, data_args.dataset_name)
    problems.run(check_reward_weights, training_args.reward_weights, reward_funcs)
    problems.run(check_reward_funcs, reward_funcs)  # a user's module imports, its signature can be called
    reward_ok = "reward_model" not in reward_funcs or problems.run(check_reward_model, reward_path, trust)
    if {reward_path: reward_ok, policy_path: policy_ok}.get(value_path, True):  # a folder's failure is said once
        problems.run(check_value_model, value_path, trust)
    problems.run(check_quantization, model_args)
    problems.run(check_report_to, training_args.report_to)
    if training_args.critic_warmup and launched_engine():
        from rlhf.ppo.trainer import CRITIC_WARMUP_ENGINES

        problems.add(CRITIC_WARMUP_ENGINES)
    problems.raise_them()
    _warn(check_reward_order(reward_funcs, training_args.reward_weights, training_args.boxed_rewards))
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
    check_report_to(training_args.report_to)
    model_args.dtype = check_precision(model_args, training_args)  # `auto` named: every model loads in it


def evaluation(args, rewards):
    """evaluate_generations.py: every model (one prompt length for all, fitted to the shortest context where it is
    the default), the data, the rewards, the judge, and the report's path. Independent mistakes are said together."""
    from rlhf.evaluation.report import check_writable

    if not args.model_path:
        raise UserError("pass at least one model with --model_path (a folder or a Hub id)")
    problems = Problems()
    found = [path for path in args.model_path
             if problems.run(check_model_source, path, "model", "--model_path")]
    for path in found:
        fit_prompt_length(path, args, args.max_new_tokens, args.trust_remote_code, "--max_new_tokens")
    for path in found:
        problems.run(check_policy, path, "--model_path", {"--max_prompt_length": args.max_prompt_length,
                                                          "--max_new_tokens": args.max_new_tokens},
                     args.trust_remote_code)
    problems.run(check_dataset_source, args.dataset_name)
    if "reward_model" in rewards.reward_funcs:
        problems.run(check_scorer, rewards.reward_model_name_or_path, args.trust_remote_code)
    problems.run(check_reward_weights, args.reward_weights, rewards.reward_funcs)
    if args.judge_model_name_or_path is not None:
        problems.run(_check_judge, args.judge_model_name_or_path, rewards, args.trust_remote_code)
    problems.run(check_writable, args.output_file)
    problems.raise_them()


def _check_judge(judge, rewards, trust_remote_code):
    """The judge: a one-output sequence classifier, and not the reward model itself (which agrees by construction)."""
    from pathlib import Path

    check_scorer(judge, trust_remote_code, "judge")
    reward_model = rewards.reward_model_name_or_path
    if "reward_model" in rewards.reward_funcs and (
            judge == reward_model or Path(judge).expanduser().resolve() == Path(reward_model).expanduser().resolve()):
        raise UserError(f"--judge_model_name_or_path {judge} is the reward model that scores the completions "
                        "(--reward_model_name_or_path), which agrees with itself by construction; give a judge the "
                        "policies never trained against, or drop the flag")


def quick_grpo(flags):
    """`grpo`'s checks that need no model loaded and no library imported, on the parsed `flags`."""
    problems = Problems()
    problems.run(check_model_source, flags.model_name_or_path, "model", "--model_name_or_path")
    problems.run(_local_dataset, flags.dataset_name)
    if "reward_model" in flags.reward_funcs:
        problems.run(check_model_source, flags.reward_model_name_or_path, "reward model", *ROLES["reward model"])
    problems.run(check_reward_weights, flags.reward_weights, flags.reward_funcs)
    problems.raise_them()


def quick_ppo(flags):
    """`ppo`'s checks that need no model loaded and no library imported, on the parsed `flags`."""
    policy_path, reward_path, value_path = flags.model_name_or_path, flags.reward_model_name_or_path, \
        flags.value_model_path
    problems = Problems()
    policy_ok = problems.run(check_model_source, policy_path, "model", "--model_name_or_path")
    problems.run(_local_dataset, flags.dataset_name)
    problems.run(check_reward_weights, flags.reward_weights, flags.reward_funcs)
    reward_ok = "reward_model" not in flags.reward_funcs or problems.run(
        check_model_source, reward_path, "reward model", *ROLES["reward model"])
    if value_path and {reward_path: reward_ok, policy_path: policy_ok}.get(value_path, True):
        problems.run(check_model_source, value_path, "value model", "--value_model_path")
    problems.raise_them()


def quick_reward_model(flags):
    """`reward_model`'s check that needs no model loaded and no library imported, on the parsed `flags`."""
    check_model_source(flags.model_name_or_path, "model", "--model_name_or_path")


def quick_evaluation(flags):
    """`evaluation`'s checks that need no model loaded and no library imported, on the parsed `flags`."""
    from rlhf.evaluation.report import check_writable

    if not flags.model_path:
        raise UserError("pass at least one model with --model_path (a folder or a Hub id)")
    problems = Problems()
    for path in flags.model_path:
        problems.run(check_model_source, path, "model", "--model_path")
    problems.run(_local_dataset, flags.dataset_name)
    if "reward_model" in flags.reward_funcs:
        problems.run(check_model_source, flags.reward_model_name_or_path, "reward model", *ROLES["reward model"])
    problems.run(check_reward_weights, flags.reward_weights, flags.reward_funcs)
    if flags.judge_model_name_or_path is not None:
        problems.run(check_model_source, flags.judge_model_name_or_path, "judge", *ROLES["judge"])
    problems.run(check_writable, flags.output_file)
    problems.raise_them()


def _local_dataset(name):
    """`check_dataset_source` for a local path that does not exist (a Hub name is looked up by the preflight)."""
    if looks_like_local_path(name) and not Path(name).exists():
        check_dataset_source(name)


class Problems:
    """The user errors of independent checks, kept as they come and said together in one line (`raise_them`): a
    newcomer missing three things learns of all three in one run, not one per run."""

    def __init__(self):
        self.found = []

    def add(self, message):
        self.found.append(str(message).removesuffix("."))

    def run(self, check, *args):
        """`check(*args)`; False (the error kept) where it raised a UserError, so that checks which depend on it can
        be skipped."""
        try:
            check(*args)
        except UserError as error:
            self.add(error)
            return False
        return True

    def raise_them(self):
        if len(self.found) == 1:
            raise UserError(self.found[0])
        if self.found:
            raise UserError(f"{len(self.found)} things to fix: " + "; ".join(
                f"({number}) {message}" for number, message in enumerate(self.found, 1)))


def check_report_to(report_to):
    """Refuse a --report_to integration that is unknown or not installed: the Trainer would fail once models load."""
    from rlhf.trl_compat import integration_utils

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    installed = None
    for name in names:
        if name in ("all", "none"):
            continue
        if name not in integration_utils.INTEGRATION_TO_CALLBACK:
            others = sorted(set(integration_utils.INTEGRATION_TO_CALLBACK) - {"tensorboard"})
            raise UserError(f"--report_to {name} is not supported; use one of tensorboard, none, all, "
                            f"{', '.join(others)}.")
        installed = installed if installed is not None else integration_utils.get_available_reporting_integrations()
        if name not in installed and name != "flyte":  # flyte is never listed as available
            raise UserError(f"--report_to {name} needs its package, which is not installed: pip install it, or "
                            "drop it (--report_to tensorboard is the default).")


def _checked_policy(model_args, data_args, training_args):
    """The policy of a training script: where it is, its lengths, its LoRA targets, and its precision (`--dtype auto`
    named on `model_args`: every model loads in it)."""
    trust = training_args.trust_remote_code
    policy = _policy(model_args.model_name_or_path, data_args, training_args.max_completion_length, trust)
    check_lora_targets(model_args, policy, trust_remote_code=trust)
    model_args.dtype = check_precision(model_args, training_args)


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
