"""PPO's configuration: `PPOConfig`, TRL 1.12.0's (copied with its trainer, see `rlhf/ppo_trainer.py`), and
`PPOTrainingConfig`, that config with this package's defaults, adaptive KL, GRPO's reward functions, the value model's
source and `prompts_per_rollout`; `PPOModelArguments`: the model arguments, where TRL's `--sft_model_path` names the
policy too. Imported by train_ppo.py alone; pickle finds the config here.

`PPOConfig` is copied from TRL 1.12.0, `trl/experimental/ppo/ppo_config.py` and `trl/trainer/base_config.py`
(huggingface/trl, Apache-2.0, Copyright 2020-2026 The HuggingFace Team), on transformers' `TrainingArguments`; the
fields marked "ours" are this package's.
"""

from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments

from config import (
    GPU_PROMPTS_PER_GENERATION,
    HeldOutArguments,
    ModelArguments,
    RewardArguments,
    RunDefaults,
    at_least,
    change,
    check_sampling,
    note,
    reward_weights_field,
)
from rlhf.processes import launched_engine, launched_processes, on_gpu


@dataclass
class PPOConfig(TrainingArguments):
    """TRL 1.12's `PPOConfig`: what `rlhf.ppo_trainer.PPOTrainer` reads."""

    # transformers' fields with TRL's defaults (TRL's _BaseConfig); "%%": argparse formats help strings
    logging_steps: float = field(default=10, metadata={"help": "Log every X updates steps (below 1: a ratio)."})
    gradient_checkpointing: bool = field(
        default=True, metadata={"help": "Recompute activations in the backward pass: less memory, ~20%% slower."}
    )
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 (mixed) precision instead of 32-bit. Default: on unless fp16 is set."}
    )
    lr_scheduler_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Additional parameters for the lr_scheduler, e.g. {'num_cycles': 1}."}
    )
    learning_rate: float = field(default=3e-6, metadata={"help": "The initial learning rate for AdamW."})
    # PPO's
    dataset_num_proc: int | None = field(
        default=None, metadata={"help": "Number of processes to use for processing the dataset."}
    )
    num_mini_batches: int = field(default=1, metadata={"help": "Number of minibatches to split a batch into."})
    total_episodes: int | None = field(default=None, metadata={"help": "Total number of episodes in the dataset."})
    local_rollout_forward_batch_size: int = field(
        default=64, metadata={"help": "Per rank no grad forward pass in the rollout phase."}
    )
    num_sample_generations: int = field(
        default=10, metadata={"help": "Number of debugging samples generations (`generate_completions` calls)."}
    )
    response_length: int = field(default=53, metadata={"help": "Length of the response."})
    stop_token: Literal["eos"] | None = field(
        default=None, metadata={"help": "The stop token ('eos' or None); exclusive with stop_token_id."}
    )
    stop_token_id: int | None = field(
        default=None, metadata={"help": "The stop token's id (None: no stop token); exclusive with stop_token."}
    )
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    missing_eos_penalty: float | None = field(
        default=None, metadata={"help": "Subtracted from the score of a completion without an EOS token."}
    )
    sft_model_path: str = field(default="EleutherAI/pythia-160m", metadata={"help": "Path to the SFT model."})
    # computed by the trainer (ours: not flags; TRL's took them and overwrote them unsaid)
    world_size: int | None = field(default=None, init=False)  # processes
    num_total_batches: int | None = field(default=None, init=False)  # rollouts
    micro_batch_size: int | None = field(default=None, init=False)  # per_device_train_batch_size x world_size
    local_batch_size: int | None = field(default=None, init=False)  # prompts per rollout, per process
    batch_size: int | None = field(default=None, init=False)  # prompts per rollout, over all processes
    local_mini_batch_size: int | None = field(default=None, init=False)  # prompts per optimizer step, per process
    mini_batch_size: int | None = field(default=None, init=False)  # prompts per optimizer step, over all processes
    push_to_hub: bool = field(default=False, metadata={"help": "Whether to push the model to the Hub after training."})
    reward_model_path: str = field(default="EleutherAI/pythia-160m", metadata={"help": "Path to the reward model."})
    model_adapter_name: str | None = field(
        default=None, metadata={"help": "Name of the trained PEFT adapter, with several LoRA adapters."}
    )
    ref_adapter_name: str | None = field(
        default=None, metadata={"help": "Name of the reference PEFT adapter, with several LoRA adapters."}
    )
    num_ppo_epochs: int = field(default=4, metadata={"help": "Number of epochs to train."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Whether to whiten the rewards."})
    kl_coef: float = field(default=0.05, metadata={"help": "KL coefficient."})
    kl_estimator: Literal["k1", "k3"] = field(
        default="k1", metadata={"help": "KL estimator: k1 (unbiased) or k3 (unbiased, lower variance)."}
    )
    cliprange: float = field(default=0.2, metadata={"help": "Clip range."})
    vf_coef: float = field(default=0.1, metadata={"help": "Value function coefficient."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip range for the value function."})
    gamma: float = field(default=1.0, metadata={"help": "Discount factor."})
    lam: float = field(default=0.95, metadata={"help": "Lambda value for GAE."})
    ds3_gather_for_generation: bool = field(
        default=True,
        metadata={"help": "DeepSpeed ZeRO-3: gather the policy's weights for generation (faster; off: less memory)."},
    )
    # ours
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling threshold of the rollouts."})
    skip_rollouts_without_signal: bool = field(
        default=False, metadata={"help": "A rollout whose completions all scored the same gets advantages of 0."}
    )
    target_kl: float | None = field(default=None, metadata={"help": "Adaptive KL: the KL that kl_coef aims at."})
    kl_horizon: int = field(default=10_000, metadata={"help": "Adaptive KL horizon in episodes."})

    def __post_init__(self):
        self.bf16 = not self.fp16 if self.bf16 is None else self.bf16
        super().__post_init__()


@dataclass
class PPOModelArguments(ModelArguments):
    model_name_or_path: str = field(
        default="HuggingFaceTB/smollm2-135M-SFT-Only",
        metadata={"aliases": ["--sft_model_path", "--sft-model-path", "--model_name", "--model-name", "--model_path",
                              "--model-path"],
                  "help": "Policy to train: a Hub id or a local folder (TRL's --sft_model_path, --model_name and "
                  "--model_path work too)."},
    )


@dataclass
class PPOTrainingConfig(RewardArguments, HeldOutArguments, RunDefaults, PPOConfig):
    """TRL's `PPOConfig` with this package's defaults.

    A rollout (TRL's batch, one logged step) generates `prompts_per_rollout` completions, one per prompt, then runs
    `num_ppo_epochs` passes over them in mini-batches of `per_device_train_batch_size x gradient_accumulation_steps
    x processes` prompts: one optimizer step each. Bigger rollouts batch generation; the update size stays.
    """

    _argument_group_name = "Training (TRL's PPOConfig and transformers' TrainingArguments)"
    EVAL_DATASET = True

    output_dir: str = field(
        default="./ppo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest, the policy and value model go."},
    )
    reward_weights: list[float] | None = reward_weights_field()
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
            "num_mini_batches). Default: 64 on a GPU, one mini-batch on a CPU; where TRL's --num_mini_batches is "
            "given, that many mini-batches."
        },
    )
    num_mini_batches: int | None = field(
        default=None,
        metadata={"help": "Mini-batches (optimizer steps) per rollout. Default: derived from --prompts_per_rollout."},
    )
    local_rollout_forward_batch_size: int = field(
        default=16,
        metadata={
            "help": "Sequences per generation and no-grad forward pass (reference, value, reward) in a rollout. Each "
            "such pass holds float32 logits over the whole vocabulary: lower it to save memory (TRL's default: 64)."
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
    kl_horizon: int = field(
        default=10_000, metadata={"help": "Adaptive KL horizon in episodes: larger adapts more slowly."}
    )
    gamma: float = field(default=1.0, metadata={"help": "Discount factor."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda."})
    cliprange: float = field(
        default=0.2, metadata={"aliases": ["--clip_range", "--clip-range"],
                               "help": "Clip range of the policy ratio (--clip_range works too)."}
    )
    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate (AdamW)."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    top_p: float = field(
        default=1.0,
        metadata={
            "help": "Nucleus sampling threshold of the rollouts (ours: TRL's PPO samples at 1.0). The "
            "log-probabilities, importance ratio and KL are those of the full distribution at --temperature, as with "
            "GRPO's --top_p, so below 1.0 the gradient is biased. Evaluation keeps 0.9."
        },
    )
    skip_rollouts_without_signal: bool = field(
        default=True,
        metadata={
            "help": "A rollout whose completions (every process's) all scored the same, e.g. none passed the "
            "verifier, is trained on with advantages of 0: the policy does not move (momentum included), the value "
            "model still learns (ours; TRL whitens them to unit size, a full step from noise). Logged as "
            "objective/advantages_zeroed."
        },
    )
    max_completion_length: int = field(
        default=256,
        metadata={"aliases": ["--response_length", "--response-length", "--max_new_tokens", "--max-new-tokens"],
                  "help": "Most tokens generated per completion (TRL's --response_length and --max_new_tokens work "
                  "too)."},
    )
    stop_token: str | None = field(default="eos", metadata={"help": "Completions end at the EOS token."})
    missing_eos_penalty: float | None = field(
        default=1.0, metadata={"help": "Subtracted from the score of a completion cut off before EOS."}
    )
    num_train_epochs: float = field(
        default=3.0, metadata={"aliases": ["--num_epochs", "--num-epochs"],
                               "help": "Passes over the prompts (unless total_episodes; --num_epochs works too)."}
    )
    num_sample_generations: int = field(
        default=0, metadata={"help": "Print sample completions this many times during training (0: never)."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N PPO batches."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N PPO batches."})
    # TRL's names of fields given above under the names every script shares: set from them, not flags themselves.
    response_length: int = field(default=256, init=False)
    reward_model_path: str = field(default="./reward_model_output", init=False)
    sft_model_path: str = field(default="", init=False)  # the policy is PPOModelArguments.model_name_or_path

    def __post_init__(self):
        self.response_length = self.max_completion_length  # what TRL's PPOTrainer generates to
        self.reward_model_path = self.reward_model_name_or_path
        if self.target_kl is not None and self.target_kl <= 0:
            raise ValueError(f"--target_kl must be > 0 (or unset for a fixed kl_coef), got {self.target_kl}.")
        if self.kl_coef < 0:
            raise ValueError(f"--kl_coef must be >= 0, got {self.kl_coef}.")
        check_sampling(self)
        at_least(self, 1, "per_device_train_batch_size", "gradient_accumulation_steps",
                 "local_rollout_forward_batch_size")
        update = self.per_device_train_batch_size * self.gradient_accumulation_steps * launched_processes()
        if self.prompts_per_rollout is None and self.num_mini_batches is not None:  # TRL's flag, e.g. from its YAML
            self.prompts_per_rollout = update * self.num_mini_batches
        elif self.prompts_per_rollout is None:
            self.prompts_per_rollout = max(GPU_PROMPTS_PER_GENERATION, update) if on_gpu(self.use_cpu) else update
        if self.prompts_per_rollout % update:
            raise ValueError(
                f"--prompts_per_rollout {self.prompts_per_rollout} is not a multiple of the {update} prompts of one "
                "optimizer step (per_device_train_batch_size x gradient_accumulation_steps x processes)."
            )
        if self.num_mini_batches not in (None, 1, self.prompts_per_rollout // update):
            raise ValueError(f"--num_mini_batches {self.num_mini_batches} conflicts with --prompts_per_rollout "
                             f"{self.prompts_per_rollout}, which sets it to {self.prompts_per_rollout // update}.")
        change(self, "num_mini_batches", self.prompts_per_rollout // update, "derived from --prompts_per_rollout")
        if launched_engine() != "DEEPSPEED":  # said where given: TRL's PPO loop never clips (ours keeps it so)
            note(self, "max_grad_norm", f"note: --max_grad_norm {self.max_grad_norm} does nothing here: PPO (as "
                 "TRL's) clips gradients only under DeepSpeed, whose config takes it")
        super().__post_init__()
