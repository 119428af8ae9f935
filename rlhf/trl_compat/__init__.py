"""Everything this package assumes about TRL's and transformers' internals, in one place.

TRL is pinned to 1.12.0: it is the last release with `trl.experimental.ppo.PPOTrainer` (TRL 1.13 removed PPO).
Moving to another release should be a change to this package alone. Each assumption about a private detail is
pinned by a test in `tests/test_trl_compat.py` that fails, naming the assumption and what to re-check, when the
installed TRL or transformers no longer behave that way.

Here:
- the TRL imports that can move between releases, loaded on first use (PEP 562), so that scripts that only parse
  flags (plotting, --help) start in a second instead of importing every trainer;
- `check_trl_version()`: anything but the pinned release is refused in one line;
- the warning filters for notices that every run would print;
- `close_progress_bar(trainer)`: transformers closes its progress bar only when training ends normally;
- `ScheduleFromResumedStep`: a resumed or continued run trains its first step at its own schedule's rate.

In `rlhf/trl_compat/grpo.py`: `ResumableGRPOTrainer`, TRL's `GRPOTrainer` resumed inside a generation block too.
In `rlhf/trl_compat/ppo.py` (imported when PPO is used): `PPOTrainerHooks`, TRL's `PPOTrainer` with named hook
points for what `rlhf/ppo.py` adds (files in a checkpoint, resume, the completions generated, the KL coefficient).
"""

import importlib
import os
import warnings

from rlhf.errors import UserError

TRL_VERSION = "1.12.0"


def check_trl_version():
    """Refuse any TRL but the pinned release: the hooks here rely on its private details (see the tests)."""
    import trl

    if trl.__version__ != TRL_VERSION:
        raise UserError(
            f"this package needs trl=={TRL_VERSION} (found {trl.__version__}): pip install -r requirements.txt"
        )


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

from transformers import TrainerCallback  # noqa: E402
from trl import TrlParser  # noqa: E402 (after the filters: importing TRL can warn)

_WHERE = {
    "GRPOConfig": "trl",
    "GRPOTrainer": "trl",
    "ResumableGRPOTrainer": "rlhf.trl_compat.grpo",
    "RewardConfig": "trl",
    "RewardTrainer": "trl",
    "PPOConfig": "trl.experimental.ppo",
    "PPOTrainer": "trl.experimental.ppo",
    "PPOTrainerHooks": "rlhf.trl_compat.ppo",
}

__all__ = ["TRL_VERSION", "ScheduleFromResumedStep", "TrlParser", "check_trl_version", "close_progress_bar", *_WHERE]


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(_WHERE[name])
    except ImportError:
        check_trl_version()  # e.g. TRL 1.13, which has no trl.experimental.ppo: say which release is needed
        raise
    return getattr(module, name)


def close_progress_bar(trainer):
    """Close the Trainer's progress bar now, so that it does not redraw itself after our last line.

    transformers' `ProgressCallback` keeps its tqdm bar in `training_bar` (not a documented attribute) and closes it
    in `on_train_end`, which a run stopped by an exception never reaches. Calling `on_train_end` ourselves is no
    better: it fails when no bar was opened yet.
    """
    for callback in trainer.callback_handler.callbacks:
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
            callback.training_bar = None


class ScheduleFromResumedStep(TrainerCallback):
    """Sets the learning rate of a resumed run's first step from the schedule of this launch's length.

    Every trainer here builds its scheduler for the length it is launched with, then loads the checkpoint's
    scheduler and optimizer states over it (transformers before `on_train_begin`, `ResumablePPOTrainer.resume`
    before `train()`). A `LambdaLR` keeps the new schedule (its lambdas are not saved), but the optimizer comes back
    with the rate the old schedule gave for the next step: continuing a finished run to a higher length, that is
    the old schedule's end (0 for cosine or linear), and the first new step would not train. Stepping the scheduler
    back one and forward again recomputes the current step's rate from the new schedule; after a plain resume it is
    the rate already there.
    """

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        from torch.optim.lr_scheduler import LambdaLR

        if isinstance(lr_scheduler, LambdaLR) and lr_scheduler.last_epoch > 0:  # restored from a checkpoint
            lr_scheduler.last_epoch -= 1
            lr_scheduler.step()  # sets the optimizer's rate to the schedule's at last_epoch
