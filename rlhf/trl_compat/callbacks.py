"""The package's callbacks on transformers' `Trainer`: the progress bar with the latest figures beside it, no step
past a resumed run's end, a resumed run's learning rate from this launch's schedule. Taken from `rlhf.trl_compat` (its
`_WHERE`), which imports this module, and transformers' trainer modules with it, when one is first asked for.
"""

from transformers import ProgressCallback, TrainerCallback

from rlhf.trl_compat import ReachedTheEnd

# The figures shown beside the progress bar, each under the first of the names GRPO, PPO or the reward model log it.
PROGRESS_FIGURES = {"reward": ("reward", "objective/scores"), "kl": ("kl", "objective/kl"),
                    "loss": ("loss", "loss/policy_avg")}


class ProgressBar(ProgressCallback):
    """transformers' progress bar, with the latest reward, KL and loss beside it instead of each log's whole dict
    (25-30 keys in GRPO and PPO) written under it: every logged value is in the run's logs already (TensorBoard,
    `trainer_state.json`), and the console keeps the bar and the lines that say something new. Reads the bar from
    `training_bar`, as `close_progress_bar` does (transformers 5.23)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shown = {}  # each figure as last logged: GRPO logs the reward once per generation, not every step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None:
            return
        for label, names in PROGRESS_FIGURES.items():
            value = next((logs[name] for name in names if isinstance((logs or {}).get(name), (int, float))), None)
            if value is not None:
                self.shown[label] = f"{value:.4g}"
        if self.shown:
            self.training_bar.set_postfix(self.shown, refresh=False)


def show_progress_bar(trainer):
    """Put `ProgressBar` where transformers' `ProgressCallback` is among a trainer's callbacks (not where
    `--disable_tqdm` printed each log instead)."""
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(ProgressBar)


class NoStepPastTheEnd(TrainerCallback):
    """Ends `train()` before its first step where the checkpoint a run resumes from already reached `max_steps`.

    transformers 5.23 (`Trainer._run_epoch`) trains a step before it first asks whether `global_step` has reached
    `max_steps`: a GRPO or reward-model run resumed from a checkpoint at its last step (interrupted as it finished,
    or re-run with --max_steps at the step reached) trained one step past its end, its report saying "steps: 4 of 3".
    Raised at `on_train_begin` (put it first among the callbacks), once the checkpoint's weights, optimizer and state
    are loaded; `rlhf.lifecycle.guard.guarded_train` ends training there. PPO's loop trains nothing there by itself.
    """

    def on_train_begin(self, args, state, control, **kwargs):
        if 0 < state.max_steps <= state.global_step:
            raise ReachedTheEnd()


class ScheduleFromResumedStep(TrainerCallback):
    """Sets the learning rate of a resumed run's first step from the schedule of this launch's length.

    Every trainer here builds its scheduler for the length it is launched with, then loads the checkpoint's
    scheduler and optimizer states over it (in `train()`, before `on_train_begin`). A `LambdaLR` keeps the new
    schedule (its lambdas are not saved), but the optimizer comes back with the rate the old schedule gave for the
    next step: continuing a finished run to a higher length, that is the old schedule's end (0 for cosine or linear),
    and the first new step would not train. Stepping the scheduler back one and forward again recomputes the current
    step's rate from the new schedule; after a plain resume it is the rate already there.
    """

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        from torch.optim.lr_scheduler import LambdaLR

        if isinstance(lr_scheduler, LambdaLR) and lr_scheduler.last_epoch > 0:  # restored from a checkpoint
            lr_scheduler.last_epoch -= 1
            lr_scheduler.step()  # sets the optimizer's rate to the schedule's at last_epoch
