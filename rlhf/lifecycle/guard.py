"""Running a trainer so that a Ctrl-C costs minutes, not the run, and a NaN never trains silently.

- Ctrl-C or SIGTERM: the current step finishes, a checkpoint is saved, the script exits with code 130 and says how
  to resume (re-run the same command). A second Ctrl-C aborts at once; the last complete checkpoint stays intact.
  Before the first step of a launch has ended (models loading, the first generation or rollout) the first signal
  aborts at once: nothing has been trained since the newest checkpoint, so nothing is lost, and waiting for a step
  that may never end (a reward function that hangs, a generation that stalls) would leave a scheduler's SIGTERM
  unheeded. An abort ends in one line, exit code 130, no traceback.
- A non-finite loss or gradient norm in the logs, or a non-finite reward (see
  `rlhf.rewards.reward_model.check_finite`), stops the run before the next checkpoint is written, with the source and
  the step, exit code 1. The run is stopped rather than the batch skipped: a NaN means something upstream is broken,
  and skipping would hide it.
"""

import math
import signal
import sys

from transformers import TrainerCallback

from rlhf.errors import INTERRUPTED_EXIT_CODE, NON_FINITE_EXIT_CODE, USER_ERROR_EXIT_CODE, NonFiniteError, UserError
from rlhf.lifecycle.checkpoints import last_checkpoint
from rlhf.lifecycle.manifest import checkpoint_recorder
from rlhf.lifecycle.signals import handle_stop_signals, restore
from rlhf.processes import is_main_process
from rlhf.trl_compat import NoStepPastTheEnd, ReachedTheEnd, ScheduleFromResumedStep, close_progress_bar

# Logged values that must stay finite: GRPO/reward (`loss`, `grad_norm`) and PPO (`loss/*`).
WATCHED = ("loss", "grad_norm", "loss/policy_avg", "loss/value_avg")


class TrainingInterrupted(Exception):
    def __init__(self, step):
        super().__init__(f"interrupted at step {step}")
        self.step = step


class TrainingGuard(TrainerCallback):
    """Turns SIGINT/SIGTERM into "save a checkpoint after this step, then stop", and watches logs for NaN.

    With several processes, all stop after the same step: each one joins the collective in `_any_process` at every
    step end and every save, whatever its own flag says. A signal can reach some processes only (a SIGTERM sent to
    one PID), and a process that skipped the collective would leave the others waiting in it.
    """

    def __init__(self):
        self.stop_requested = False
        self.step_ended = False  # in this launch: until then, nothing is trained that a checkpoint would keep

    def request_stop(self, signum, frame):
        if self.stop_requested or not self.step_ended:  # a second signal, or no step to wait for: abort now
            raise KeyboardInterrupt
        self.stop_requested = True
        if is_main_process():  # under torchrun / accelerate launch every process gets the signal: say it once
            name = signal.Signals(signum).name
            print(f"\n{name} received: saving a checkpoint after this step (press Ctrl-C again to abort now).",
                  flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ended = True
        if _any_process(self.stop_requested, args):
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if _any_process(self.stop_requested, args):
            raise TrainingInterrupted(state.global_step)  # the checkpoint is complete at this point

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in WATCHED:
            value = (logs or {}).get(key)
            if isinstance(value, float) and not math.isfinite(value):
                message = f"training {key} became {value} at step {state.global_step}"
                if state.global_step <= 1:  # from the weights as loaded (or within the first rollout's updates)
                    raise NonFiniteError(message, "It came in the first step, from the weights as loaded: check the "
                                         "model's --dtype first (float16 overflows: float32, or bfloat16) and the "
                                         "rewards, then the learning rate.")
                raise NonFiniteError(message)


def _any_process(flag, args):
    """True if any process got the signal, so that all processes stop at the same step.

    A collective when several processes run: every one of them must call it, the same number of times.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    import torch

    tensor = torch.tensor([float(flag)], device=args.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def guarded_train(trainer, output_dir, resume_from=None):
    """Run `trainer.train` under a `TrainingGuard`; exit with a clear line if it stops early.

    Returns normally only when training ran to the end. A run resumed from `resume_from` trains at the rates of
    its own schedule (see `ScheduleFromResumedStep`: a continued run's schedule is longer than the checkpoint's).
    """
    trainer.add_callback(checkpoint_recorder())  # before the guard, whose on_save may end the run
    guard = TrainingGuard()
    trainer.add_callback(guard)
    if resume_from:
        trainer.add_callback(ScheduleFromResumedStep())
        trainer.callback_handler.callbacks.insert(0, NoStepPastTheEnd())  # before any other begins
    if resume_from and is_main_process():
        print(f"Resuming from {resume_from} (step {resume_from.name.split('-')[-1]}).", flush=True)
    handlers = handle_stop_signals(guard.request_stop)
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    except ReachedTheEnd:
        if is_main_process():
            print(f"note: {resume_from} is step {trainer.state.global_step}, where the run's training length ends: "
                  "nothing is left to train, so the run finishes there.", flush=True)
    except TrainingInterrupted as stop:
        close_progress_bar(trainer)
        # The main process writes trainer_state.json, which marks the checkpoint complete: only it can name the
        # checkpoint for sure (another process may still find the previous one).
        if is_main_process():
            checkpoint = last_checkpoint(output_dir)
            print(
                f"\nStopped at step {stop.step}; checkpoint saved in {checkpoint}. Re-run the same command to resume.",
                flush=True,
            )
        sys.exit(INTERRUPTED_EXIT_CODE)
    except KeyboardInterrupt:
        close_progress_bar(trainer)
        if is_main_process():
            checkpoint = last_checkpoint(output_dir)
            kept = f"the last complete checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written"
            print(f"\nAborted at step {trainer.state.global_step} without saving ({kept}). Re-run the same command to "
                  "resume.", flush=True)
        sys.exit(INTERRUPTED_EXIT_CODE)
    except UserError as error:  # e.g. a user's reward function that raised: one line, as before training
        close_progress_bar(trainer)
        print(f"\nerror: {error}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT_CODE)
    except NonFiniteError as error:
        close_progress_bar(trainer)
        checkpoint = last_checkpoint(output_dir)
        kept = f"the last good checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written"
        # The leading newline ends the progress bar's line, so the error starts a line of its own.
        print(f"\nerror: {error}; training stopped ({kept}). {error.advice}", file=sys.stderr)
        sys.exit(NON_FINITE_EXIT_CODE)
    finally:
        restore(handlers)
