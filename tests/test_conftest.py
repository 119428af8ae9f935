"""tests/conftest.py: the suite runs in parallel workers where pytest-xdist is installed, in one process without it."""

import re
import subprocess
import sys

import pytest

from conftest import ROOT

ONE_TEST = "tests/test_verifier.py::test_the_table_is_large_and_covers_every_verdict"


def run_pytest(*args):
    command = [sys.executable, "-m", "pytest", ONE_TEST, "-v", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_without_xdist_the_suite_runs_in_one_process():
    result = run_pytest("-p", "no:xdist")  # as where pytest-xdist is not installed
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout and "worker" not in result.stdout


@pytest.mark.slow
def test_with_xdist_the_suite_runs_in_at_most_4_workers_unless_told_otherwise():
    pytest.importorskip("xdist")
    result = run_pytest()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    workers = re.search(r"^created: (\d+)/\1 workers?$", result.stdout, flags=re.MULTILINE)
    assert workers and 1 <= int(workers.group(1)) <= 4, result.stdout[-2000:]
    single = run_pytest("-n", "0")
    assert single.returncode == 0 and "worker" not in single.stdout, single.stdout[-2000:]


@pytest.mark.slow
def test_with_xdist_the_tests_that_read_one_shared_run_go_to_one_worker():
    # test_plot.py's module-scoped runs: each worker that took one of their tests would make them again.
    pytest.importorskip("xdist")
    command = [sys.executable, "-m", "pytest", "tests/test_plot.py", "-v", "-n", "2", "-p", "no:cacheprovider", "-k",
               "grpo_ppo_and_a_run_without_kl or kl_and_entropy_are_drawn_apart or tag_names_map"]
    result = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    grouped = re.findall(r"^\[(gw\d)\] .*PASSED tests/test_plot.py::\S+@test_plot.py", result.stdout, re.MULTILINE)
    assert len(grouped) == 2 and len(set(grouped)) == 1, result.stdout[-3000:]
    alone = re.findall(r"PASSED tests/test_plot.py::test_tag_names_map\S+\]\s*$", result.stdout, re.MULTILINE)
    assert alone, result.stdout[-3000:]  # a test that reads no shared run is handed out on its own
