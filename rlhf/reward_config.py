"""`RewardTrainingConfig`: TRL's `RewardConfig` with this package's defaults (Bradley-Terry loss on chosen vs
rejected). Imported by train_reward_model.py alone; pickle finds it as rlhf.reward_config.RewardTrainingConfig."""

from dataclasses import dataclass, field

from config import RunDefaults
from rlhf.trl_compat import RewardConfig


@dataclass
class RewardTrainingConfig(RunDefaults, RewardConfig):
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
