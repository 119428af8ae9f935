"""The arguments every script shares, on TRL's own `ModelConfig` and `ScriptArguments`, parsed by `rlhf/cli.py`.

Precedence: the defaults below < a YAML file given with `--config` < command-line flags. TRL's names work
(`--use_peft`, `--dataset_train_split`, `--reward_model_name_or_path`), so a YAML written for `trl grpo` runs here;
the older spellings stay as aliases (`--use_lora`, `--use-lora`, `--dataset_split`, `--reward_model_path`).
Dashes and underscores are interchangeable. Each training script's own config (every field of TRL's trainer
config is a flag too) is at the end: `GRPOTrainingConfig`, `PPOTrainingConfig`, `RewardTrainingConfig`, each a
subclass of TRL's config that declares the fields it adds or whose default differs.

These classes declare and check, nothing else: each `__post_init__` derives from its own fields and raises
ValueError naming the flag, the value and the rule (the checks: `rlhf/fields/checks.py`, one function per class,
which the scripts also run on their flags before the heavy imports; a field several classes declare alike is
`shared(name)`, declared once in `rlhf/fields/shared.py`). What the launch and the machine decide
(CPU processes, TF32, GRPO's and PPO's batches in TRL's terms, `rlhf.batches`) and every `note:` line are settled by
`rlhf/cli.py` while parsing, before these classes are built (each class names its steps in `_settled`); what needs
installed packages or the models, by `rlhf/preflight.py`.
"""

from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments

from rlhf.fields.checks import (
    check_data,
    check_dataset_source,
    check_evaluation,
    check_grpo_config,
    check_model,
    check_ppo_config,
    check_preference_data,
    check_prompt_data,
    check_reward_config,
)
from rlhf.fields.shared import HELD_OUT_FIELDS, RUN_FIELDS, shared, with_shared
from rlhf.models import DEFAULT_LORA_TARGETS
from rlhf.trl_compat import GRPOConfig, ModelConfig, RewardConfig, ScriptArguments


@dataclass
class ModelArguments(ModelConfig):
    """TRL's `ModelConfig` (every field a flag: --use_peft, --lora_*, --use_rslora, --load_in_4bit, ...) with this
    package's defaults and checks."""

    _argument_group_name = "Model and LoRA (TRL's ModelConfig)"
    # What the parser settles from these flags before the configs are built, in order (`rlhf.cli.SETTLE`).
    _settled = ("lora_without_peft",)

    model_name_or_path: str = field(
        default="HuggingFaceTB/smollm2-135M-SFT-Only",
        metadata={"aliases": ["--model_name", "--model-name", "--model_path", "--model-path", "--sft_model_path",
                              "--sft-model-path"],
                  "help": "Policy to train: a Hugging Face Hub id or a local folder (--model_name, --model_path and "
                  "TRL's --sft_model_path work too)."},
    )
    dtype: str = field(
        default="float32",
        metadata={"help": "Dtype the weights are loaded in. Mixed precision is set separately with --bf16; float32 "
                  "master weights with --bf16 is the stable choice for training.",
                  "choices": ["auto", "bfloat16", "float16", "float32"]},
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
        metadata={"help": "Train all weights loaded in bfloat16/float16 (--dtype) anyway. Refused otherwise: AdamW "
                  "updates smaller than the format's resolution (about 1e-3 of a weight in bfloat16) are lost. "
                  "LoRA needs no flag."},
    )
    load_in_4bit: bool = field(
        default=False,
        metadata={"help": "QLoRA: load the trained model's frozen weights in 4-bit NF4 (bitsandbytes; a CUDA GPU "
                  "and --use_peft needed). Saves memory; the LoRA adapter computes in bf16."},
    )

    def __post_init__(self):
        super().__post_init__()
        check_model(self)


@dataclass
class DatasetSource(ScriptArguments):
    """TRL's `ScriptArguments` (--dataset_name, --dataset_train_split, ...) with this package's defaults."""

    _argument_group_name = "Data (TRL's ScriptArguments)"

    dataset_name: str = field(
        default="Intel/orca_dpo_pairs",
        metadata={"help": "A Hugging Face Hub dataset, or a local file or folder (json, jsonl, parquet, csv). "
                  "Recognised columns: system/question (Intel ORCA), prompt + chosen/rejected messages (H4 ORCA), "
                  "prompt (TRL), or question (+ ground_truth) for math."},
    )
    dataset_train_split: str = field(
        default="train",
        metadata={"aliases": ["--dataset_split", "--dataset-split"],
                  "help": "Split to read (evaluate_generations.py draws its prompts from the rows after "
                  "--train_samples)."},
    )

    def __post_init__(self):
        check_dataset_source(self)


@dataclass
class DataArguments(DatasetSource):
    """Where the training rows come from."""

    max_samples: int | None = field(
        default=10_000,
        metadata={"help": "Use only the first N rows of the split (None or 0: all of them)."},
    )

    def __post_init__(self):
        check_data(self)


@dataclass
class PromptFormat:
    """How dataset rows become prompts (GRPO, PPO, evaluation)."""

    max_prompt_length: int = field(
        default=512,
        metadata={"help": "Prompts longer than this many tokens (after the chat template) are dropped and counted."},
    )
    system_prompt: str | None = field(
        default=None,
        metadata={"help": "System message for rows that have none, e.g. 'Put your final answer within \\boxed{}.' "
                  "for math data scored with boxed_answer."},
    )
    append_system_prompt: str | None = field(
        default=None,
        metadata={"help": "Appended to every row's system message (the system message of rows that have none), "
                  "e.g. 'Answer in two or three short sentences.' where the data's own system messages ask for "
                  "long answers."},
    )


@dataclass
class PromptDataArguments(PromptFormat, DataArguments):
    """Prompts for the RL scripts."""

    def __post_init__(self):
        check_prompt_data(self)


@dataclass
class PreferenceDataArguments(DataArguments):
    """Preference pairs for the reward model."""

    eval_samples: int = field(
        default=50,
        metadata={"help": "Pairs held out (a seeded random pick among the rows read) to measure pairwise accuracy "
                  "at the end; 0 turns the held-out evaluation off."},
    )

    def __post_init__(self):
        check_preference_data(self)


@dataclass
class RewardArguments:
    """What scores completions: the frozen reward model, rule-based rewards, your own functions."""

    _argument_group_name = "Reward"
    _settled = ("reward_model_unused",)  # (`rlhf.cli.SETTLE`)

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


@dataclass
class EvalArguments(PromptFormat, Sampling, DatasetSource):
    """What evaluate_generations.py compares, on which prompts, and how it samples."""

    _argument_group_name = "Evaluation"

    model_path: list[str] = field(
        default_factory=list,
        metadata={"aliases": ["--model_name_or_path", "--model-name-or-path"],
                  "help": "One or more models (folders or Hub ids; LoRA adapter folders load onto their base). The "
                  "first is the baseline the others are compared with. --model_name_or_path works too."},
    )
    reward_weights: list[float] | None = shared("reward_weights")
    train_samples: int = field(
        default=10_000,
        metadata={"help": "Rows at the start of the split that training used (its --max_samples); prompts are "
                  "drawn from the rows after them, so evaluation never sees a training prompt. 0: draw from all "
                  "rows."},
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
        metadata={"help": "A judge: a second sequence classifier (num_labels=1, a folder or a Hub id, scoring with "
                  "its own tokenizer and chat template, in the reward model's dtype) that scores every completion "
                  "too; its win rates are reported beside the reward's, and a line says where they disagree. Pick "
                  "one the policies never trained against (docs/evaluation.md, A judge)."},
    )

    def __post_init__(self):
        check_evaluation(self)


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
    _settled = ("held_out_off", "dynamic_sampling_off", "grpo_batches", "best_checkpoint_kept")  # (`rlhf.cli.SETTLE`)

    output_dir: str = field(
        default="./grpo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest and the final model go."},
    )
    prompts_per_step: int | None = field(
        default=None,
        metadata={"help": "Prompts per optimizer step (summed over devices). With num_generations=4 that is 16 "
                  "completions per step; gradient_accumulation_steps is derived from it. Default: 4, or 0 where "
                  "TRL's batch flags are given (--gradient_accumulation_steps, --generation_batch_size, "
                  "--steps_per_generation): 0 uses them as they are, as `trl grpo` does."},
    )
    batch_size: int | None = field(
        default=None,
        metadata={"help": "A hand-written GRPO's batch: prompts per forward/backward pass on each device, each "
                  "with its num_generations completions, gradient_accumulation_steps passes per optimizer step. "
                  "Translated, saying so: --prompts_per_step = batch_size x gradient_accumulation_steps x "
                  "processes, --per_device_train_batch_size = batch_size x num_generations (the manifest records "
                  "those)."},
    )
    prompts_per_generation: int | None = field(
        default=None,
        metadata={"help": "Prompts whose completions are generated together, then trained on over "
                  "prompts_per_generation / prompts_per_step optimizer steps (a multiple of --prompts_per_step). "
                  "Default: on a GPU, where generation is most of a step and batches well, the smallest multiple "
                  "of --prompts_per_step that reaches 64 (64 for the default 4); --prompts_per_step on a CPU. "
                  "Completions trained on at later steps come from an older policy: TRL weighs them by the ratio "
                  "to the old log-probabilities, clipped at --epsilon."},
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
        metadata={"help": "Nucleus sampling threshold of the rollouts. 1.0 (as TRL, OpenRLHF and verl train): the "
                  "log-probabilities, importance ratio and KL are computed on the full distribution, so sampling "
                  "from a truncated one would bias the gradient. Evaluation keeps 0.9."},
    )
    per_device_train_batch_size: int = field(
        default=16,
        metadata={"help": "Completions (not prompts) per forward/backward pass on one device. Lower it to save "
                  "memory. Capped at one step's share per device (16 completions on 2 GPUs: 8 each)."},
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
        metadata={"aliases": ["--kl_coef", "--kl-coef"],
                  "help": "KL coefficient against the frozen reference. Must be > 0 to keep the reference model "
                  "and log `kl` (TRL's own default is 0.0). --kl_coef works too."},
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
        metadata={"help": "DAPO's dynamic sampling (TRL's draft name): a group whose completions all got one "
                  "reward (the weighted total, within --dynamic_sampling_tolerance) teaches nothing, so it is "
                  "dropped and more prompts are drawn and generated until each generation holds groups whose "
                  "rewards differ, up to --dynamic_sampling_max_gen_batches generation batches. Costs generation; "
                  "pays where many groups get one reward (docs/training.md)."},
    )
    dynamic_sampling_max_gen_batches: int = field(
        default=10,
        metadata={"help": "With --use_dynamic_sampling: most generation batches per generation, the first included "
                  "(NeMo-RL's name; verl's max_num_gen_batches). Reached, the step trains on the groups found, "
                  "filled up with groups whose rewards are one (advantage 0) or differ within "
                  "--dynamic_sampling_tolerance (TRL's advantages), said once and counted in "
                  "dynamic_sampling/cap_reached."},
    )
    dynamic_sampling_tolerance: float = field(
        default=1e-6,
        metadata={"help": "With --use_dynamic_sampling: a group's rewards differ when its highest and lowest "
                  "weighted total are further apart than this x max(1, |reward|) (float noise is not a difference)."},
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N optimizer steps."})

    def __post_init__(self):
        check_grpo_config(self)
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
    _settled = ("reward_model_unused", "held_out_off", "ppo_batches", "stop_token_none",  # (`rlhf.cli.SETTLE`)
                "best_checkpoint_kept")

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
        metadata={"help": "Prompts generated together per rollout (summed over devices), then trained on in "
                  "mini-batches of per_device_train_batch_size x gradient_accumulation_steps x processes (sets "
                  "TRL's num_mini_batches). Default: on a GPU the smallest whole number of mini-batches that "
                  "reaches 64 prompts, one mini-batch on a CPU; where TRL's --num_mini_batches is given, that many "
                  "mini-batches."},
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
        metadata={"help": "Sequences per generate call and no-grad forward pass (reference, value, reward) in a "
                  "rollout. Each such pass holds float32 logits over the whole vocabulary. Default: 16 on a CPU; "
                  "on a GPU, the whole rollout in one call where a quarter of the GPU's memory holds it "
                  "(rlhf.batches.rollout_chunk). Lower it to save memory (TRL's default: 64)."},
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
        metadata={"aliases": ["--target"],
                  "help": "Adaptive KL: adjust kl_coef so that objective/kl (summed over a completion's tokens) "
                  "stays near this value. None keeps kl_coef fixed (--target, the older TRL's name, works too)."},
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
        metadata={"help": "Nucleus sampling threshold of the rollouts (this package's addition: TRL's PPO always "
                  "samples at 1.0). The log-probabilities, importance ratio and KL are those of the full "
                  "distribution at --temperature, as with GRPO's --top_p, so below 1.0 the gradient is biased. "
                  "Evaluation keeps 0.9."},
    )
    skip_rollouts_without_signal: bool = field(
        default=True,
        metadata={"help": "A rollout whose completions (every process's) all scored the same, e.g. none passed the "
                  "verifier, is trained on with advantages of 0: the policy does not move (momentum included), the "
                  "value model still learns (this package's addition; TRL whitens them to unit size, a full step "
                  "from noise). Logged as objective/advantages_zeroed."},
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
        check_ppo_config(self)
        super().__post_init__()

    boxed_rewards = RewardArguments.boxed_rewards  # the same four fields, declared here too


@dataclass
@with_shared(RUN_FIELDS)
class RewardTrainingConfig(RewardConfig):
    """TRL's `RewardConfig` with this package's defaults."""

    _argument_group_name = "Training (TRL's RewardConfig and transformers' TrainingArguments)"
    _settled = ("reward_model_eval_steps",)  # (`rlhf.cli.SETTLE`)

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
        check_reward_config(self)
        super().__post_init__()
