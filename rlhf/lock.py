"""The lock that keeps an output folder to one run: two runs never write one `output_dir` at once.

A pure-Python file lock (O_CREAT | O_EXCL is atomic on every OS, Windows included) that names its holder, so that a
lock left by a killed run is recognised (psutil: is that process still the one that took it?) and taken over.
"""

import atexit
import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rlhf.errors import UserError
from rlhf.processes import is_main_process, launched_processes

LOCK = "run.lock"
_held = {}  # the locks this process holds: lock path -> the outermost folder created for it (None: it was there)


def lock_output_dir(output_dir):
    """Hold `output_dir` for this run until it ends (`release_locks`), so that two runs never write one folder.

    The lock is a file created with O_CREAT | O_EXCL (atomic on every OS) that names its holder: PID, host, start
    time, command. A lock whose process is gone (killed, machine restarted) is taken over, saying so; one held by a
    live run, or by a run on another host (whose process cannot be checked from here), is refused in one line. The
    processes of one torchrun / accelerate launch share it: the main process writes it, the others only check it.
    """
    folder = Path(output_dir)
    path = folder / LOCK
    if path in _held:
        return
    created = make_folder(folder)
    me = _lock_holder()
    for _ in range(5):  # another launch may take or drop the lock between our look and our write
        holder = _read_lock(path)
        if holder is not None and holder.get("launch") == me["launch"]:  # this process's, or its launch's
            if is_main_process():
                _held.setdefault(path, created)
            return
        if holder is not None and _alive(holder):
            where = "this host" if holder.get("host") == me["host"] else f"host {holder.get('host')}"
            gone = "" if holder.get("host") == me["host"] else f"; if that run is gone, delete {path}"
            raise UserError(
                f"{folder} is in use by another run (PID {holder.get('pid')} on {where}, started "
                f"{holder.get('started_at')}); wait for it to finish, or choose another --output_dir{gone}"
            )
        if not is_main_process():
            return
        if holder is not None:
            if _read_lock(path) != holder:
                continue
            path.unlink(missing_ok=True)
            print(f"note: took over {path}, left by a run that is no longer running (PID {holder.get('pid')}, "
                  f"started {holder.get('started_at')}).", flush=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(me, file)
        _held[path] = created
        return
    raise UserError(f"{folder} is being taken by other runs at this moment; choose another --output_dir")


def release_locks():
    """Drop the locks this process holds (and a folder it created for one that stayed empty). Safe to call again."""
    while _held:
        path, created = _held.popitem()
        holder = _read_lock(path, wait=0)
        if holder and holder.get("launch") == _launch_id():
            path.unlink(missing_ok=True)
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


def _lock_holder():
    """This run as its lock names it."""
    import psutil

    return {"pid": os.getpid(), "host": socket.gethostname(), "launch": _launch_id(),
            "process_started": psutil.Process().create_time(), "started_at": _now(),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]]}


def _launch_id():
    """What the processes of one torchrun / accelerate launch share (its rendezvous), or this process alone."""
    env = os.environ
    if launched_processes() > 1:
        return f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}/{env.get('TORCHELASTIC_RUN_ID')}"
    return f"{socket.gethostname()}/{os.getpid()}"


def _read_lock(path, wait=2.0):
    """The holder a lock file names; None if there is none. A lock still empty after `wait` s (its writer died
    between creating and writing it) reads as {}: nobody's."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                return {}
            time.sleep(0.1)


def _alive(holder):
    """Whether the lock's process still runs. On another host it cannot be checked: taken as alive."""
    import psutil

    if holder.get("host") != socket.gethostname():
        return bool(holder)
    try:
        process = psutil.Process(int(holder["pid"]))
        # The PID may have been reused by another program since: compare start times.
        same = abs(process.create_time() - float(holder.get("process_started", process.create_time()))) < 1
        return same and process.status() != psutil.STATUS_ZOMBIE
    except (KeyError, TypeError, ValueError, psutil.NoSuchProcess):
        return False
    except psutil.Error:  # e.g. AccessDenied: a process is there
        return True


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
