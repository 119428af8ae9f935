r"""Check the math verifier against the project's table of cases, next to plain math-verify.

A measurement tool, not a test: it prints figures. Every row of tests/verifier_cases.py (completion, reference,
expected verdict) goes through
    ours    rlhf.rewards.verifier.verdict (what the `boxed_answer` reward uses), default time limit;
    plain   math-verify 0.9.0 as TRL's accuracy reward calls it: default `parse` of the completion and of the
            reference (wrapped in \boxed{} so that it is read whole), default `verify`, its own time limits.
For each it prints the agreement with the table on "correct or not", the false accepts (a wrong answer called
correct), the cost per completion (median, mean, p99, max) and the rows whose verdict differs from the table's
(plain math-verify says only correct or wrong: it has no "missing" or "timeout"). Costs are timed on a second
pass over the table: the first pass, untimed, pays for both verifiers the one-time costs (imports, parser set-up,
SymPy's first use of its solvers), which a training run pays once, when the reward function loads.

    python bench/verifier_check.py                  # table, summary and every disagreement
    python bench/verifier_check.py --quiet          # the summary alone (or: python -m bench.verifier_check --quiet)
"""

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as python bench/verifier_check.py: Python put bench/ on sys.path, not the root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlhf.rewards import verifier  # noqa: E402
from tests.verifier_cases import ROWS  # noqa: E402


def ours(completion, reference):
    return verifier.verdict(completion, reference)


def plain(completion, reference):
    from math_verify import parse, verify

    correct = verify(parse("\\boxed{" + verifier.ground_truth_of(reference) + "}"), parse(completion))
    return verifier.CORRECT if correct else verifier.WRONG


def run(check):
    """(verdict, seconds) for every row."""
    results = []
    for completion, reference, _, _ in ROWS:
        start = time.perf_counter()
        said = check(completion, reference)
        results.append((said, time.perf_counter() - start))
    return results


def report(name, results, quiet):
    correct = [said == verifier.CORRECT for said, _ in results]
    truth = [expected == verifier.CORRECT for _, _, expected, _ in ROWS]
    agree = sum(a == b for a, b in zip(correct, truth))
    false_accepts = sum(said == verifier.CORRECT and expected in (verifier.WRONG, verifier.TIMEOUT)
                        for (said, _), (_, _, expected, _) in zip(results, ROWS))
    ms = sorted(1000 * seconds for _, seconds in results)
    p99 = ms[round(0.99 * (len(ms) - 1))]
    print(f"{name:5}  agreement {agree}/{len(ROWS)} = {agree / len(ROWS):.1%}   false accepts {false_accepts}   "
          f"ms per completion: median {statistics.median(ms):.2f}, mean {statistics.mean(ms):.1f}, p99 {p99:.1f}, "
          f"max {ms[-1]:.1f}")
    same = sum(said == expected for (said, _), (_, _, expected, _) in zip(results, ROWS))
    print(f"       the table's very verdict (correct/wrong/missing/timeout): {same}/{len(ROWS)}")
    if not quiet:
        for (said, seconds), (completion, reference, expected, category) in zip(results, ROWS):
            if said != expected:
                print(f"    [{category}] {completion[:70]!r} vs {reference[:30]!r}: table {expected}, "
                      f"{name} {said} ({1000 * seconds:.0f} ms)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet", action="store_true", help="print the summary lines only")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # math-verify logs each of its own timeouts
    print(f"{len(ROWS)} cases from tests/verifier_cases.py")
    for check in (ours, plain):  # an untimed pass: SymPy's lazy imports and first-use costs, for both alike
        run(check)
    report("ours", run(ours), args.quiet)
    report("plain", run(plain), args.quiet)


if __name__ == "__main__":
    main()
