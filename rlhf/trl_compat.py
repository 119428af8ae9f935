"""Every import from TRL that can move between releases, in one place.

TRL is pinned to 1.12.0: it is the last release with `trl.experimental.ppo.PPOTrainer` (TRL 1.13 removed PPO).
Moving to another TRL release should be a change to this file alone. The configs and trainers load on first use
(PEP 562), so scripts that only parse flags (plotting, --help) start in a second instead of importing every trainer.
"""

import importlib

from trl import TrlParser

_WHERE = {
    "GRPOConfig": "trl",
    "GRPOTrainer": "trl",
    "RewardConfig": "trl",
    "RewardTrainer": "trl",
    "PPOConfig": "trl.experimental.ppo",
    "PPOTrainer": "trl.experimental.ppo",
}

__all__ = ["TrlParser", *_WHERE]


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
