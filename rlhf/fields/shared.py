"""The fields several of config.py's classes declare alike, declared here once: each config takes its own copy.

A dataclass field belongs to one class, so each config declares it in its body, `name: type = shared("name")`, or,
for the fields every training config shares, with `@with_shared(RUN_FIELDS, HELD_OUT_FIELDS)`: no default depends on
the order of a class's bases. Their help is `--help`'s (the flag tables' `rlhf.flags.SOURCES` include this file).
"""

from dataclasses import field

SHARED_FIELDS = {
    # What scores completions (RewardArguments for GRPO and evaluation; PPOTrainingConfig)
    "reward_model_name_or_path": {
        "default": "./reward_model_output",
        "metadata": {
            "aliases": ["--reward_model_path", "--reward-model-path"],
            "help": "Sequence-classification reward model (num_labels=1): a local folder or a Hub id. GRPO and "
            "evaluation score with its own tokenizer and chat template; PPO needs it to share the policy's tokenizer. "
            "Make one with `python train_reward_model.py`. --reward_model_path works too.",
        },
    },
    "reward_model_dtype": {
        "default": "auto",
        "metadata": {
            "help": "Dtype the frozen reward model loads in: auto (bfloat16 when training on a CUDA GPU, else "
            "--dtype), float32, bfloat16 or float16. bfloat16 halves its memory; on CPU its speed depends on the "
            "processor (docs/performance.md)."
        },
    },
    "reward_funcs": {
        "default_factory": lambda: ["reward_model"],
        "metadata": {
            "help": "Reward functions, summed with --reward_weights: reward_model, boxed_answer (math verifier on "
            "\\boxed{} answers vs the ground_truth column), boxed_format, or module.function (TRL's signature)."
        },
    },
    "boxed_correct_reward": {
        "default": 1.0, "metadata": {"aliases": ["--reward_correct", "--reward-correct"],
                                     "help": "boxed_answer: reward of a correct answer (--reward_correct works too)."}
    },
    "boxed_wrong_reward": {
        "default": 0.0, "metadata": {"aliases": ["--reward_wrong", "--reward-wrong"],
                                     "help": "boxed_answer: reward of a wrong answer, at most --boxed_missing_reward "
                                     "(more would teach boxing guesses; --reward_wrong works too)."}
    },
    "boxed_missing_reward": {
        "default": 0.0, "metadata": {"aliases": ["--reward_no_answer", "--reward-no-answer"],
                                     "help": "boxed_answer: reward when there is no \\boxed{} answer. A completion "
                                     "cut off at the length limit scores the lower of this and --boxed_wrong_reward "
                                     "(--reward_no_answer works too)."}
    },
    "boxed_unboxed_correct_reward": {
        "default": None, "metadata": {"help": "boxed_answer: reward of an ended completion with no \\boxed{} whose "
                                      "last number is the right answer (default: none, it scores as missing). Below "
                                      "--boxed_correct_reward, it pays the box only together with a right answer."}
    },
    # GRPO's is TRL's `GRPOConfig.reward_weights`, the same flag.
    "reward_weights": {"default": None,
                       "metadata": {"help": "Weights of --reward_funcs in the total reward (default: all 1)."}},
    # Sampling (evaluation's Sampling, GRPO, PPO) and the adaptive KL (GRPO, PPO)
    "temperature": {"default": 0.7, "metadata": {"help": "Sampling temperature."}},
    "kl_horizon": {"default": 10_000, "metadata": {"help": "Adaptive KL horizon in completions (PPO's episodes): "
                                                   "larger adapts more slowly."}},
    # This package's defaults for the three training configs, where TRL's and transformers' differ
    "bf16": {
        "default": False,
        "metadata": {
            "help": "bf16 autocast (mixed precision over float32 weights). Off: on a GPU, TF32 (--tf32) was measured "
            "faster for a model of this size (docs/performance.md)."
        },
    },
    "tf32": {
        "default": None,
        "metadata": {"help": "TF32 matmuls on an Ampere or newer NVIDIA GPU. Default: on where available, else off."},
    },
    "report_to": {"default": "tensorboard", "metadata": {"help": "Where metrics go."}},
    "save_total_limit": {"default": 2, "metadata": {"help": "Keep only the newest N checkpoints."}},
    "logging_nan_inf_filter": {
        "default": False,
        "metadata": {"help": "Hide NaN/inf losses in the logs (off: a non-finite loss is shown and stops the run)."},
    },
    # The held-out evaluation during training (GRPO, PPO), checked by `check_held_out`
    "eval_prompts": {
        "default": 0,
        "metadata": {
            "help": "Held-out prompts evaluated every --eval_steps steps and at the end (0: off): win rate against "
            "the starting policy under the reward, and with boxed_answer the verifier accuracy and its gain, each "
            "with a 95%% bootstrap interval, logged under eval/ and naming the best checkpoint. Drawn (seeded) from "
            "the rows after --max_samples, or from --eval_dataset_name: never a training prompt."
        },
    },
    "eval_completions": {"default": 2, "metadata": {"help": "Completions sampled per held-out prompt."}},
    "eval_dataset_name": {
        "default": None,
        "metadata": {
            "help": "Where the held-out prompts come from, all rows of it (a file, folder or Hub dataset; its "
            "--dataset_test_split, a file's only split), e.g. data/math_validation.jsonl. Default: the rows of "
            "--dataset_name after the first --max_samples."
        },
    },
    # transformers' load_best_model_at_end needs its own evaluation (eval_strategy equal to save_strategy), which these
    # scripts refuse (`check_training_run`): the held-out evaluation names the best checkpoint instead.
    "end_on_best_checkpoint": {
        "default": False,
        "metadata": {
            "help": "With --eval_prompts: end on the best checkpoint by the held-out evaluation (the verifier's "
            "accuracy, else the win rate): the final model in --output_dir gets its weights (with LoRA, its "
            "adapter; PPO: the policy, the value model stays the last). transformers' --load_best_model_at_end "
            "for this package's evaluation."
        },
    },
    # transformers' field, unused here otherwise (these scripts train with eval_strategy no): what it means here
    "eval_steps": {
        "default": None,
        "metadata": {
            "help": "With --eval_prompts: evaluate every N steps (GRPO: optimizer steps, PPO: batches), a divisor of "
            "--save_steps so that every checkpoint holds evaluated weights. Default: --save_steps."
        },
    },
}


def shared(name):
    """A new field declared as `SHARED_FIELDS[name]`, for one config class."""
    return field(**SHARED_FIELDS[name])


# The fields every training config takes from `SHARED_FIELDS` (the run's precision, reporting and checkpoints), and
# those of the held-out evaluation (GRPO and PPO), with their types: listed once, given by `with_shared`.
RUN_FIELDS = {"bf16": bool, "tf32": bool | None, "report_to": None | str | list[str], "save_total_limit": int | None,
              "logging_nan_inf_filter": bool}
HELD_OUT_FIELDS = {"eval_steps": float | None, "eval_prompts": int, "eval_completions": int,
                   "eval_dataset_name": str | None, "end_on_best_checkpoint": bool}


def with_shared(*groups):
    """Declare the fields of `groups` ({name: type}, each an entry of `SHARED_FIELDS`) in the decorated class, first
    among its own, as if written there with `shared(name)`. Apply it under `@dataclass`."""

    def declare(cls):
        names = {name: kind for group in groups for name, kind in group.items()}
        cls.__annotations__ = {**names, **{k: v for k, v in cls.__dict__.get("__annotations__", {}).items()
                                           if k not in names}}
        for name in names:
            setattr(cls, name, shared(name))
        return cls

    return declare
