"""The output folder's lock: one run per folder, a killed run's lock taken over, the ranks of one launch sharing it."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from rlhf.errors import UserError
from rlhf.lifecycle.lock import LOCK, OS_LOCK, lock_output_dir, release_locks

HOLD = ("import sys, time; from rlhf.lifecycle.lock import lock_output_dir; lock_output_dir(sys.argv[1]); "
        "print('held', flush=True); time.sleep(120)")
LAUNCH = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555", "TORCHELASTIC_RUN_ID": "one"}


@pytest.fixture
def hold():
    """Start a run in progress: a child process that takes a folder's lock and sleeps (killed at the end)."""
    children = []

    def start(folder, env=None):
        child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE,
                                 text=True, env={**os.environ, **(env or {})})
        children.append(child)
        assert child.stdout.readline().strip() == "held"
        return child

    yield start
    for child in children:
        child.kill()
        child.communicate()
    release_locks()


@pytest.mark.slow
def test_a_second_run_is_refused_in_one_line_naming_the_holder(tmp_path, hold):
    holder = hold(tmp_path)
    record = json.loads((tmp_path / LOCK).read_text())
    with pytest.raises(UserError) as refused:
        lock_output_dir(tmp_path)
    line = str(refused.value)
    started = record["started_at"]
    assert f"{tmp_path} is in use by another run (PID {holder.pid} on this host, started {started})" in line
    assert line.endswith("wait for it to finish, or choose another --output_dir") and "\n" not in line
    assert json.loads((tmp_path / LOCK).read_text()) == record  # the holder's record is left alone


@pytest.mark.slow
def test_a_killed_runs_lock_is_taken_over_saying_so(tmp_path, hold, capsys):
    holder = hold(tmp_path)
    started = json.loads((tmp_path / LOCK).read_text())["started_at"]
    holder.kill()  # SIGKILL: nothing runs on the way out, so its record stays behind; the OS drops its lock
    holder.wait()
    assert (tmp_path / LOCK).exists()

    lock_output_dir(tmp_path)
    assert capsys.readouterr().out == (f"note: took over {tmp_path / LOCK}, left by a run that is no longer running "
                                       f"(PID {holder.pid}, started {started}).\n")
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    release_locks()
    assert sorted(os.listdir(tmp_path)) == []  # the folder was there before: kept, empty


def test_release_removes_the_record_and_a_folder_it_created_and_is_safe_twice(tmp_path):
    folder = tmp_path / "new" / "run"
    lock_output_dir(folder)
    lock_output_dir(folder)  # held already: nothing more to do
    assert sorted(os.listdir(folder)) == [LOCK, OS_LOCK]
    release_locks()
    release_locks()
    assert not (tmp_path / "new").exists()

    (tmp_path / "notes.txt").write_text("mine")
    lock_output_dir(tmp_path)
    release_locks()
    assert os.listdir(tmp_path) == ["notes.txt"]  # only the lock's files go


@pytest.mark.slow
def test_a_run_on_another_host_is_judged_by_the_os_lock(tmp_path, hold, capsys):
    hold(tmp_path)
    lock = tmp_path / LOCK
    lock.write_text(json.dumps({**json.loads(lock.read_text()), "host": "elsewhere"}))  # as a shared folder shows it
    with pytest.raises(UserError, match=r"in use by another run \(PID \d+ on host elsewhere, started "):
        lock_output_dir(tmp_path)

    other = tmp_path / "other"
    other.mkdir()
    (other / LOCK).write_text(json.dumps({"pid": 7, "host": "elsewhere", "launch": "elsewhere/7",
                                          "started_at": "then"}))  # its run is gone: the OS lock is free
    lock_output_dir(other)
    assert "took over" in capsys.readouterr().out and json.loads((other / LOCK).read_text())["pid"] == os.getpid()


@pytest.mark.slow
def test_the_processes_of_one_launch_share_the_lock(tmp_path, hold):
    main = hold(tmp_path, {**LAUNCH, "RANK": "0"})
    rank1 = subprocess.run([sys.executable, "-c", "import sys; from rlhf.lifecycle.lock import _held, lock_output_dir;"
                            " lock_output_dir(sys.argv[1]); print(len(_held))", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, **LAUNCH, "RANK": "1"})
    assert rank1.returncode == 0 and rank1.stdout == "0\n"  # checked the record, took nothing
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == main.pid  # and left it to the main process
    with pytest.raises(UserError, match=f"PID {main.pid} on this host"):  # another launch is refused
        lock_output_dir(tmp_path)
