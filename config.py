"""The arguments every script shares, on TRL's own `ModelConfig` and `ScriptArguments`, parsed by `rlhf/cli.py`.

Precedence: the defaults below < a YAML file given with `--config` < command-line flags. TRL's names work
(`--use_peft`, `--dataset_train_split`, `--reward_model_name_or_path`), so a YAML written for `trl grpo` runs here;
the older spellings stay as aliases (`--use_lora`, `--use-lora`, `--dataset_split`, `--reward_model_path`).
Dashes and underscores are interchangeable. Each training script's own config (every field of TRL's trainer
config is a flag too) is at the end: `GRPOTrainingConfig`, `PPOTrainingConfig`, `RewardTrainingConfig`, each a
subclass of TRL's config that declares the fields it adds or whose default differs.

These classes declare and check, nothing else: each `__post_init__` derives from its own fields and raises
ValueError naming the flag, the value and the rule. What the launch and the machine decide (CPU processes, TF32,
GRPO's and PPO's batches in TRL's terms, `rlhf.batches`) and every `note:` line are settled by `rlhf/cli.py` while
parsing, before these classes are built; what needs installed packages or the models, by `rlhf/preflight.py`.
"""

from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments

from rlhf.batches import at_least, grpo_flags, ppo_flags
from rlhf.models import DEFAULT_LORA_TARGETS
from rlhf.trl_compat import GRPOConfig, ModelConfig, RewardConfig, ScriptArguments


@dataclass
class ModelArguments(ModelConfig):
    """TRL's `ModelConfig` (every field a flag: --use_peft, --lora_*, --use_rslora, --load_in_4bit, ...) with this
    package's defaults and checks."""

    _argument_group_name = "Model and LoRA (TRL's ModelConfig)"

    model_name_or_path: str = field(
        default="HuggingFaceTB/smollm2-135M-SFT-Only",
        metadata={"aliases": ["--model_name", "--model-name", "--model_path", "--model-path", "--sft_model_path",
                              "--sft-model-path"],
                  "help": "Policy to train: a Hugging Face Hub id or a local folder (--model_name, --model_path and "
                  "TRL's --sft_model_path work too)."},
    )
    dtype: str = field(
        default="float32",
        metadata={
            "help": "Dtype the weights are loaded in. Mixed precision is set separately with --bf16; float32 master "
            "weights with --bf16 is the stable choice for training.",
            "choices": ["auto", "bfloat16", "float16", "float32"],
        },
    )
    use_peft: bool = field(
        default=False,
        metadata={"aliases": ["--use_lora", "--use-lora"],
                  "help": "Train a LoRA adapter instead of all weights (--use_lora and --use-lora work too)."},
    )
    lora_target_modules: list[str] = field(
        default_factory=lambda: list(DEFAULT_LORA_TARGETS),
        metadata={"help": "Modules that get LoRA adapters (default: the attention projections), or all-linear."},
    )
    use_bnb_nested_quant: bool = field(
        default=True,
        metadata={"help": "4-bit: quantize the quantization constants too (QLoRA's double quantization)."},
    )
    allow_half_precision_weights: bool = field(
        default=False,
        metadata={
            "help": "Train all weights loaded in bfloat16/float16 (--dtype) anyway. Refused otherwise: AdamW updates "
            "smaller than the format's resolution (about 1e-3 of a weight in bfloat16) are lost. LoRA needs no flag."
        },
    )
    load_in_4bit: bool = field(
        default=False,
        metadata={
            "help": "QLoRA: load the trained model's frozen weights in 4-bit NF4 (bitsandbytes; a CUDA GPU and "
            "--use_peft needed). Saves memory; the LoRA adapter computes in bf16."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 1, "lora_r")
        # TRL turns a one-name list into a string, and so does a YAML scalar (`lora_target_modules: q_proj`); PEFT
        # would read that string as a pattern for the whole module name. Commas separate names too.
        names = [self.lora_target_modules] if isinstance(self.lora_target_modules, str) else self.lora_target_modules
        self.lora_target_modules = [part for name in names for part in str(name).replace(",", " ").split()]
        if not self.lora_target_modules:
            raise ValueError("--lora_target_modules needs a module name (e.g. q_proj v_proj) or all-linear.")
        if self.lora_alpha <= 0:
            raise ValueError(f"--lora_alpha must be > 0, got {self.lora_alpha}.")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"--lora_dropout must be in [0, 1), got {self.lora_dropout}.")
        for bits in ("4bit", "8bit"):
            if getattr(self, f"load_in_{bits}") and not self.use_peft:
                raise ValueError(f"--load_in_{bits} trains a LoRA adapter on frozen {bits[0]}-bit weights (QLoRA); "
                                 "add --use_peft.")
        if self.model_revision != "main":
            raise ValueError(f"--model_revision {self.model_revision} is not supported; download that revision "
                             "(huggingface-cli download ID --revision REV --local-dir DIR) and pass the folder.")


@dataclass
class DatasetSource(ScriptArguments):
    """TRL's `ScriptArguments` (--dataset_name, --dataset_train_split, ...) with this package's defaults."""

    _argument_group_name = "Data (TRL's ScriptArguments)"

    dataset_name: str = field(
        default="Intel/orca_dpo_pairs",
        metadata={
            "help": "A Hugging Face Hub dataset, or a local file or folder (json, jsonl, parquet, csv). Recognised "
            "columns: system/question (Intel ORCA), prompt + chosen/rejected messages (H4 ORCA), prompt (TRL), or "
            "question (+ ground_truth) for math."
        },
    )
    dataset_train_split: str = field(
        default="train",
        metadata={"aliases": ["--dataset_split", "--dataset-split"],
                  "help": "Split to read (evaluate_generations.py draws its prompts from the rows after "
                  "--train_samples)."},
    )

    def __post_init__(self):
        for name in ("dataset_name", "dataset_train_split"):
            if not str(getattr(self, name) or "").strip():
                raise ValueError(f"--{name} is empty; give a value (or drop the flag for its default).")
        # TRL's fields that this package does not implement: refused rather than ignored.
        if self.dataset_config is not None:
            raise ValueError(f"--dataset_config {self.dataset_config} is not supported; point --dataset_name at a "
                             "local copy of that configuration (a file or a folder).")
        for name in ("dataset_streaming", "ignore_bias_buffers"):
            if getattr(self, name):
                raise ValueError(f"--{name} is not supported by this package; drop it.")


@dataclass
class DataArguments(DatasetSource):
    """Where the training rows come from."""

    max_samples: int | None = field(
        default=10_000,
        metadata={"help": "Use only the first N rows of the split (None or 0: all of them)."},
    )

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 0, "max_samples")


@dataclass
class PromptFormat:
    """How dataset rows become prompts (GRPO, PPO, evaluation)."""

    max_prompt_length: int = field(
        default=512,
        metadata={"help": "Prompts longer than this many tokens (after the chat template) are dropped and counted."},
    )
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "System message for rows that have none, e.g. 'Put your final answer within \\boxed{}.' for "
            "math data scored with boxed_answer."
        },
    )
    append_system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "Appended to every row's system message (the system message of rows that have none), e.g. "
            "'Answer in two or three short sentences.' where the data's own system messages ask for long answers."
        },
    )


@dataclass
class PromptDataArguments(PromptFormat, DataArguments):
    """Prompts for the RL scripts."""

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 1, "max_prompt_length")


@dataclass
class PreferenceDataArguments(DataArguments):
    """Preference pairs for the reward model."""

    eval_samples: int = field(
        default=50,
        metadata={
            "help": "Pairs held out (a seeded random pick among the rows read) to measure pairwise accuracy at the "
            "end; 0 turns the held-out evaluation off."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 0, "eval_samples")


# ---- Fields that several configs declare alike, declared here once. A dataclass field belongs to one class, so each
# config takes its own copy in its body (`shared(name)`): no default depends on the order of a class's bases.
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


@dataclass
class RewardArguments:
    """What scores completions: the frozen reward model, rule-based rewards, your own functions."""

    _argument_group_name = "Reward"

    reward_model_name_or_path: str = shared("reward_model_name_or_path")
    reward_model_dtype: str = shared("reward_model_dtype")
    reward_funcs: list[str] = shared("reward_funcs")
    boxed_correct_reward: float = shared("boxed_correct_reward")
    boxed_wrong_reward: float = shared("boxed_wrong_reward")
    boxed_missing_reward: float = shared("boxed_missing_reward")
    boxed_unboxed_correct_reward: float | None = shared("boxed_unboxed_correct_reward")

    @property
    def boxed_rewards(self):
        return (self.boxed_correct_reward, self.boxed_wrong_reward, self.boxed_missing_reward,
                self.boxed_unboxed_correct_reward)


@dataclass
class Sampling:
    """How completions are sampled in evaluation (GRPO and PPO have their own sampling flags, top_p 1.0 by default)."""

    temperature: float = shared("temperature")
    top_p: float = field(default=0.9, metadata={"help": "Nucleus sampling threshold."})


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


@dataclass
class EvalArguments(PromptFormat, Sampling, DatasetSource):
    """What evaluate_generations.py compares, on which prompts, and how it samples."""

    _argument_group_name = "Evaluation"

    model_path: list[str] = field(
        default_factory=list,
        metadata={
            "aliases": ["--model_name_or_path", "--model-name-or-path"],
            "help": "One or more models (folders or Hub ids; LoRA adapter folders load onto their base). The first "
            "is the baseline the others are compared with. --model_name_or_path works too.",
        },
    )
    reward_weights: list[float] | None = shared("reward_weights")
    train_samples: int = field(
        default=10_000,
        metadata={
            "help": "Rows at the start of the split that training used (its --max_samples); prompts are drawn from "
            "the rows after them, so evaluation never sees a training prompt. 0: draw from all rows."
        },
    )
    num_prompts: int = field(default=20, metadata={"help": "Prompts drawn (seeded) from the held-out rows."})
    num_completions: int = field(default=4, metadata={"help": "Completions sampled per prompt and model."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens generated per completion."})
    seed: int = field(default=42, metadata={"help": "Seed of the prompt draw and of sampling (same for all models)."})
    batch_size: int = field(default=16, metadata={"help": "Sequences generated or scored per batch."})
    dtype: str = field(default="float32", metadata={"help": "Dtype the models load in."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow models that ship their own code."})
    output_file: str = field(default="evaluation_results.json", metadata={"help": "Where the JSON report goes."})
    judge_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A judge: a second sequence classifier (num_labels=1, a folder or a Hub id, scoring with its own "
            "tokenizer and chat template, in the reward model's dtype) that scores every completion too; its win "
            "rates are reported beside the reward's, and a line says where they disagree. Pick one the policies "
            "never trained against (docs/evaluation.md, A judge)."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        check_sampling(self)
        at_least(self, 1, "max_prompt_length", "num_prompts", "num_completions", "max_new_tokens", "batch_size")
        at_least(self, 0, "train_samples")


# ---- Each training script's config: a subclass of TRL's trainer config (PPO: of transformers' TrainingArguments, with
# TRL 1.12's PPOConfig fields) that declares this package's fields and defaults, and checks them. Pickle (the
# Trainer's training_args.bin) finds each class here.


@dataclass
@with_shared(RUN_FIELDS, HELD_OUT_FIELDS)
class GRPOTrainingConfig(GRPOConfig):
    """TRL's `GRPOConfig` with this package's defaults, plus `prompts_per_step` and `prompts_per_generation`.

    Batch semantics: TRL counts *completions*, not prompts. `per_device_train_batch_size` is how many
    completions go through one forward/backward pass on one device. One optimizer step sees
    `prompts_per_step * num_generations` completions; `gradient_accumulation_steps` is derived from that
    (`rlhf.batches.grpo_flags`, in `__post_init__`, before TRL derives its generation batch: built in code, a config
    means what the same flags mean).
    """

    _argument_group_name = "Training (TRL's GRPOConfig and transformers' TrainingArguments)"

    output_dir: str = field(
        default="./grpo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest and the final model go."},
    )
    prompts_per_step: int | None = field(
        default=None,
        metadata={
            "help": "Prompts per optimizer step (summed over devices). With num_generations=4 that is 16 completions "
            "per step; gradient_accumulation_steps is derived from it. Default: 4, or 0 where TRL's batch flags are "
            "given (--gradient_accumulation_steps, --generation_batch_size, --steps_per_generation): 0 uses them as "
            "they are, as `trl grpo` does."
        },
    )
    batch_size: int | None = field(
        default=None,
        metadata={
            "help": "A hand-written GRPO's batch: prompts per forward/backward pass on each device, each with its "
            "num_generations completions, gradient_accumulation_steps passes per optimizer step. Translated, saying "
            "so: --prompts_per_step = batch_size x gradient_accumulation_steps x processes, "
            "--per_device_train_batch_size = batch_size x num_generations (the manifest records those)."
        },
    )
    prompts_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Prompts whose completions are generated together, then trained on over prompts_per_generation / "
            "prompts_per_step optimizer steps (a multiple of --prompts_per_step). Default: on a GPU, where "
            "generation is most of a step and batches well, the smallest multiple of --prompts_per_step that reaches "
            "64 (64 for the default 4); --prompts_per_step on a CPU. Completions trained on at "
            "later steps come from an older policy: TRL weighs them by the ratio to the old log-probabilities, "
            "clipped at --epsilon."
        },
    )
    num_generations: int = field(
        default=4, metadata={"aliases": ["--num_return_sequences", "--num-return-sequences", "--group_size",
                                         "--group-size"],
                             "help": "Completions sampled per prompt, the GRPO group (--num_return_sequences and "
                             "--group_size work too)."}
    )
    temperature: float = shared("temperature")
    top_p: float = field(
        default=1.0,
        metadata={
            "help": "Nucleus sampling threshold of the rollouts. 1.0 (as TRL, OpenRLHF and verl train): the "
            "log-probabilities, importance ratio and KL are computed on the full distribution, so sampling from a "
            "truncated one would bias the gradient. Evaluation keeps 0.9."
        },
    )
    per_device_train_batch_size: int = field(
        default=16,
        metadata={
            "help": "Completions (not prompts) per forward/backward pass on one device. Lower it to save memory. "
            "Capped at one step's share per device (16 completions on 2 GPUs: 8 each)."
        },
    )
    gradient_accumulation_steps: int | None = field(
        default=None,
        metadata={"help": "Forward/backward passes per optimizer step. Default: derived from --prompts_per_step "
                          "(given, it is TRL's batch flag: see --prompts_per_step)."},
    )
    max_completion_length: int = field(
        default=256, metadata={"aliases": ["--max_new_tokens", "--max-new-tokens"],
                               "help": "Most tokens generated per completion (--max_new_tokens works too)."}
    )
    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate (AdamW)."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule."})
    num_train_epochs: float = field(
        default=3.0, metadata={"aliases": ["--num_epochs", "--num-epochs"],
                               "help": "Passes over the prompts (unless --max_steps; --num_epochs works too)."}
    )
    epsilon: float = field(
        default=0.2, metadata={"aliases": ["--clip_range", "--clip-range", "--cliprange"],
                               "help": "PPO-style clip range of the probability ratio (--clip_range works too)."}
    )
    disable_dropout: bool = field(
        default=True,
        metadata={"help": "Turn dropout off in the policy and the reference (TRL's own default is False): with it on "
                  "(GPT-2's 0.1) the old and reference log-probs differ from the policy's own at the first step, and "
                  "KL and ratio carry noise. PPO and the reward model turn it off too."},
    )
    beta: float = field(
        default=0.04,
        metadata={
            "aliases": ["--kl_coef", "--kl-coef"],
            "help": "KL coefficient against the frozen reference. Must be > 0 to keep the reference model and log "
            "`kl` (TRL's own default is 0.0). --kl_coef works too."
        },
    )
    target_kl: float | None = field(
        default=None,
        metadata={"help": "Adaptive KL (this package's addition; TRL's GRPO guide describes it, no TRL release has "
                  "it): --beta moves so that `kl` (per token, as logged) stays near this value, logged as `beta` at "
                  "every step. None keeps --beta fixed."},
    )
    kl_horizon: int = shared("kl_horizon")
    missing_eos_penalty: float | None = field(
        default=None,
        metadata={"help": "Subtracted from the reward of a completion cut off before a stop token (PPO's flag; "
                  "default: none, as TRL's GRPO). Logged as rewards/missing_eos_penalty (docs/rewards.md)."},
    )
    use_dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling (TRL's draft name): a group whose completions all got one reward (the "
            "weighted total, within --dynamic_sampling_tolerance) teaches nothing, so it is dropped and more prompts "
            "are drawn and generated until each generation holds groups whose rewards differ, up to "
            "--dynamic_sampling_max_gen_batches generation batches. Costs generation; pays where many groups get "
            "one reward (docs/training.md)."
        },
    )
    dynamic_sampling_max_gen_batches: int = field(
        default=10,
        metadata={
            "help": "With --use_dynamic_sampling: most generation batches per generation, the first included "
            "(NeMo-RL's name; verl's max_num_gen_batches). Reached, the step trains on the groups found, filled up "
            "with groups whose rewards are one (advantage 0) or differ within --dynamic_sampling_tolerance (TRL's "
            "advantages), said once and counted in dynamic_sampling/cap_reached."
        },
    )
    dynamic_sampling_tolerance: float = field(
        default=1e-6,
        metadata={
            "help": "With --use_dynamic_sampling: a group's rewards differ when its highest and lowest weighted "
            "total are further apart than this x max(1, |reward|) (float noise is not a difference)."
        },
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N optimizer steps."})

    def __post_init__(self):
        check_sampling(self)
        at_least(self, 1, "max_completion_length", "kl_horizon", "steps_per_generation")
        at_least(self, 0, "top_k")  # a negative top_k fails in generation
        if self.epsilon <= 0:  # the clip range: a negative one trains silently
            raise ValueError(f"--epsilon must be > 0, got {self.epsilon}.")
        if self.target_kl is not None and self.target_kl <= 0:
            raise ValueError(f"--target_kl must be > 0 (or unset for a fixed --beta), got {self.target_kl}.")
        if self.target_kl is not None and self.beta == 0:
            raise ValueError("--target_kl adapts --beta, which is 0 here (no reference model, no KL to measure); "
                             "give --beta > 0 (e.g. 0.04) or drop --target_kl.")
        apply_batch_flags(self, grpo_flags)
        if self.gradient_accumulation_steps is None:  # TRL's batch flags as they are, without it: TrainingArguments' 1
            self.gradient_accumulation_steps = 1
        if self.beta < 0:
            raise ValueError(f"--beta must be >= 0, got {self.beta}.")
        check_missing_eos_penalty(self)
        at_least(self, 2, "dynamic_sampling_max_gen_batches",
                 why="1 would never draw a second batch; give 2 or more, or drop --use_dynamic_sampling")
        if not self.dynamic_sampling_tolerance >= 0:
            raise ValueError(f"--dynamic_sampling_tolerance must be >= 0, got {self.dynamic_sampling_tolerance}.")
        check_held_out(self)
        check_training_run(self)
        super().__post_init__()


@dataclass
class PPOModelArguments(ModelArguments):
    """`ModelArguments`, under the name a PPO run's manifest records them by."""


@dataclass
@with_shared(RUN_FIELDS, HELD_OUT_FIELDS)
class PPOTrainingConfig(TrainingArguments):
    """What `rlhf.ppo.trainer.PPOTrainer` reads: TRL 1.12's `PPOConfig` (huggingface/trl, Apache-2.0, copied with its
    trainer when TRL 1.13 removed both), its fields declared here once with this package's defaults, on
    transformers' `TrainingArguments`. TRL's fields this PPO does not have are answered in one line
    (`rlhf.spellings.KNOWN_SPELLINGS`).

    A rollout (TRL's batch, one logged step) generates `prompts_per_rollout` completions, one per prompt, then runs
    `num_ppo_epochs` passes over them in mini-batches of `per_device_train_batch_size x gradient_accumulation_steps
    x processes` prompts: one optimizer step each. Bigger rollouts batch generation; the update size stays.
    """

    _argument_group_name = "Training (PPO, TRL 1.12's PPOConfig, and transformers' TrainingArguments)"

    reward_model_name_or_path: str = shared("reward_model_name_or_path")
    reward_model_dtype: str = shared("reward_model_dtype")
    reward_funcs: list[str] = shared("reward_funcs")
    boxed_correct_reward: float = shared("boxed_correct_reward")
    boxed_wrong_reward: float = shared("boxed_wrong_reward")
    boxed_missing_reward: float = shared("boxed_missing_reward")
    boxed_unboxed_correct_reward: float | None = shared("boxed_unboxed_correct_reward")
    output_dir: str = field(
        default="./ppo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest, the policy and value model go."},
    )
    reward_weights: list[float] | None = shared("reward_weights")
    value_model_path: str | None = field(
        default=None,
        metadata={"help": "Where the value model starts from (default: the reward model when --reward_funcs has "
                  "reward_model, else the policy with a new one-output head)."},
    )
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow models and tokenizers that ship their own Python code (off: safer)."}
    )
    per_device_train_batch_size: int = field(
        default=4, metadata={"help": "Prompts per forward/backward pass on one device (the optimizer step's share)."}
    )
    prompts_per_rollout: int | None = field(
        default=None,
        metadata={
            "help": "Prompts generated together per rollout (summed over devices), then trained on in mini-batches "
            "of per_device_train_batch_size x gradient_accumulation_steps x processes (sets TRL's "
            "num_mini_batches). Default: on a GPU the smallest whole number of mini-batches that reaches 64 prompts, "
            "one mini-batch on a CPU; where TRL's --num_mini_batches is "
            "given, that many mini-batches."
        },
    )
    num_mini_batches: int | None = field(
        default=None,
        metadata={"help": "Mini-batches (optimizer steps) per rollout. Default: derived from --prompts_per_rollout."},
    )
    total_episodes: int | None = field(
        default=None, metadata={"help": "Prompts trained on in all, rounded up to whole rollouts (default: "
                                "--max_steps rollouts, else --num_train_epochs passes over the prompts)."}
    )
    max_steps: int = field(
        default=-1,
        metadata={"help": "Rollouts to train (PPO's steps, as its logs, --save_steps and checkpoints count them: each "
                  "takes num_mini_batches x num_ppo_epochs optimizer steps); sets --total_episodes. -1: "
                  "--total_episodes, else --num_train_epochs."},
    )
    local_rollout_forward_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Sequences per generate call and no-grad forward pass (reference, value, reward) in a rollout. "
            "Each such pass holds float32 logits over the whole vocabulary. Default: 16 on a CPU; on a GPU, the "
            "whole rollout in one call where a quarter of the GPU's memory holds it (rlhf.batches.rollout_chunk). "
            "Lower it to save memory (TRL's default: 64)."
        },
    )
    num_ppo_epochs: int = field(
        default=4, metadata={"aliases": ["--ppo_epochs", "--ppo-epochs"],
                             "help": "Optimization passes over each batch of rollouts (--ppo_epochs works too)."}
    )
    kl_coef: float = field(
        default=0.05, metadata={"aliases": ["--init_kl_coef", "--init-kl-coef"],
                                "help": "(Initial) KL penalty coefficient (--init_kl_coef works too)."}
    )
    target_kl: float | None = field(
        default=None,
        metadata={
            "aliases": ["--target"],
            "help": "Adaptive KL: adjust kl_coef so that objective/kl (summed over a completion's tokens) stays near "
            "this value. None keeps kl_coef fixed (--target, the older TRL's name, works too)."
        },
    )
    kl_horizon: int = shared("kl_horizon")
    kl_estimator: Literal["k1", "k3"] = field(
        default="k1", metadata={"help": "KL estimator: k1 (unbiased) or k3 (unbiased, lower variance, never < 0)."}
    )
    gamma: float = field(default=1.0, metadata={"help": "Discount factor."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda of the policy's advantages."})
    value_lam: float | None = field(
        default=None,
        metadata={"help": "GAE lambda of the returns the value model learns (decoupled GAE, VC-PPO / VAPO: 1.0 "
                  "regresses it on the rewards to come, a target free of its own errors). Default: --lam."},
    )
    critic_warmup: int = field(
        default=0,
        metadata={"help": "The first N rollouts train the value model alone (verl's critic_warmup): the policy, its "
                  "optimizer state and learning-rate schedule hold still, the KL coefficient too; the value model "
                  "learns at --learning_rate. They count toward the run's length (--max_steps, --total_episodes or "
                  "--num_train_epochs): the policy trains in the rollouts after them, over which its schedule runs."},
    )
    whiten_rewards: bool = field(
        default=False, metadata={"help": "Whiten the per-token rewards over the rollout (every process's) before GAE."}
    )
    whiten_advantages: bool = field(
        default=True,
        metadata={"help": "Scale the rollout's advantages (every process's) to mean 0 and variance 1, as TRL does. "
                  "false keeps GAE's advantages: a rollout with one rewarded completion then pushes up that one "
                  "instead of pushing down every other (false is this package's addition)."},
    )
    value_head_init: Literal["random", "zero"] = field(
        default="random",
        metadata={"help": "The value model's one-output head when a run starts: random (a new head as transformers "
                  "starts it, TRL's; a trained one, the reward model's or --value_model_path's, is kept) or zero: "
                  "every value starts at 0, so with --lam 1.0 the first advantages are the rewards, without an "
                  "untrained critic's noise (zero is this package's addition; a trained head set to 0 is said in a "
                  "note). A resumed run keeps its checkpoint's head."},
    )
    cliprange: float = field(
        default=0.2, metadata={"aliases": ["--clip_range", "--clip-range"],
                               "help": "Clip range of the policy ratio (--clip_range works too)."}
    )
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss beside the policy loss."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip range of the value prediction."})
    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate (AdamW)."})
    temperature: float = shared("temperature")
    top_p: float = field(
        default=1.0,
        metadata={
            "help": "Nucleus sampling threshold of the rollouts (this package's addition: TRL's PPO always samples "
            "at 1.0). The log-probabilities, importance ratio and KL are those of the full distribution at "
            "--temperature, as with GRPO's --top_p, so below 1.0 the gradient is biased. Evaluation keeps 0.9."
        },
    )
    skip_rollouts_without_signal: bool = field(
        default=True,
        metadata={
            "help": "A rollout whose completions (every process's) all scored the same, e.g. none passed the "
            "verifier, is trained on with advantages of 0: the policy does not move (momentum included), the value "
            "model still learns (this package's addition; TRL whitens them to unit size, a full step from noise). "
            "Logged as objective/advantages_zeroed."
        },
    )
    max_completion_length: int = field(
        default=256,
        metadata={"aliases": ["--response_length", "--response-length", "--max_new_tokens", "--max-new-tokens"],
                  "help": "Most tokens generated per completion (TRL's --response_length and --max_new_tokens work "
                  "too)."},
    )
    stop_token: str | None = field(
        default="eos", metadata={"help": "Completions end at the model's end tokens: the tokenizer's EOS and every "
                                 "EOS id its generation config declares (none: at --stop_token_id alone)."}
    )
    stop_token_id: int | None = field(
        default=None, metadata={"help": "A stop token by id instead (exclusive with --stop_token)."}
    )
    missing_eos_penalty: float | None = field(
        default=1.0, metadata={"help": "Subtracted from the score of a completion cut off before a stop token."}
    )
    num_train_epochs: float = field(
        default=3.0, metadata={"aliases": ["--num_epochs", "--num-epochs"],
                               "help": "Passes over the prompts (unless --max_steps or --total_episodes; --num_epochs "
                               "works too)."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N PPO batches."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N PPO batches."})
    gradient_checkpointing: bool = field(  # TRL's PPOConfig had it on, and never applied it
        default=True, metadata={"help": "Recompute the policy's and value model's activations in the backward pass: "
                                "less memory, the same numbers (--no_gradient_checkpointing: off)."}
    )
    lr_scheduler_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Additional parameters for the lr_scheduler, e.g. {'num_cycles': 1}."}
    )
    ds3_gather_for_generation: bool = field(
        default=True,
        metadata={"help": "DeepSpeed ZeRO-3: gather the policy's weights for generation (faster; off: less memory)."},
    )
    # TRL's name of a field given above under the name every script shares: set from it, not a flag itself. (The
    # sizes TRL's PPOTrainer computed and wrote onto its config, the trainer holds: `rlhf.batches.ppo_sizes`.)
    response_length: int = field(default=256, init=False)

    def __post_init__(self):
        self.response_length = self.max_completion_length  # what TRL's PPOTrainer generates to
        if self.push_to_hub:  # TRL's PPO pushed through transformers' Trainer, which ours is not (saving is its own)
            raise ValueError("--push_to_hub is not supported by train_ppo.py; upload the output folder once it has "
                             "trained: huggingface-cli upload NAME ./ppo_training_output (or your --output_dir).")
        if self.target_kl is not None and self.target_kl <= 0:
            raise ValueError(f"--target_kl must be > 0 (or unset for a fixed kl_coef), got {self.target_kl}.")
        if self.kl_coef < 0:
            raise ValueError(f"--kl_coef must be >= 0, got {self.kl_coef}.")
        for name in ("lam", "value_lam"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"--{name} must be between 0 and 1, got {value}.")
        if self.critic_warmup < 0:
            raise ValueError(f"--critic_warmup must be >= 0 rollouts (0: none), got {self.critic_warmup}.")
        check_missing_eos_penalty(self)
        if self.target_kl is not None and self.kl_coef == 0:  # the controller multiplies: 0 would stay 0 for ever
            raise ValueError("--target_kl adapts --kl_coef, which is 0 here (a coefficient of 0 never moves); give "
                             "--kl_coef > 0 (e.g. 0.05) or drop --target_kl.")
        check_sampling(self)
        at_least(self, 1, "per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length",
                 "local_rollout_forward_batch_size", "num_ppo_epochs", "num_mini_batches", "total_episodes",
                 "kl_horizon")
        if str(self.stop_token).lower() == "none":  # --stop_token none: completions end at --stop_token_id
            self.stop_token = None
        if self.stop_token not in ("eos", None):
            raise ValueError(f"--stop_token {self.stop_token} is not supported; use eos, or none with "
                             "--stop_token_id.")
        if self.stop_token and self.stop_token_id is not None:
            raise ValueError(f"--stop_token {self.stop_token} and --stop_token_id {self.stop_token_id} both set where "
                             "completions end; give one (--stop_token none --stop_token_id ID)")
        apply_batch_flags(self, ppo_flags)
        check_held_out(self)
        check_training_run(self)
        super().__post_init__()

    boxed_rewards = RewardArguments.boxed_rewards  # the same four fields, declared here too


@dataclass
@with_shared(RUN_FIELDS)
class RewardTrainingConfig(RewardConfig):
    """TRL's `RewardConfig` with this package's defaults."""

    _argument_group_name = "Training (TRL's RewardConfig and transformers' TrainingArguments)"

    output_dir: str = field(
        default="./reward_model_output",
        metadata={"help": "Where the reward model goes; train_grpo.py and train_ppo.py read it from here by default."},
    )
    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate (AdamW)."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule."})
    warmup_steps: float = field(default=0.05, metadata={"help": "Warm-up: steps, or a fraction of all steps if < 1."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the pairs (ignored if --max_steps)."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Preference pairs per device per pass."})
    max_length: int | None = field(
        default=1024, metadata={"help": "Pairs whose chosen or rejected conversation is longer are dropped."}
    )
    logging_steps: float = field(default=10, metadata={"help": "Log every N optimizer steps."})
    save_steps: float = field(default=100, metadata={"help": "Save a checkpoint every N optimizer steps."})

    def __post_init__(self):
        at_least(self, 1, "max_length")
        check_training_run(self)
        super().__post_init__()
