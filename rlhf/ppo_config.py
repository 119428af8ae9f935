"""`PPOConfig`: TRL 1.12.0's PPO configuration, copied with its trainer (`rlhf/ppo_trainer.py`) since TRL 1.13 removed
both. `config.PPOTrainingConfig` gives it this package's defaults, adaptive KL, GRPO's reward functions, the value
model's source and `prompts_per_rollout`.

Copied from TRL 1.12.0, `trl/experimental/ppo/ppo_config.py` and `trl/trainer/base_config.py` (huggingface/trl,
Apache-2.0, Copyright 2020-2026 The HuggingFace Team), on transformers' `TrainingArguments`; the fields marked "ours"
are this package's.
"""

from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments


@dataclass
class PPOConfig(TrainingArguments):
    """TRL 1.12's `PPOConfig`: what `rlhf.ppo_trainer.PPOTrainer` reads."""

    # transformers' fields with TRL's defaults (TRL's _BaseConfig); "%%": argparse formats help strings
    logging_steps: float = field(default=10, metadata={"help": "Log every X updates steps (below 1: a ratio)."})
    gradient_checkpointing: bool = field(  # ours: off by default (TRL's was on, and never applied)
        default=False, metadata={"help": "Recompute the policy's and value model's activations in the backward pass: "
                                 "less memory, slower."}
    )
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 (mixed) precision instead of 32-bit. Default: on unless fp16 is set."}
    )
    lr_scheduler_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Additional parameters for the lr_scheduler, e.g. {'num_cycles': 1}."}
    )
    learning_rate: float = field(default=3e-6, metadata={"help": "The initial learning rate for AdamW."})
    # PPO's
    num_mini_batches: int = field(default=1, metadata={"help": "Number of minibatches to split a batch into."})
    total_episodes: int | None = field(default=None, metadata={"help": "Total number of episodes in the dataset."})
    local_rollout_forward_batch_size: int = field(
        default=64, metadata={"help": "Per rank no grad forward pass in the rollout phase."}
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
    # computed by the trainer (ours: not flags; TRL's took them and overwrote them unsaid)
    world_size: int | None = field(default=None, init=False)  # processes
    num_total_batches: int | None = field(default=None, init=False)  # rollouts
    local_batch_size: int | None = field(default=None, init=False)  # prompts per rollout, per process
    batch_size: int | None = field(default=None, init=False)  # prompts per rollout, over all processes
    local_mini_batch_size: int | None = field(default=None, init=False)  # prompts per optimizer step, per process
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
