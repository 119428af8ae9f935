"""Every import from TRL that can move between releases, in one place.

TRL is pinned to 1.12.0: it is the last release with `trl.experimental.ppo.PPOTrainer` (TRL 1.13 removed PPO).
Moving to another TRL release should be a change to this file alone. The configs and trainers load on first use
(PEP 562), so scripts that only parse flags (plotting, --help) start in a second instead of importing every trainer.
"""

import importlib
import os
import warnings


def _silence_known_warnings():
    """Notices that every run would print and that say nothing about this run, each silenced where it arises."""
    # TRL 1.12 still sets `gradient_checkpointing`, which transformers 5 renamed; both names keep working.
    warnings.filterwarnings("ignore", message=r"`\w*gradient_checkpointing\w*` is deprecated", category=FutureWarning)
    # PPO lives in trl.experimental in TRL 1.12 (and is gone in 1.13): we pinned that knowingly.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # TRL's PPO logs val/ratio_var over one value per minibatch; with a single minibatch (1 PPO epoch) torch warns
    # about degrees of freedom. The logged value is then NaN and means nothing.
    warnings.filterwarnings("ignore", message=r"var\(\): degrees of freedom is <= 0", category=UserWarning,
                            module=r"trl\.experimental\.ppo")


_silence_known_warnings()

from trl import TrlParser  # noqa: E402 (after the filters: importing TRL can warn)

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
