"""Every import from TRL that can move between releases, in one place.

TRL is pinned to 1.12.0: it is the last release with `trl.experimental.ppo.PPOTrainer` (TRL 1.13 removed PPO).
Moving to another TRL release should be a change to this file alone.
"""

from trl import GRPOConfig, GRPOTrainer, RewardConfig, RewardTrainer, TrlParser
from trl.data_utils import is_conversational
from trl.experimental.ppo import PPOConfig, PPOTrainer

__all__ = [
    "GRPOConfig", "GRPOTrainer", "PPOConfig", "PPOTrainer", "RewardConfig", "RewardTrainer", "TrlParser",
    "is_conversational",
]
