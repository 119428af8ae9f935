"""The lock that keeps an output folder to one run: two runs never write one `output_dir` at once.

An OS lock (`filelock`: flock on Unix, LockFileEx on Windows) on `run.lock.os` says who holds the folder. The OS drops
it when its process ends in any way (SIGKILL, a crash, a power cut), so a killed run's lock is free again with no
guess at whether its PID still runs, on this host or on another one sharing the folder. `run.lock` beside it names
the holder (PID, host, start, command) for the one-line refusal: a separate file, as one locked on Windows cannot be
read. The processes of one torchrun / accelerate launch share the lock: the main process takes it, the others check
that `run.lock` names their launch.
"""

import atexit
import contextlib
import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout  # imported before release_locks is registered: its exit handler runs after

from rlhf.errors import UserError
from rlhf.processes import is_main_process, launched_processes

LOCK = "run.lock"  # the holder's record (JSON), for other runs to read
OS_LOCK = "run.lock.os"  # the file the OS locks
_held = {}  # record path -> (the outermost folder created for it, None if it was there; its FileLock)


def lock_output_dir(output_dir):
    """Hold `output_dir` for this run until it ends (`release_locks`). While another run holds it: a one-line
    `UserError` naming that run. A record left by a run that no longer holds the OS lock is taken over, saying so."""
    folder = Path(output_dir)
    path = folder / LOCK
    if path in _held:
        return
    created = make_folder(folder)
    launch = _launch_id()
    if not is_main_process():
        # The main process takes the lock for the launch. A record of another launch is another run's, or a dead
        # one's that the main process is about to take over: wait for that (30 s at most). No record: nothing to check.
        holder = _await_record(path, lambda record: record.get("launch") in (None, launch), wait=30)
        if holder.get("launch") not in (None, launch):
            raise _in_use(folder, holder)
        return
    os_lock = FileLock(folder / OS_LOCK, thread_local=False)
    for _ in range(3):  # the holder may let go between our try and our look at its record
        try:
            os_lock.acquire(blocking=False)
            break
        except Timeout:
            holder = _await_record(path, bool, wait=2)  # the holder writes its record just after taking the lock
            if holder:
                raise _in_use(folder, holder) from None
    else:
        raise UserError(f"{folder} is being taken by other runs at this moment; choose another --output_dir")
    stale = _await_record(path, bool, wait=0)
    if stale.get("launch") not in (None, launch):
        print(f"note: took over {path}, left by a run that is no longer running (PID {stale.get('pid')}, "
              f"started {stale.get('started_at')}).", flush=True)
    path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "launch": launch,
                                "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                "command": [Path(sys.argv[0]).name, *sys.argv[1:]]}), encoding="utf-8")
    _held[path] = created, os_lock


def release_locks():
    """Drop the locks this process holds (and a folder it created for one that stayed empty). Safe to call again."""
    while _held:
        path, (created, os_lock) = _held.popitem()
        path.unlink(missing_ok=True)  # while still held: no other run has written it
        with contextlib.suppress(OSError):  # Windows keeps an open file: filelock removes it on release
            (path.parent / OS_LOCK).unlink()  # before the release, so that a run opening it sees it gone and retries
        os_lock.release()
        folder = path.parent
        while created is not None:  # the folders this run created, innermost first, while they are empty
            try:
                folder.rmdir()
            except OSError:
                break
            if folder == created:
                break
            folder = folder.parent


atexit.register(release_locks)  # for callers of main() outside `exit_on_user_error`, which releases them itself


def make_folder(folder):
    """Create `folder` (and missing parents); return the outermost one created, or None. Unwritable: `UserError`."""
    created = next((p for p in reversed([folder, *folder.parents]) if not p.exists()), None)
    if folder.is_file():
        raise UserError(f"--output_dir {folder} is a file, not a folder; choose a folder (it is made if missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write_test.{os.getpid()}"  # one per process when several are launched
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as error:
        raise UserError(f"cannot write to --output_dir {folder} ({error.strerror}); choose another folder") from None
    return created


def _launch_id():
    """What the processes of one torchrun / accelerate launch share (its rendezvous), or this process alone."""
    env = os.environ
    if launched_processes() > 1:
        return f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}/{env.get('TORCHELASTIC_RUN_ID')}"
    return f"{socket.gethostname()}/{os.getpid()}"


def _await_record(path, done, wait):
    """The holder `path` names ({} if none, or half written) once `done(record)`, or as it is after `wait` s."""
    deadline = time.monotonic() + wait
    while True:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        if done(record) or time.monotonic() >= deadline:
            return record
        time.sleep(0.1)


def _in_use(folder, holder):
    host = holder.get("host")
    where = "this host" if host == socket.gethostname() else f"host {host}"
    return UserError(f"{folder} is in use by another run (PID {holder.get('pid')} on {where}, started "
                     f"{holder.get('started_at')}); wait for it to finish, or choose another --output_dir")
