"""Ctrl-C (SIGINT) and SIGTERM, in one place: what each part of a script does with them.

- Outside training and evaluation (models loading, saving): stop at once, in one line, exit 130 (`abort`, installed
  for SIGTERM by `rlhf.cli.exit_on_user_error`; Ctrl-C is Python's KeyboardInterrupt already).
- Training: finish the step, save a checkpoint, then stop; a second signal aborts (`guard.TrainingGuard`).
- Evaluation: keep the models finished, then stop; a second signal aborts (`StopOnSignal`).
- Once a script has ended (its exit code known, everything it writes written): said in one line, the exit goes on
  (`Ending`, installed by `rlhf.cli.exit_on_user_error`); a second signal ends the process at once, exit 130.
"""

import os
import signal
import sys
from pathlib import Path

from rlhf.errors import INTERRUPTED_EXIT_CODE

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def handle_stop_signals(handler, signals=STOP_SIGNALS):
    """Install `handler` for `signals`; return the handlers it replaced, for `restore`."""
    return {sig: signal.signal(sig, handler) for sig in signals}


def restore(previous):
    """Put back the handlers `handle_stop_signals` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def abort(signum, frame):
    """Stop at once, as Ctrl-C does: the script's KeyboardInterrupt path says so in one line."""
    raise KeyboardInterrupt


class Interrupted(BaseException):
    """SIGINT (Ctrl-C) or SIGTERM during the evaluation: the models already finished are saved, then exit 130.

    A BaseException, like KeyboardInterrupt, so that no library's `except Exception` swallows it."""

    def __init__(self, name):
        super().__init__(f"{name} received")
        self.name = name


class StopOnSignal:
    """While active, the first SIGINT or SIGTERM raises `Interrupted` where the evaluation is, so that what is
    finished can be saved; a second one aborts at once (KeyboardInterrupt).

    Python drops (and prints) an exception raised inside a finalizer (`__del__`, or a weakref callback such as
    `WeakValueDictionary`'s `remove`, run whenever objects are freed): a signal landing there is only recorded, and
    `check()`, called between batches and models, raises it.
    """

    def __init__(self):
        self.received = None
        self.previous = {}

    def __enter__(self):
        self.previous = handle_stop_signals(self._handle)
        return self

    def __exit__(self, *exc_info):
        restore(self.previous)

    def _handle(self, signum, frame):
        if self.received:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        while frame is not None and not _finalizer(frame.f_code):
            frame = frame.f_back
        if frame is None:  # not within a finalizer
            raise Interrupted(self.received)

    def check(self):
        if self.received:
            raise Interrupted(self.received)


def _finalizer(code):
    """Whether `code` may run as a finalizer, where Python prints and drops an exception: `__del__`, or anything in
    weakref.py (its callbacks; deferring a signal that lands in its other code only delays it to `check()`)."""
    return code.co_name == "__del__" or Path(code.co_filename).name == "weakref.py"


class Ending:
    """The handler of SIGINT and SIGTERM once a script has ended with exit code `code`: nothing is left to save or to
    lose, so the first signal is said in one line (by the main process) and the exit goes on with `code`, where
    Python would end in silence with 130 or a KeyboardInterrupt traceback; a second signal ends it at once (130)."""

    def __init__(self, code, main_process=True):
        self.code, self.main_process, self.said = code, main_process, False

    def __call__(self, signum, frame):
        if self.said:
            os._exit(INTERRUPTED_EXIT_CODE)
        self.said = True
        if self.main_process:
            print(f"\n{signal.Signals(signum).name} received after the script ended (exit code {self.code}): what it "
                  "saved stays; exiting (again to end at once)", file=sys.stderr, flush=True)
