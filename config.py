"""Configuration for every script: dataclasses parsed with TRL's `TrlParser`.

Precedence: the defaults below < a YAML file given with `--config` < command-line flags.
Every field of TRL's `GRPOConfig` (and of `transformers.TrainingArguments`) is a flag too, e.g.
`--max_steps 10 --learning_rate 1e-6 --use_cpu`. Dashes and underscores are interchangeable:
`--use-lora` and `--use_lora` are the same flag.
"""

from dataclasses import dataclass, field

from rlhf.models import DEFAULT_LORA_TARGETS
from rlhf.processes import launched_processes


@dataclass
class ModelArguments:
    """The policy being trained, and how (full fine-tuning or LoRA)."""

    model_name_or_path: str = field(
        default="HuggingFaceTB/smollm2-135M-SFT-Only",
        metadata={"help": "Policy to train: a Hugging Face Hub id or a local folder."},
    )
    dtype: str = field(
        default="float32",
        metadata={
            "help": "Dtype the weights are loaded in (float32, bfloat16, float16 or auto). Mixed precision is "
            "set separately with --bf16; float32 master weights with --bf16 is the stable choice for training."
        },
    )
    use_lora: bool = field(
        default=False,
        metadata={"help": "Train a LoRA adapter instead of all weights (--use-lora and --use_lora both work)."},
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling factor alpha (the update is scaled by alpha/r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: list(DEFAULT_LORA_TARGETS),
        metadata={"help": "Modules that get LoRA adapters (default: the attention projections), or all-linear."},
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
            "--use_lora needed). Saves memory; the LoRA adapter trains in bf16."
        },
    )

    def __post_init__(self):
        at_least(self, 1, "lora_r")
        # A YAML scalar (`lora_target_modules: q_proj` or `all-linear`) arrives as a string; commas separate names too.
        names = [self.lora_target_modules] if isinstance(self.lora_target_modules, str) else self.lora_target_modules
        self.lora_target_modules = [part for name in names for part in str(name).replace(",", " ").split()]
        if not self.lora_target_modules:
            raise ValueError("--lora_target_modules needs a module name (e.g. q_proj v_proj) or all-linear.")
        if self.lora_alpha <= 0:
            raise ValueError(f"--lora_alpha must be > 0, got {self.lora_alpha}.")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"--lora_dropout must be in [0, 1), got {self.lora_dropout}.")
        if self.load_in_4bit and not self.use_lora:
            raise ValueError("--load_in_4bit trains a LoRA adapter on frozen 4-bit weights (QLoRA); add --use_lora.")


@dataclass
class DatasetSource:
    """Which dataset and split (training and evaluation)."""

    dataset_name: str = field(
        default="Intel/orca_dpo_pairs",
        metadata={
            "help": "A Hugging Face Hub dataset, or a local file or folder (json, jsonl, parquet, csv). Recognised "
            "columns: system/question (Intel ORCA), prompt + chosen/rejected messages (H4 ORCA), prompt (TRL), or "
            "question (+ ground_truth) for math."
        },
    )
    dataset_split: str = field(default="train", metadata={"help": "Split to read."})

    def __post_init__(self):
        for name in ("dataset_name", "dataset_split"):
            if not str(getattr(self, name) or "").strip():
                raise ValueError(f"--{name} is empty; give a value (or drop the flag for its default).")
        _next_post_init(self, DatasetSource)


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

    def __post_init__(self):
        at_least(self, 1, "max_prompt_length")
        _next_post_init(self, PromptFormat)


@dataclass
class DataArguments(DatasetSource):
    """Where the training rows come from."""

    max_samples: int | None = field(
        default=10_000,
        metadata={"help": "Use only the first N rows of the split (None or 0: all of them)."},
    )

    def __post_init__(self):
        at_least(self, 0, "max_samples")
        _next_post_init(self, DataArguments)


@dataclass
class PromptDataArguments(DataArguments, PromptFormat):
    """Prompts for the RL scripts."""


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


@dataclass
class RewardModelArguments:
    """The frozen reward model (GRPO, PPO, evaluation)."""

    reward_model_path: str = field(
        default="./reward_model_output",
        metadata={
            "help": "Sequence-classification reward model (num_labels=1): a local folder or a Hub id. GRPO and "
            "evaluation score with its own tokenizer and chat template; PPO needs it to share the policy's tokenizer. "
            "Make one with `python train_reward_model.py`."
        },
    )
    reward_model_dtype: str = field(
        default="auto",
        metadata={
            "help": "Dtype the frozen reward model loads in: auto (bfloat16 when training on a CUDA GPU, else "
            "--dtype), float32, bfloat16 or float16. bfloat16 halves its memory; on CPU its speed depends on the "
            "processor (README: Performance)."
        },
    )


@dataclass
class RewardArguments(RewardModelArguments):
    """What scores completions: the frozen reward model, rule-based rewards, your own functions."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["reward_model"],
        metadata={
            "help": "Reward functions, summed with --reward_weights: reward_model, boxed_answer (math verifier on "
            "\\boxed{} answers vs the ground_truth column), boxed_format, or module.function (TRL's signature)."
        },
    )
    boxed_correct_reward: float = field(default=1.0, metadata={"help": "boxed_answer: reward of a correct answer."})
    boxed_wrong_reward: float = field(default=-1.0, metadata={"help": "boxed_answer: reward of a wrong answer."})
    boxed_missing_reward: float = field(
        default=-0.5, metadata={"help": "boxed_answer: reward when there is no \\boxed{} answer."}
    )

    @property
    def boxed_rewards(self):
        return self.boxed_correct_reward, self.boxed_wrong_reward, self.boxed_missing_reward


@dataclass
class Sampling:
    """How completions are sampled (GRPO and evaluation; PPO samples with its temperature alone, top_p 1.0)."""

    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=0.9, metadata={"help": "Nucleus sampling threshold."})

    def __post_init__(self):
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0 for sampling, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top_p must be in (0, 1], got {self.top_p}.")
        _next_post_init(self, Sampling)


@dataclass
class _RunDefaults:
    """Defaults shared by every training script (placed before the TRL config in the bases, so they win)."""

    bf16: bool = field(
        default=False,
        metadata={
            "help": "bf16 autocast (mixed precision over float32 weights). Off: on a GPU, TF32 (--tf32) was measured "
            "faster for a model of this size (README: Performance)."
        },
    )
    tf32: bool | None = field(
        default=None,
        metadata={"help": "TF32 matmuls on an Ampere or newer NVIDIA GPU. Default: on where available, else off."},
    )
    report_to: None | str | list[str] = field(default="tensorboard", metadata={"help": "Where metrics go."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep only the newest N checkpoints."})
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={"help": "Hide NaN/inf losses in the logs (off: a non-finite loss is shown and stops the run)."},
    )

    # Whether the script hands the Trainer an evaluation set (PPO's: the sample completions it logs); without one
    # --eval_strategy fails once the models have loaded.
    EVAL_DATASET = False

    def __post_init__(self):
        if launched_processes() > 1 and not self.use_cpu and not _cuda_available():
            # Several processes on a machine without a GPU (torchrun / accelerate launch on CPU): without use_cpu,
            # transformers starts no process group and every process would train alone on all the data.
            self.use_cpu = True
        if self.tf32 is None:
            self.tf32 = _cuda_supports_tf32() and not self.use_cpu
        if not _cuda_available():
            self.dataloader_pin_memory = False  # pinned memory only helps a GPU; without one torch warns every run
        if self.learning_rate <= 0:
            raise ValueError(f"--learning_rate must be > 0, got {self.learning_rate}.")
        if getattr(self, "temperature", 1.0) <= 0:  # PPO's; GRPO's is checked by Sampling
            raise ValueError(f"--temperature must be > 0 for sampling, got {self.temperature}.")
        at_least(self, 1, "per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length",
                 "max_length", "num_ppo_epochs", "num_mini_batches", "total_episodes", "kl_horizon")
        for name in ("num_train_epochs", "logging_steps", "save_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}.")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(f"--max_steps must be >= 1 (or -1: train --num_train_epochs), got {self.max_steps}.")
        at_least(self, 0, "seed", "top_k")  # a negative seed fails in numpy, a negative top_k in generation
        at_least(self, 1, "steps_per_generation")
        if getattr(self, "epsilon", 1) <= 0:  # GRPO's clip range: a negative one trains silently
            raise ValueError(f"--epsilon must be > 0, got {self.epsilon}.")
        if getattr(self, "stop_token", "eos") not in ("eos", None):
            raise ValueError(f"--stop_token {self.stop_token} is not supported; use eos (or none in a YAML config).")
        strategy = getattr(self.eval_strategy, "value", self.eval_strategy)
        if not self.EVAL_DATASET and strategy != "no":
            raise ValueError(f"--eval_strategy {strategy} needs an evaluation set, which this script has none of; "
                             "drop it (train_reward_model.py measures held-out accuracy after training).")
        if self.seed >= 2**32:
            raise ValueError(f"--seed must be below 2**32 (numpy's limit), got {self.seed}.")
        if self.output_dir is not None and not str(self.output_dir).strip():
            raise ValueError("--output_dir is empty; give the folder the run writes to.")
        if self.bf16 and not self.use_cpu and not _bf16_available():  # transformers' own refusal names no flag
            raise ValueError("--bf16 needs a GPU with bfloat16 support, and this machine has none; drop --bf16 (or "
                             "add --use_cpu for bf16 autocast on the CPU).")
        _check_report_to(self.report_to)
        super().__post_init__()


@dataclass
class _GRPOFields(Sampling, _RunDefaults):
    """TRL's `GRPOConfig` with this package's defaults, plus `prompts_per_step` (the config is `GRPOTrainingConfig`).

    Batch semantics: TRL counts *completions*, not prompts. `per_device_train_batch_size` is how many
    completions go through one forward/backward pass on one device. One optimizer step sees
    `prompts_per_step * num_generations` completions; `gradient_accumulation_steps` is derived from that.
    """

    output_dir: str = field(
        default="./grpo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest and the final model go."},
    )
    prompts_per_step: int = field(
        default=4,
        metadata={
            "help": "Prompts per optimizer step (summed over devices). With num_generations=4 that is 16 completions "
            "per step; gradient_accumulation_steps is derived from it. Set 0 to use TRL's batch flags as they are."
        },
    )
    prompts_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Prompts whose completions are generated together, then trained on over prompts_per_generation / "
            "prompts_per_step optimizer steps (a multiple of --prompts_per_step). Default: 64 on a GPU, where "
            "generation is most of a step and batches well; --prompts_per_step on a CPU. Completions trained on at "
            "later steps come from an older policy: TRL weighs them by the ratio to the old log-probabilities, "
            "clipped at --epsilon."
        },
    )
    num_generations: int = field(default=4, metadata={"help": "Completions sampled per prompt (the GRPO group)."})
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
    max_completion_length: int = field(default=256, metadata={"help": "Most tokens generated per completion."})
    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate (AdamW)."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the prompts (ignored if --max_steps)."})
    epsilon: float = field(default=0.2, metadata={"help": "PPO-style clip range of the probability ratio."})
    beta: float = field(
        default=0.04,
        metadata={
            "help": "KL coefficient against the frozen reference. Must be > 0 to keep the reference model and log `kl` "
            "(TRL's own default is 0.0)."
        },
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N optimizer steps."})

    def __post_init__(self):
        if self.prompts_per_step < 0:
            raise ValueError(f"--prompts_per_step must be >= 0, got {self.prompts_per_step}.")
        at_least(self, 2, "num_generations")  # GRPO's advantage compares completions of one prompt
        at_least(self, 1, "per_device_train_batch_size")
        if self.prompts_per_step:
            # Translate prompts into TRL's completion-counted batch before TRL derives its generation batch from it.
            world_size = launched_processes()
            completions = self.prompts_per_step * self.num_generations
            if self.per_device_train_batch_size * world_size > completions and completions % world_size == 0:
                # More room per pass than one step holds (e.g. the default 16 on 2 GPUs): each device takes its share.
                self.per_device_train_batch_size = completions // world_size
            per_pass = self.per_device_train_batch_size * world_size
            if completions % per_pass:
                raise ValueError(
                    f"prompts_per_step x num_generations = {completions} completions per optimizer step is not a "
                    f"multiple of per_device_train_batch_size x processes = {per_pass}; lower "
                    f"--per_device_train_batch_size so that it divides evenly."
                )
            accumulation = completions // per_pass
            if self.gradient_accumulation_steps not in (1, accumulation):
                raise ValueError(
                    f"--gradient_accumulation_steps {self.gradient_accumulation_steps} conflicts with "
                    f"--prompts_per_step {self.prompts_per_step} (which needs {accumulation}); pass "
                    f"--prompts_per_step 0 to set TRL's batch flags yourself."
                )
            self.gradient_accumulation_steps = accumulation
            if self.prompts_per_generation is None:
                on_gpu = _cuda_available() and not self.use_cpu
                self.prompts_per_generation = max(GPU_PROMPTS_PER_GENERATION, self.prompts_per_step) if on_gpu \
                    else self.prompts_per_step
            if self.prompts_per_generation % self.prompts_per_step:
                raise ValueError(
                    f"--prompts_per_generation {self.prompts_per_generation} is not a multiple of --prompts_per_step "
                    f"{self.prompts_per_step}; each optimizer step takes prompts_per_step of the prompts generated."
                )
            # TRL derives steps_per_generation (forward/backward passes per generation) from this.
            self.generation_batch_size = self.prompts_per_generation * self.num_generations
        if self.beta < 0:
            raise ValueError(f"--beta must be >= 0, got {self.beta}.")
        super().__post_init__()


@dataclass
class _RewardFields(_RunDefaults):
    """TRL's `RewardConfig` with this package's defaults (a Bradley-Terry pairwise loss on chosen vs rejected)."""

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


@dataclass
class _PPOFields(_RunDefaults, RewardModelArguments):
    """TRL's `PPOConfig` with this package's defaults, plus adaptive KL, the value model's source and
    `prompts_per_rollout` (the config is `PPOTrainingConfig`).

    A rollout (TRL's batch, one logged step) generates `prompts_per_rollout` completions, one per prompt, then runs
    `num_ppo_epochs` passes over them in mini-batches of `per_device_train_batch_size x gradient_accumulation_steps
    x processes` prompts: one optimizer step each. Bigger rollouts batch generation; the update size stays.
    """

    EVAL_DATASET = True

    output_dir: str = field(
        default="./ppo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest, the policy and value model go."},
    )
    value_model_path: str | None = field(
        default=None, metadata={"help": "Where the value model starts from (default: the reward model)."}
    )
    sft_model_path: str = field(default="", metadata={"help": "Not used: the policy is --model_name_or_path."})
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
            "num_mini_batches). Default: 64 on a GPU; one mini-batch on a CPU."
        },
    )
    local_rollout_forward_batch_size: int = field(
        default=16,
        metadata={
            "help": "Sequences per generation and no-grad forward pass (reference, value, reward) in a rollout. Each "
            "such pass holds float32 logits over the whole vocabulary: lower it to save memory (TRL's default: 64)."
        },
    )
    num_ppo_epochs: int = field(default=4, metadata={"help": "Optimization passes over each batch of rollouts."})
    kl_coef: float = field(default=0.05, metadata={"help": "(Initial) KL penalty coefficient."})
    target_kl: float | None = field(
        default=None,
        metadata={
            "help": "Adaptive KL: adjust kl_coef so that objective/kl (summed over a completion's tokens) stays near "
            "this value. None keeps kl_coef fixed."
        },
    )
    kl_horizon: int = field(
        default=10_000, metadata={"help": "Adaptive KL horizon in episodes: larger adapts more slowly."}
    )
    gamma: float = field(default=1.0, metadata={"help": "Discount factor."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda."})
    cliprange: float = field(default=0.2, metadata={"help": "Clip range of the policy ratio."})
    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate (AdamW)."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    max_completion_length: int = field(
        default=256, metadata={"help": "Most tokens generated per completion (TRL's --response_length)."}
    )
    response_length: int | None = field(default=None, metadata={"help": "Alias of --max_completion_length."})
    stop_token: str | None = field(default="eos", metadata={"help": "Completions end at the EOS token."})
    missing_eos_penalty: float | None = field(
        default=1.0, metadata={"help": "Subtracted from the score of a completion cut off before EOS."}
    )
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the prompts (unless total_episodes)."})
    num_sample_generations: int = field(
        default=0, metadata={"help": "Print sample completions this many times during training (0: never)."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N PPO batches."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N PPO batches."})

    def __post_init__(self):
        if self.response_length not in (None, self.max_completion_length):
            self.max_completion_length = self.response_length
        self.response_length = self.max_completion_length
        if self.target_kl is not None and self.target_kl <= 0:
            raise ValueError(f"--target_kl must be > 0 (or unset for a fixed kl_coef), got {self.target_kl}.")
        if self.kl_coef < 0:
            raise ValueError(f"--kl_coef must be >= 0, got {self.kl_coef}.")
        at_least(self, 1, "per_device_train_batch_size", "gradient_accumulation_steps", "local_rollout_forward_batch_size")
        update = self.per_device_train_batch_size * self.gradient_accumulation_steps * launched_processes()
        if self.prompts_per_rollout is None:
            on_gpu = _cuda_available() and not self.use_cpu
            self.prompts_per_rollout = max(GPU_PROMPTS_PER_GENERATION, update) if on_gpu else update
        if self.prompts_per_rollout % update:
            raise ValueError(
                f"--prompts_per_rollout {self.prompts_per_rollout} is not a multiple of the {update} prompts of one "
                "optimizer step (per_device_train_batch_size x gradient_accumulation_steps x processes)."
            )
        if self.num_mini_batches not in (1, self.prompts_per_rollout // update):
            raise ValueError(f"--num_mini_batches {self.num_mini_batches} conflicts with --prompts_per_rollout "
                             f"{self.prompts_per_rollout}, which sets it to {self.prompts_per_rollout // update}.")
        self.num_mini_batches = self.prompts_per_rollout // update
        super().__post_init__()


@dataclass
class EvalArguments(DatasetSource, PromptFormat, Sampling):
    """What evaluate_generations.py compares, on which prompts, and how it samples."""

    model_path: list[str] = field(
        default_factory=list,
        metadata={
            "aliases": ["--model_name_or_path", "--model-name-or-path"],
            "help": "One or more models (folders or Hub ids; LoRA adapter folders load onto their base). The first "
            "is the baseline the others are compared with. --model_name_or_path works too.",
        },
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "Weights of --reward_funcs in the total reward (default: all 1)."}
    )
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

    def __post_init__(self):
        at_least(self, 1, "num_prompts", "num_completions", "max_new_tokens", "batch_size")
        at_least(self, 0, "train_samples")
        _next_post_init(self, EvalArguments)


################
# The training configs: this package's fields and defaults on top of TRL's config. Importing a TRL config costs
# seconds (and TRL's PPO lives in its experimental package), so each is built on first use: a script imports only
# its own trainer's config (PEP 562 module __getattr__). The classes are named and placed so that pickle, which
# the Trainer uses for training_args.bin, finds them as config.<name>.
################

_TRAINING_CONFIGS = {  # name -> (this package's fields, the TRL config it extends)
    "GRPOTrainingConfig": (_GRPOFields, "GRPOConfig"),
    "RewardTrainingConfig": (_RewardFields, "RewardConfig"),
    "PPOTrainingConfig": (_PPOFields, "PPOConfig"),
}


def __getattr__(name):
    if name not in _TRAINING_CONFIGS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rlhf import trl_compat

    fields, trl_config = _TRAINING_CONFIGS[name]
    config = dataclass(type(name, (fields, getattr(trl_compat, trl_config)), {"__module__": __name__,
                                                                               "__doc__": fields.__doc__}))
    globals()[name] = config
    return config


# Prompts generated at once on a GPU (GRPO's prompts_per_generation, PPO's prompts_per_rollout): one H100 went
# from 13.2 to 0.9 s per optimizer step from 4 to 64 prompts per generation (README: Performance).
GPU_PROMPTS_PER_GENERATION = 64


def at_least(config, minimum, *names):
    """Refuse (one line naming the flag) any of `names` that `config` has, is set, and is below `minimum`."""
    for name in names:
        value = getattr(config, name, None)
        if value is not None and value < minimum:
            raise ValueError(f"--{name} must be >= {minimum}, got {value}.")


def _next_post_init(config, cls):
    """Go on with the `__post_init__` after `cls`'s in `config`'s classes, if there is one: these dataclasses are
    mixed into one another and into TRL's configs, and each checks its own fields."""
    following = getattr(super(cls, config), "__post_init__", None)
    if following is not None:
        following()


def _check_report_to(report_to):
    """Refuse a --report_to integration that is unknown or not installed: the Trainer would fail once models load."""
    from transformers.integrations import integration_utils

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    installed = None
    for name in names:
        if name in ("all", "none"):
            continue
        if name not in integration_utils.INTEGRATION_TO_CALLBACK:
            others = sorted(set(integration_utils.INTEGRATION_TO_CALLBACK) - {"tensorboard"})
            raise ValueError(f"--report_to {name} is not supported; use one of tensorboard, none, all, "
                             f"{', '.join(others)}.")
        installed = installed if installed is not None else integration_utils.get_available_reporting_integrations()
        if name not in installed and name != "flyte":  # flyte is never listed as available
            raise ValueError(f"--report_to {name} needs its package, which is not installed: pip install it, or "
                             "drop it (--report_to tensorboard is the default).")


def _bf16_available() -> bool:
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

    return is_torch_bf16_gpu_available() or is_torch_xla_available()


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_supports_tf32() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8  # Ampere and newer
