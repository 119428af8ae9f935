"""The math verifier (rlhf/rewards/verifier.py): the cases, the extraction rule, the cost bound, imports on demand."""

import logging
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from rlhf.cli import UserError
from rlhf.rewards import verifier
from rlhf.rewards.functions import boxed_format, load_reward_funcs, make_boxed_answer
from verifier_cases import ROWS

SLOW = r"\boxed{\int_0^1 x^{100} e^{x} \, dx}"  # a few seconds of SymPy, all of it Python: the time limit stops it


def test_the_table_is_large_and_covers_every_verdict():
    assert len(ROWS) >= 150
    assert {expected for _, _, expected, _ in ROWS} == {"correct", "wrong", "missing", "timeout"}


@pytest.mark.parametrize("completion, reference, expected, category", ROWS,
                         ids=[f"{row[3]}-{i}" for i, row in enumerate(ROWS)])
def test_verdict(completion, reference, expected, category):
    # A generous limit: this checks what is correct; the time limit is tested below, on this shared machine's clock.
    assert verifier.verdict(completion, reference, time_limit=10) == expected


@pytest.mark.parametrize("text, expected", [
    (r"\boxed{3}, but that is wrong. \boxed{4}, no, that is a mistake too: \boxed{5}", ["5"]),
    (r"\boxed{3} and \boxed{4}. Wait: \boxed{5} and \boxed{6}", ["5", "6"]),
    (r"\boxed{2}, \boxed{3}, \boxed{2}", ["2", "3"]),
    (r"\boxed{3} ... checking it again by substitution ... \boxed{5}", ["3", "5"]),  # no correction phrase
    (r"\boxed{\boxed{7}}", [r"\boxed{7}"]),
    (r"\boxed{a{b}c} \boxed{", ["a{b}c"]),
    (r"The answer is \boxed{42}.", ["42"]),
    (r"First \boxed{1}, then finally \boxed{2}", ["1", "2"]),  # both: one list answer, not the last one alone
    (r"\boxed{3}. That was wrong: \boxed{4}", ["4"]),
    (r"\boxed{5}, so \boxed{5}", ["5"]),
    (r"\boxed{\frac{1}{2}}", [r"\frac{1}{2}"]),
    (r"\boxed{\{1, 2\}}", [r"\{1, 2\}"]),
    (r"$\boxed{x^{2}+1}$", ["x^{2}+1"]),
    (r"\fbox{7}", ["7"]),
    (r"no box here", None),
    (r"cut off \boxed{12", None),
])
def test_final_answer_rule(text, expected):
    assert verifier.final_answer(text) == expected


@pytest.mark.parametrize("predicted, reference, match", [
    ("42", "42", True),
    ("42", "43", False),
    ("1,000", "1000", True),
    ("1,234,567", "1234567", True),
    ("-0", "0", True),
    ("0.5", r"\frac{1}{2}", True),
    (r"\dfrac{3}{4}", "0.75", True),
    (r"\frac34", "3/4", True),
    ("1/3", "0.33", False),
    ("$12$", "12", True),
    (r"12\text{ cm}", "12", True),
    ("12 dollars", "12", True),
    (r"90^\circ", "90", True),
    (r"50\%", "50", True),
    ("3.0", "3", True),
    (r"\text{yes}", "yes", True),
    ("x+1", "x + 1", True),
    ("x+1", "x+2", False),
    ("2.", "2", True),
])
def test_a_boxed_answer_equals_the_reference_in_any_notation(predicted, reference, match):
    assert (verifier.verdict("\\boxed{" + predicted + "}", reference) == verifier.CORRECT) is match


def test_boxed_format_agrees_with_the_final_answer():
    completions = [r"\boxed{5}", r"\boxed{}", r"cut \boxed{5", "no box", r"\boxed{2} or \boxed{3}"]
    assert boxed_format(None, completions) == [1.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("value, reference", [
    ("She has 3 + 4 = 7 apples.\n#### 7", "7"),
    (" 12 ", "12"),
    (" $12$ ", "12"),
    (r"so $x = \boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    (r"$\boxed{35} \text{ and } \boxed{4}$", "35,4"),  # boxes listed together, as math-verify reads a reference
    (r"\boxed{1} was a first guess but the reasoning above gives \boxed{2}", "2"),
])
def test_reference_answers(value, reference):
    assert verifier.ground_truth_of(value) == reference


@pytest.mark.parametrize("answer, costly", [
    (r"2^{2023}", False),
    (r"2^{2^n} + 1", False),
    (r"e^{x^2}", False),
    (r"10!", False),
    (r"\binom{10}{3}", False),
    (r"10^{10^{10}}", True),
    (r"2^{2^{2^{2}}}", True),
    (r"10^{10!}", True),
    (r"2^{12345}", True),
    (r"12345!", True),
    (r"\dbinom{12345}{3}", True),
    ("x" * 1001, True),
])
def test_the_pre_filter_stops_huge_integer_arithmetic(answer, costly):
    assert verifier.too_costly(answer) is costly


def test_a_slow_check_is_stopped_at_the_time_limit():
    verifier.warm_up()
    start = time.perf_counter()
    assert verifier.verdict(SLOW, "5", time_limit=0.2) == verifier.TIMEOUT
    assert time.perf_counter() - start < 1.0
    deadline = time.monotonic() + 2
    while any(t.name == "verifier" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "verifier" for t in threading.enumerate()), "the abandoned worker is still running"


def test_the_time_limit_works_outside_the_main_thread():
    verdicts = []
    worker = threading.Thread(target=lambda: verdicts.append(
        (verifier.verdict(SLOW, "5", time_limit=0.2), verifier.verdict(r"\boxed{0.5}", r"\frac{1}{2}"))))
    worker.start()
    worker.join()
    assert verdicts == [(verifier.TIMEOUT, verifier.CORRECT)]


def test_errors_in_the_checked_function_reach_the_caller():
    with pytest.raises(ZeroDivisionError):
        verifier.call_with_time_limit(1.0, lambda: 1 / 0)
    assert verifier.call_with_time_limit(1.0, max, 2, 3) == 3


def test_boxed_answer_counts_and_logs_what_it_could_not_check(caplog):
    reward = make_boxed_answer(1.0, -1.0, -0.5, time_limit=0.2)
    completions = [r"\boxed{5}", r"\boxed{10^{10^{10}}}", SLOW, "no box"]
    with caplog.at_level(logging.WARNING, logger="rlhf.rewards.functions"):
        assert reward(prompts=[None] * 4, completions=completions, ground_truth=["5"] * 4) == [1.0, -1.0, -1.0, -0.5]
    assert reward.timeouts == 2
    assert "2 of 4 completions were too costly to check" in caplog.text


@pytest.mark.slow
def test_math_verify_is_imported_only_for_the_math_reward():
    code = (
        "import sys; from rlhf.rewards.functions import load_reward_funcs; "
        "load_reward_funcs(['boxed_format']); assert 'math_verify' not in sys.modules, 'imported too early'; "
        "load_reward_funcs(['boxed_answer']); assert 'math_verify' in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_math_reward_says_how_to_install_math_verify(monkeypatch):
    def not_installed():
        raise ImportError("No module named 'math_verify'")

    monkeypatch.setattr(verifier, "warm_up", not_installed)
    with pytest.raises(UserError, match=r"boxed_answer needs math-verify: pip install math-verify==0\.9\.0"):
        load_reward_funcs(["boxed_answer"])
