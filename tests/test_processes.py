"""`rlhf.processes`: the launcher's environment before accelerate is set up, accelerate's `PartialState` after.

Real 2-process launches (torchrun, gloo) are in test_distributed.py.
"""

import subprocess
import sys

import pytest

from conftest import ROOT
from rlhf.processes import is_main_process, launched_processes, main_process_first, on_gpu, process_index


@pytest.fixture
def no_partial_state(monkeypatch):
    """As a script is before its training arguments are parsed: no `PartialState` yet (another test may have made
    one in this process; it is put back afterwards)."""
    from accelerate.state import PartialState

    saved = dict(PartialState._shared_state)
    PartialState._shared_state.clear()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    yield PartialState
    PartialState._shared_state.clear()
    PartialState._shared_state.update(saved)


def test_before_accelerate_is_set_up_the_launchers_environment_answers_and_no_state_is_created(no_partial_state,
                                                                                                monkeypatch):
    assert (launched_processes(), process_index(), is_main_process()) == (1, 0, True)  # python script.py
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")  # as torchrun sets them in its second process
    assert (launched_processes(), process_index(), is_main_process()) == (2, 1, False)
    monkeypatch.setenv("RANK", "0")
    assert is_main_process()
    # Creating the state here would start the process group (and wait for the other process): never done.
    assert not no_partial_state._shared_state


def test_once_accelerate_is_set_up_its_partial_state_answers(no_partial_state, monkeypatch):
    no_partial_state(cpu=True)  # as TrainingArguments makes it for `python script.py --use_cpu`
    monkeypatch.setenv("WORLD_SIZE", "2")  # an environment that says otherwise is not asked any more
    monkeypatch.setenv("RANK", "1")
    assert (launched_processes(), process_index(), is_main_process()) == (1, 0, True)
    ran = []
    with main_process_first():
        ran.append("block")
    assert ran == ["block"]


def test_main_process_first_runs_the_block_before_accelerate_is_set_up(no_partial_state):
    with main_process_first():
        pass
    assert not no_partial_state._shared_state


@pytest.mark.parametrize("cuda, use_cpu, expected", [(True, False, True), (True, True, False), (False, False, False)])
def test_a_gpu_run_needs_a_visible_gpu_and_no_use_cpu(monkeypatch, cuda, use_cpu, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert on_gpu(use_cpu) is expected


@pytest.mark.slow
def test_importing_the_configs_sets_no_accelerate_state_up():
    # config.py holds the trainers' configs (TRL's, on transformers: torch is imported), but building none of them
    # may create accelerate's PartialState: under a CPU torchrun an early one counts each process as the only one.
    code = ("import os, sys; os.environ.update(WORLD_SIZE='2', RANK='1'); import config; "
            "from accelerate.state import PartialState; from rlhf import processes; "
            "print(len(PartialState._shared_state), processes.launched_processes(), processes.process_index())")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "0 2 1", result.stderr[-2000:]
