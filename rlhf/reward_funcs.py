"""Rule-based and custom reward functions for GRPO and evaluation, and the math verifier.

A reward function follows TRL's signature: `func(prompts, completions, **columns) -> list[float]`, where
`completions` are strings or one-message conversations and every dataset column (e.g. `ground_truth`) comes as
a keyword argument holding one value per completion. `--reward_funcs` names them:

    reward_model        the frozen reward model at --reward_model_path (the default)
    boxed_answer        +1 / -1 / -0.5: the last \\boxed{...} matches / does not match the row's answer / is missing
    boxed_format        1 if the completion ends with a \\boxed{...} answer, else 0
    my_module.my_reward any function importable by its dotted path (the current folder is importable)
"""

import importlib
import re
import sys
from fractions import Fraction
from pathlib import Path

from rlhf.cli import UserError

BUILTIN = ("reward_model", "boxed_answer", "boxed_format")


class RewardFunctionError(UserError):
    """A reward function that raised or returned the wrong number of values."""


################
# Answer extraction and comparison
################


def extract_boxed(text):
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1 : i]
    return None  # unbalanced: the answer was cut off


def ground_truth_of(row_value):
    """The reference answer: a `ground_truth` value, or the part after `####` of a GSM8K-style `answer`."""
    text = str(row_value)
    return text.split("####")[-1].strip() if "####" in text else text.strip()


def normalize_answer(answer):
    """A canonical string for an answer: LaTeX wrappers, units, thousands separators and spacing removed."""
    text = answer.strip().strip("$").strip()
    text = re.sub(r"\\(?:left|right|displaystyle|!|,|;|:| )", "", text)
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    whole_text = re.fullmatch(r"\\(?:text|textbf|mathrm|mbox)\{(.*)\}", text)
    if whole_text:
        text = whole_text.group(1)
    text = re.sub(r"\\(?:text|mbox|mathrm)\{[^{}]*\}", "", text)  # units such as \text{ cm}
    text = re.sub(r"\^\s*\{?\\circ\}?|\\%|%|\\\$|°", "", text)
    text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(r"\\frac(\d)(\d)", r"\1/\2", text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,234,567 -> 1234567
    text = re.sub(r"^([-+]?[\d.]+(?:/[\d.]+)?)\s*[a-zA-Z][a-zA-Z ]*\.?$", r"\1", text)  # 12 dollars -> 12
    text = text.rstrip(".").replace(" ", "")
    return re.sub(r"^\((-?[\d.]+)\)/\((-?[\d.]+)\)$", r"\1/\2", text)


def _as_number(text):
    try:
        if "/" in text:
            numerator, denominator = text.split("/")
            return Fraction(numerator) / Fraction(denominator)
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted, reference):
    """True when two answers are equal after normalisation, numerically if both are numbers (0.5 == 1/2, -0 == 0)."""
    a, b = normalize_answer(predicted), normalize_answer(reference)
    x, y = _as_number(a), _as_number(b)
    if x is not None and y is not None:
        return x == y
    return a == b


################
# Reward functions
################


def completion_text(completion):
    return completion[-1]["content"] if isinstance(completion, list) else completion


def make_boxed_answer(correct=1.0, wrong=-1.0, missing=-0.5):
    """The math verifier as a reward function; the reference comes from `ground_truth` or a GSM8K `answer`."""

    def boxed_answer(prompts, completions, ground_truth=None, answer=None, **kwargs):
        references = ground_truth if ground_truth is not None else answer
        if references is None:
            raise ValueError("the dataset has neither a `ground_truth` nor an `answer` column")
        rewards = []
        for completion, reference in zip(completions, references):
            predicted = extract_boxed(completion_text(completion))
            if predicted is None:
                rewards.append(missing)
            else:
                rewards.append(correct if answers_match(predicted, ground_truth_of(reference)) else wrong)
        return rewards

    return boxed_answer


def boxed_format(prompts, completions, **kwargs):
    """1.0 when the completion gives a `\\boxed{...}` answer, else 0.0: a format reward to mix in."""
    return [float(extract_boxed(completion_text(c)) is not None) for c in completions]


def import_reward_func(path):
    """A user function given by dotted import path, e.g. `my_rewards.brevity` (the current folder is searched)."""
    module_name, _, name = path.rpartition(".")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        func = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise UserError(
            f"cannot import reward function '{path}' ({error}); give a built-in ({', '.join(BUILTIN)}) or "
            "module.function importable from the current folder"
        ) from None
    if not callable(func):
        raise UserError(f"reward function '{path}' is not callable")
    return func


class CheckedRewardFunc:
    """Wraps a reward function: one clear line naming it if it raises, returns the wrong count or a non-number."""

    def __init__(self, func, name):
        self.func, self.__name__ = func, name

    def __call__(self, prompts, completions, **kwargs):
        from rlhf.reward import check_finite

        try:
            values = list(self.func(prompts=prompts, completions=completions, **kwargs))
        except Exception as error:  # a user's function: report it in one line, whatever it raised
            raise RewardFunctionError(f"reward function '{self.__name__}' raised {type(error).__name__}: {error}")
        if len(values) != len(completions):
            raise RewardFunctionError(
                f"reward function '{self.__name__}' returned {len(values)} values for {len(completions)} "
                "completions; it must return one number per completion"
            )
        try:
            values = [float(v) for v in values]
        except (TypeError, ValueError):
            raise RewardFunctionError(f"reward function '{self.__name__}' returned a value that is not a number")
        state = kwargs.get("trainer_state")
        check_finite(values, f"reward function '{self.__name__}'", state.global_step + 1 if state else "?")
        return values


def check_reward_weights(weights, names):
    """One weight per reward function, or none at all (all 1)."""
    if weights is not None and len(weights) != len(names):
        raise UserError(
            f"--reward_weights has {len(weights)} values for {len(names)} --reward_funcs ({' '.join(names)}); "
            "give one weight per function"
        )


def load_reward_funcs(names, reward_model_scorer=None, boxed_rewards=(1.0, -1.0, -0.5)):
    """The reward functions named on the command line, each wrapped in `CheckedRewardFunc`.

    Names are all resolved (user functions imported) before `reward_model_scorer`, a zero-argument callable that
    loads the reward model, is called, so a typo costs seconds.
    """
    resolved = {}
    for name in names:
        if name == "boxed_answer":
            resolved[name] = CheckedRewardFunc(make_boxed_answer(*boxed_rewards), name)
        elif name == "boxed_format":
            resolved[name] = CheckedRewardFunc(boxed_format, name)
        elif "." in name:
            resolved[name] = CheckedRewardFunc(import_reward_func(name), name)
        elif name != "reward_model":
            raise UserError(
                f"unknown reward function '{name}'; use {', '.join(BUILTIN)} or a dotted import path (module.func)"
            )
    if "reward_model" in names:
        resolved["reward_model"] = reward_model_scorer()  # checks its own values
    return [resolved[name] for name in names]
