"""`rlhf/lifecycle/guard.py` as a unit: signals, stopping at a checkpoint, the NaN watch, every process stopping.

Real runs that are interrupted are in test_interruption.py (one process) and test_distributed.py (torchrun).
"""

import json
import math
import multiprocessing
import os
import signal
import socket
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from rlhf.errors import NonFiniteError, UserError
from rlhf.lifecycle.guard import TrainingGuard, TrainingInterrupted, guarded_train

ARGS = SimpleNamespace(device="cpu")  # all the guard reads of the training arguments


def test_a_first_signal_asks_for_a_stop_and_a_second_aborts(capsys):
    guard = TrainingGuard()
    guard.on_step_end(ARGS, TrainerState(global_step=1), TrainerControl())  # a step can end: the first waits for one
    guard.request_stop(signal.SIGINT, None)
    assert guard.stop_requested
    assert "SIGINT received: saving a checkpoint after this step" in capsys.readouterr().out
    with pytest.raises(KeyboardInterrupt):
        guard.request_stop(signal.SIGINT, None)


def test_a_stop_saves_a_checkpoint_after_the_step_and_ends_once_it_is_saved():
    guard, state = TrainingGuard(), TrainerState(global_step=7)
    control = guard.on_step_end(ARGS, state, TrainerControl())
    assert not control.should_save
    guard.on_save(ARGS, state, control)  # no stop asked: training goes on

    guard.stop_requested = True
    control = guard.on_step_end(ARGS, state, TrainerControl())
    assert control.should_save
    with pytest.raises(TrainingInterrupted) as stop:
        guard.on_save(ARGS, state, control)
    assert stop.value.step == 7


@pytest.mark.parametrize("key", ["loss", "grad_norm", "loss/policy_avg", "loss/value_avg"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_loss_or_gradient_norm_stops_the_run_naming_it_and_the_step(key, value):
    with pytest.raises(NonFiniteError, match=rf"^training {key} became {value} at step 3$"):
        TrainingGuard().on_log(ARGS, TrainerState(global_step=3), TrainerControl(), logs={key: value})


def test_a_non_finite_number_at_the_first_step_points_to_the_dtype_and_the_rewards_before_the_learning_rate():
    from rlhf.rewards.reward_model import check_finite

    for step, first in ((1, "It came in the first step"), (2, "Lower the learning rate")):
        with pytest.raises(NonFiniteError) as stop:
            TrainingGuard().on_log(ARGS, TrainerState(global_step=step), TrainerControl(), logs={"loss": math.nan})
        assert stop.value.advice.startswith(first)
    with pytest.raises(NonFiniteError) as stop:  # a reward scored NaN: the scorer, whatever the step
        check_finite([1.0, math.nan], "reward model", 1)
    assert stop.value.advice.startswith("Check reward model: it scored the completions themselves")


def test_finite_logs_pass():
    guard = TrainingGuard()
    guard.on_log(ARGS, TrainerState(), TrainerControl(), logs={"loss": 0.5, "grad_norm": 1e30, "reward": 1.0})
    guard.on_log(ARGS, TrainerState(), TrainerControl(), logs=None)


class FakeTrainer:
    """What guarded_train uses of a trainer: add_callback, the callbacks (one holds a progress bar), and `train`,
    which runs `steps()`."""

    def __init__(self):
        self.state = TrainerState(global_step=0)
        self.bar = SimpleNamespace(closed=False)
        self.bar.close = lambda: setattr(self.bar, "closed", True)
        self.callback_handler = SimpleNamespace(callbacks=[SimpleNamespace(training_bar=self.bar)])
        self.steps = None

    def add_callback(self, callback):
        self.callback_handler.callbacks.append(callback)

    def train(self, resume_from_checkpoint=None):
        self.steps()

    @property
    def guard(self):
        return next(callback for callback in self.callback_handler.callbacks if isinstance(callback, TrainingGuard))


def write_checkpoint(output_dir, step):
    checkpoint = output_dir / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return checkpoint


def test_sigterm_during_training_ends_after_the_next_checkpoint_with_exit_code_130(tmp_path, capsys):
    trainer, state = FakeTrainer(), TrainerState(global_step=3)
    handler_before = signal.getsignal(signal.SIGTERM)

    def train():  # a step of a trainer's loop, then one with a SIGTERM in the middle of it
        trainer.guard.on_step_end(ARGS, TrainerState(global_step=2), TrainerControl())
        os.kill(os.getpid(), signal.SIGTERM)
        control = trainer.guard.on_step_end(ARGS, state, TrainerControl())
        assert control.should_save
        write_checkpoint(tmp_path, 3)
        trainer.guard.on_save(ARGS, state, control)
        raise AssertionError("the guard did not stop training once the checkpoint was saved")

    with pytest.raises(SystemExit) as exit:
        trainer.steps = train
        guarded_train(trainer, tmp_path)
    assert exit.value.code == 130
    out = capsys.readouterr().out
    assert "SIGTERM received" in out
    assert f"Stopped at step 3; checkpoint saved in {tmp_path / 'checkpoint-3'}. Re-run the same command" in out
    assert trainer.bar.closed  # before the last line, so that the bar does not draw itself again after it
    assert signal.getsignal(signal.SIGTERM) is handler_before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_any_step_of_the_launch_has_ended_aborts_at_once_in_one_line(tmp_path, capsys, signum):
    checkpoint = write_checkpoint(tmp_path, 4)  # a resumed run: its newest checkpoint stays as it is
    trainer = FakeTrainer()
    trainer.state.global_step = 4

    def train():  # e.g. the first generation, which may never end
        os.kill(os.getpid(), signum)
        raise AssertionError("the guard waited for a step to end before stopping")

    with pytest.raises(SystemExit) as exit:
        trainer.steps = train
        guarded_train(trainer, tmp_path)
    assert exit.value.code == 130
    out = capsys.readouterr().out
    assert f"Aborted at step 4 without saving (the last complete checkpoint is {checkpoint})." in out
    assert trainer.bar.closed


def test_ctrl_c_outside_training_ends_in_one_line_and_exit_code_130(tiny_models, tmp_path, run_cli, monkeypatch):
    import train_grpo
    from conftest import grpo_args

    def loading(*args, **kwargs):  # Ctrl-C while the data (or a model) loads
        raise KeyboardInterrupt

    monkeypatch.setattr(train_grpo, "load_rows", loading)
    handler_before = signal.getsignal(signal.SIGTERM)
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "run"))
    assert result.returncode == 130
    assert result.stderr.strip() == "Interrupted: stopped at once (what was saved before stays intact)."
    assert signal.getsignal(signal.SIGTERM) is handler_before


@pytest.mark.parametrize("error, code, said", [
    (NonFiniteError("training loss became nan at step 5"), 1,
     "error: training loss became nan at step 5; training stopped (the last good checkpoint is {checkpoint})."),
    (UserError("reward function probe raised ValueError"), 2, "error: reward function probe raised ValueError"),
])
def test_a_non_finite_number_or_a_user_error_in_training_ends_in_one_line(tmp_path, capsys, error, code, said):
    checkpoint = write_checkpoint(tmp_path, 4)
    trainer = FakeTrainer()

    def train():
        raise error

    with pytest.raises(SystemExit) as exit:
        trainer.steps = train
        guarded_train(trainer, tmp_path)
    assert exit.value.code == code
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(said.format(checkpoint=checkpoint))
    assert trainer.bar.closed


def _stop_at_a_save(rank, signalled, port, results):
    """One of two processes: a step ends and a checkpoint is saved while only `signalled` got the signal."""
    import torch.distributed as dist

    os.environ["RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    guard, state = TrainingGuard(), TrainerState(global_step=4)
    guard.stop_requested = rank == signalled
    try:
        control = guard.on_step_end(ARGS, state, TrainerControl())
        guard.on_save(ARGS, state, control)
        results.put((rank, control.should_save, "went on"))
    except TrainingInterrupted as stop:
        results.put((rank, control.should_save, f"stopped at step {stop.step}"))
    except Exception as error:  # e.g. the collective failing because the other process left it
        results.put((rank, None, f"{type(error).__name__}: {error}"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("signalled", [0, 1])
def test_a_signal_that_reaches_one_process_stops_both_at_the_same_checkpoint(signalled):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_stop_at_a_save, args=(rank, signalled, port, results)) for rank in (0, 1)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join(timeout=180)
        hung = [rank for rank, process in enumerate(processes) if process.is_alive()]
        assert not hung, f"process {hung} still waits in the guard's collective"
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    outcomes = sorted(results.get(timeout=5) for _ in processes)
    assert outcomes == [(0, True, "stopped at step 4"), (1, True, "stopped at step 4")]


ENDED_THEN_SIGNALLED = """
import atexit, os, signal, time
from rlhf.cli import exit_on_user_error

@exit_on_user_error
def main():
    print("Saved the final model.", flush=True)
    # a signal in the exit's own teardown (atexit runs after the script's exit code is known)
    atexit.register(lambda: (os.kill(os.getpid(), signal.SIG{name}), time.sleep(0.5)))

main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["INT", "TERM"])
def test_a_signal_after_the_script_ended_is_said_in_one_line_and_the_exit_keeps_its_code(name):
    import subprocess
    import sys

    from conftest import ROOT

    result = subprocess.run([sys.executable, "-c", ENDED_THEN_SIGNALLED.format(name=name)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (f"SIG{name} received after the script ended (exit code 0): what it saved stays; "
                                     "exiting (again to end at once)")
