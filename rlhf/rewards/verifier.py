r"""The math verifier: the final answer of a completion, and whether it equals the reference answer.

`verdict(text, reference)` says CORRECT, WRONG, MISSING (no final answer) or TIMEOUT (too costly to check, scored
as wrong). The `boxed_answer` reward (rewards/functions.py) and the evaluation's verifier accuracy are built on it.

The final answer (the extraction rule)
    Only `\boxed{...}` (or `\fbox{...}`) is read: text outside the boxes is never graded, and a completion without
    a complete, non-empty box has no final answer (MISSING). A final answer is one answer:
    - the same box repeated (`\boxed{5} ... so the answer is \boxed{5}`) is that answer;
    - a self-correction counts its last box: a correction phrase ("wrong", "mistake", "actually", "wait", ...)
      between two boxes withdraws every box before it;
    - otherwise several different boxes are one list, read in order: `\boxed{2} and \boxed{3}` is the answer
      "2, 3", right for the reference {2, 3} and wrong for 3, as is an intermediate result boxed before the
      final one. Restating one value (`\boxed{\frac{1}{2}} = \boxed{0.5}`) is right when each box is.
    So boxing several candidates never pays. A reference with boxes (a worked solution) is read as math-verify
    reads one: its last box, with the boxes just before it when they are listed with it.

What "correct" means
    math-verify 0.9.0 (Hugging Face; TRL's accuracy reward and open-r1 use it) compares the answer with the
    reference, each parsed as `\boxed{...}`: by value for numbers, fractions, mixed numbers, decimals, percents,
    roots, pi and expressions (0.5 = 1/2, 1\frac{3}{4} = 7/4, 2+3 = 5); sets and lists in any order; tuples,
    intervals and matrices entry by entry; `x = 5` for 5; equations and inequalities by their solutions; text
    answers ignoring case. `prepare()` first fixes what math-verify misreads: digit groups split by spaces
    (`1\,000`, `1 000 000`), `°`, words after a number (`18 dollars`, `\text{5 apples}`), a final full stop
    (`5.`), and a letter glued to a number, which is a variable (`2t` is not 2) and not a unit.

Cost bound
    math-verify's own time limits are switched off: on POSIX they are `signal.alarm` (whole seconds, main thread
    only: a ValueError in any other thread), and on Windows a new process per call whose target cannot be
    pickled, so every parse fails and returns nothing. Two guards replace them, on every platform and thread:
    - a pre-filter, before any parsing: an answer over MAX_ANSWER_CHARS characters, or one that asks for huge
      integer arithmetic (a power tower of numbers such as 10^{10^{10}}; an exponent, factorial or binomial of a
      number with 5+ digits), is not checked. Big-integer arithmetic runs in C and holds the interpreter lock,
      so no time limit could stop it;
    - a time limit: the check runs in a worker thread and the caller waits at most `time_limit` seconds
      (TIME_LIMIT by default). A worker past it is abandoned and stopped at its next Python instruction
      (`PyThreadState_SetAsyncExc`); what math-verify and SymPy do on a pre-filtered answer is Python, so it stops.
    Both give TIMEOUT. math-verify (~0.4 s to import, ~0.3 s more to set up its parser) is loaded on the first
    verdict, outside the time limit; `import rlhf.rewards.verifier` does not import it.
"""

import ctypes
import functools
import re
import threading

CORRECT, WRONG, MISSING, TIMEOUT = "correct", "wrong", "missing", "timeout"
TIME_LIMIT = 0.5  # seconds per completion
MAX_ANSWER_CHARS = 1000


################
# The final answer
################


def boxed_contents(text):
    r"""Every complete `\boxed{...}` / `\fbox{...}` in `text` as (start, end, content), braces balanced, in order.

    A box that is never closed (the completion was cut off) is left out, and so is a box inside another.
    """
    boxes = []
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        if boxes and match.start() < boxes[-1][1]:
            continue
        depth = 0
        for i in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                boxes.append((match.start(), i + 1, text[match.end() : i]))
                break
    return boxes


# A phrase between two boxes that withdraws the earlier one ("I got \boxed{3}, but that is wrong ... \boxed{5}").
CORRECTION = re.compile(
    r"\b(?:wrong|incorrect|not (?:correct|right)|mistakes?|errors?|oops|wait|actually|correct(?:ion|ing|ed)|"
    r"scratch that|second thought|re-?(?:do|check|calculat\w*|comput\w*|consider\w*)|miscalculat\w*)\b",
    re.IGNORECASE,
)


def final_answer(text):
    """The boxes that make the final answer (see the module docstring), distinct, in order; None if there is none."""
    boxes = [(start, end, content.strip()) for start, end, content in boxed_contents(text) if content.strip()]
    if not boxes:
        return None
    first = 0
    for i in range(1, len(boxes)):
        if CORRECTION.search(text, boxes[i - 1][1], boxes[i][0]):
            first = i
    return list(dict.fromkeys(content for _, _, content in boxes[first:]))


def ground_truth_of(row_value):
    """The reference answer: a `ground_truth` value, the part after `####` of a GSM8K-style `answer`, or the
    final box of a worked solution (read as math-verify reads a reference); surrounding `$` removed."""
    text = str(row_value)
    if "####" in text:
        text = text.split("####")[-1]
    if boxed_contents(text):
        from latex2sympy2_extended.math_normalization import extract_boxed_content

        text = extract_boxed_content(text, mode="last")
    return text.strip().strip("$").strip()


################
# What math-verify misreads, fixed before it parses
################

SPACING = re.compile(r"(?<!\\)\\[,;: ]|\\q?quad\b|~")  # not the \\ that ends a matrix row
# Digit groups split by spaces (1 000 000; 1\,000 once SPACING made it 1 000). Never by commas, which math-verify
# reads itself: 1,000 is a number and (1,100) a tuple.
SPACED_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?: +\d{3})+(?!\d)")
TEXT = re.compile(r"^\\(?:text|textbf|textrm|textnormal|mathrm|mbox)\s*\{([^{}]*)\}$")
# Words after a number: "18 dollars", "12 \text{square feet}": words of 3+ letters after a space, or any word in
# \text{...}, so that 3n and 2 xy stay products of variables. Not the words math-verify reads (50 percent), nor
# a phrase with "or"/"and" (3 and up).
NUMBER_WORDS = re.compile(
    r"^(.*\d)\s*(?!\\text\{\s*(?:percent|pct)|\s*(?:percent|pct|inf|sqrt))"
    r"(?:\\(?:text|textrm|textnormal|mathrm|mbox)\s*\{\s*[A-Za-z][A-Za-z .]*\}|\s[A-Za-z]{3,}(?: [A-Za-z]+)*)"
    r"(?:\^\{?\d\}?)?$"
)
AND_OR = re.compile(r"\b(?:and|or)\b")


def prepare(answer):
    """An answer (box content or reference) rewritten where math-verify would misread it."""
    text = SPACING.sub(" ", re.sub(r"\\!\s*", "", answer))
    text = re.sub(r"°\s*[CF]?\b|°|\\degree\b", "", text).replace("\\varnothing", "\\emptyset").strip()
    text = re.sub(r"(?<![.\\])\.$", "", text).strip()  # 5. -> 5, but not \ldots or 1.5
    whole_text = TEXT.match(text)
    if whole_text and re.match(r"[-+]?\d", whole_text.group(1).strip()):  # \text{5 apples}
        text = whole_text.group(1).strip()
    text = SPACED_THOUSANDS.sub(lambda m: m.group(0).replace(" ", ""), text)
    words = NUMBER_WORDS.match(text)
    if words and not AND_OR.search(text[words.end(1) :]):
        text = words.group(1)
    # math-verify strips a unit letter (m, s, t, h, ...) after a number; braces keep 2{t} the product 2t.
    return re.sub(r"(\d)([A-Za-z])$", r"\1{\2}", text)


# Integer arithmetic too big to finish: a power tower of numbers (10^{10^{10}}, 10^{10!}), or an exponent,
# factorial or binomial of a number with 5 or more digits.
HUGE = re.compile(
    r"\^\s*\{?\s*[-+]?\d+\s*\}?\s*\^\s*\{?\s*[-+]?\d|\^\s*\{?\s*\d+\s*!"
    r"|\^\s*\{?\s*[-+]?\d{5}|\d{5}\s*!|\\[dt]?binom\s*\{?\s*\d{5}"
)


def too_costly(answer, max_chars=MAX_ANSWER_CHARS):
    return len(answer) > max_chars or HUGE.search(answer) is not None


################
# math-verify, loaded on first use, its own time limits off (see the module docstring)
################


@functools.cache
def _math_verify():
    import logging

    import math_verify

    # Its one warning says that its time limit is off: ours replaces it.
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return math_verify


def _parse(answer):
    return _math_verify().parse("\\boxed{" + prepare(answer) + "}", parsing_timeout=None)


@functools.lru_cache(maxsize=1024)
def _parse_reference(reference):  # a GRPO group shares its reference: parse it once
    return _parse(reference)


def _equals_reference(parsed, reference):
    return _math_verify().verify(_parse_reference(reference), parsed, timeout_seconds=None)


def _judge(answers, reference):
    """True when the final answer (one or several boxes) equals the reference; see the module docstring."""
    if len(answers) == 1:
        return _equals_reference(_parse(answers[0]), reference)
    if _equals_reference(_parse(", ".join(answers)), reference):
        return True
    return all(_equals_reference(_parse(answer), reference) for answer in answers)


# One of each kind whose first check is slow (SymPy imports its solvers, simplification and sets on first use).
WARM_UP = (("1", r"\frac{2}{2}"), ("[1, 2)", "(1,2)"), ("x = 2^{3}", "8"), (r"\sqrt{8}", r"2\sqrt{2}"),
           ("x^2 - 1", "(x-1)(x+1)"), ("2x + 4y = 6", "x + 2y = 3"), (r"\begin{pmatrix}1\\2\end{pmatrix}", "(1,2)"))


@functools.cache
def warm_up():
    """Import math-verify and run its first, slow parses (parser set-up, SymPy's lazy imports); once per process.

    Raises ImportError when math-verify is not installed.
    """
    for answer, reference in WARM_UP:
        _equals_reference(_parse(answer), reference)


################
# The time limit
################


class _Stop(BaseException):
    """Raised in a worker past its time limit; not an Exception, which math-verify would catch and carry on."""


def call_with_time_limit(seconds, func, *args):
    """`func(*args)` run in a worker thread; TimeoutError if it has not returned within `seconds`."""
    outcome = {}

    def work():
        try:
            outcome["value"] = func(*args)
        except _Stop:
            pass
        except BaseException as error:  # handed to the caller
            outcome["error"] = error

    worker = threading.Thread(target=work, name="verifier", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(_Stop))
        raise TimeoutError(f"not done within {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


################
# The verdict
################

# A number as written in running text: 1,200 and 1.5 and -3, not the 2 of x2 nor the digits of a word.
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w])")


def last_number(text):
    """The last number of `text` with its thousands commas dropped, or None: the answer a completion gives when it
    writes no box (`unboxed_correct`)."""
    numbers = NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def unboxed_correct(text, reference, time_limit=TIME_LIMIT):
    """Whether a completion that gives no boxed answer ends on the right number: its last number equals the reference
    (as a boxed answer is judged). A credit some recipes pay below a boxed answer (`boxed_answer`'s
    `unboxed_correct`), never a verdict: the verifier's accuracy reads boxes only."""
    number = last_number(text)
    return number is not None and _judged([number], reference, time_limit) == CORRECT


def verdict(text, reference, time_limit=TIME_LIMIT):
    """CORRECT, WRONG, MISSING (no final answer) or TIMEOUT (too costly to check) for a completion's `text`."""
    answers = final_answer(text)
    return MISSING if answers is None else _judged(answers, reference, time_limit)


def _judged(answers, reference, time_limit):
    """CORRECT, WRONG or TIMEOUT for a final answer (`final_answer`'s list) against a row's reference."""
    reference = ground_truth_of(reference)
    if any(too_costly(answer) for answer in answers) or too_costly(reference, max_chars=float("inf")):
        return TIMEOUT
    warm_up()
    try:
        return CORRECT if call_with_time_limit(time_limit, _judge, answers, reference) else WRONG
    except TimeoutError:
        return TIMEOUT
