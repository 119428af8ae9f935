"""Rule-based and custom reward functions for GRPO and evaluation.

A reward function follows TRL's signature: `func(prompts, completions, **columns) -> list[float]`, where
`completions` are strings or one-message conversations and every dataset column (e.g. `ground_truth`) comes as
a keyword argument holding one value per completion. `--reward_funcs` names them:

    reward_model        the frozen reward model at --reward_model_name_or_path (the default)
    boxed_answer        1 / 0 / 0: the final \\boxed{...} answer is correct / wrong / missing (rewards/verifier.py); a
                        completion cut off before its end scores the lower of wrong and missing
    boxed_format        1 if the completion gives a final \\boxed{...} answer, else 0 (a metric to log: see
                        `reward_order_problems` before paying it)
    my_module.my_reward any function importable by its dotted path (the current folder is importable)
    path/to/file.py:fn  a function in a Python file, by path (as other RL frameworks take it)
"""

import importlib
import importlib.util
import logging
import sys
from pathlib import Path

from rlhf.errors import UserError
from rlhf.rewards import verifier

logger = logging.getLogger(__name__)


class RewardFunctionError(UserError):
    """A reward function that raised or returned the wrong number of values."""


################
# Reward functions
################


def completion_text(completion):
    return completion[-1]["content"] if isinstance(completion, list) else completion


def ended_flags(completion_ids, stop_token_ids, count):
    """Per completion, whether it ended (its last token is one of `stop_token_ids`) rather than being cut off at the
    length limit; all `count` ended where that cannot be read (no ids, no stop tokens)."""
    if completion_ids is None or not stop_token_ids:
        return [True] * count
    return [len(ids) > 0 and ids[-1] in stop_token_ids for ids in completion_ids]


MISSING_EOS_PENALTY = "missing_eos_penalty"  # the function's name, as TRL logs it (rewards/<name>/mean)


class MissingEOSPenalty:
    """GRPO's `--missing_eos_penalty`, PPO's flag with its meaning: a completion cut off before a stop token (read
    from the `completion_ids` that TRL passes, or `ended`) scores `penalty` lower, one that ended 0. Added by
    train_grpo.py at weight 1 after the task's rewards, so that TRL logs what it took
    (`rewards/missing_eos_penalty/mean`); the held-out evaluation reads the task's rewards alone, as PPO's does."""

    __name__ = MISSING_EOS_PENALTY

    def __init__(self, penalty, stop_token_ids=()):
        self.penalty = penalty
        self.stop_token_ids = set(stop_token_ids)

    def __call__(self, prompts, completions, completion_ids=None, ended=None, **kwargs):
        ended = ended if ended is not None else ended_flags(completion_ids, self.stop_token_ids, len(completions))
        return [0.0 if done else -self.penalty for done in ended]


class BoxedAnswer:
    """The math verifier as a reward function; the reference comes from `ground_truth` or a GSM8K `answer`.

    A completion too costly to check (verifier.py: pre-filter or time limit) scores as wrong and is counted
    in `timeouts`, with a warning for each batch that has one. A completion cut off at the length limit (it did not
    end: its last token is not one of `stop_token_ids`, read from the `completion_ids` that TRL passes, or `ended`)
    has no final answer yet: it scores the lower of wrong and missing, so running on never pays (a box repeated until
    the limit would otherwise score as the answer). Its verdict stays the verifier's. With `unboxed_correct` (None:
    off), an ended completion with no box whose last number is right (`verifier.unboxed_correct`) earns that: the
    box then pays only together with a right answer. A class, not a closure, so that it pickles.
    """

    __name__ = "boxed_answer"

    def __init__(self, correct=1.0, wrong=0.0, missing=0.0, unboxed_correct=None, time_limit=verifier.TIME_LIMIT,
                 stop_token_ids=()):
        self.rewards = {verifier.CORRECT: correct, verifier.WRONG: wrong, verifier.TIMEOUT: wrong,
                        verifier.MISSING: missing}
        self.unboxed_correct = unboxed_correct
        self.cut_off = min(wrong, missing)
        self.time_limit = time_limit
        self.stop_token_ids = set(stop_token_ids)
        self.timeouts = 0
        self.last_verdicts = []  # of the last call, one per completion: what the evaluation reports

    def __call__(self, prompts, completions, ground_truth=None, answer=None, completion_ids=None, ended=None,
                 **kwargs):
        references = ground_truth if ground_truth is not None else answer
        if references is None:
            raise ValueError("the dataset has neither a `ground_truth` nor an `answer` column")
        verdicts = [verifier.verdict(completion_text(completion), reference, self.time_limit)
                    for completion, reference in zip(completions, references)]
        self.last_verdicts = verdicts
        timeouts = verdicts.count(verifier.TIMEOUT)
        if timeouts:
            self.timeouts += timeouts
            logger.warning(
                f"boxed_answer: {timeouts} of {len(verdicts)} completions were too costly to check (over "
                f"{self.time_limit} s, or huge numbers) and score as wrong; {self.timeouts} so far"
            )
        ended = ended if ended is not None else ended_flags(completion_ids, self.stop_token_ids, len(verdicts))
        rewards = [self.rewards[v] if done else self.cut_off for v, done in zip(verdicts, ended)]
        if self.unboxed_correct is not None:
            for i, (verdict, done, completion, reference) in enumerate(zip(verdicts, ended, completions, references)):
                if done and verdict == verifier.MISSING and verifier.unboxed_correct(
                        completion_text(completion), reference, self.time_limit):
                    rewards[i] = self.unboxed_correct
        return rewards


def make_boxed_answer(correct=1.0, wrong=0.0, missing=0.0, unboxed_correct=None, time_limit=verifier.TIME_LIMIT,
                      stop_token_ids=()):
    """The `boxed_answer` reward with these rewards for a correct, wrong and missing final answer (and, unless None,
    for a right last number written without a box)."""
    return BoxedAnswer(correct, wrong, missing, unboxed_correct, time_limit, stop_token_ids)


def boxed_format(prompts, completions, **kwargs):
    """1.0 when the completion gives a final `\\boxed{...}` answer (as `boxed_answer` reads it), else 0.0."""
    return [float(verifier.final_answer(completion_text(c)) is not None) for c in completions]


# The two ways a user's reward function can be written, as an error line shows them.
SIGNATURES = ("def f(prompts, completions, **kwargs) -> list of floats (TRL's: each dataset column comes as a keyword "
              "argument)", "def f(samples) -> list or numpy array of floats (samples: one dict per completion, "
              "{'prompt': text, 'completion': text, column: value, ...})")


def is_user_func(name):
    """Whether a --reward_funcs name is a user's function: `module.function` or `path/to/file.py:function`."""
    return name not in BUILTIN and ("." in name or ":" in name)


def logged_name(name):
    """The name a reward function is logged under (`rewards/<name>/mean`) and named by in alarms: the name
    --reward_funcs gave, but a file given by an absolute path keeps only its file name (`/home/me/r.py:fn` ->
    `r.py:fn`), where the whole path would make tags like `rewards//home/me/...`."""
    by_file = _file_and_function(name) if is_user_func(name) else None
    return f"{by_file[0].name}:{by_file[1]}" if by_file and by_file[0].is_absolute() else name


def _file_and_function(path):
    """(the file, the function's name) of `path/to/file.py:function`, or None for a dotted import path."""
    file, colon, name = path.rpartition(":")
    return (Path(file).expanduser(), name) if colon and file.endswith(".py") else None


def _import_file(file, path):
    """The module in the Python file `file` (named in --reward_funcs as `path`), imported under its file's stem."""
    if not file.is_file():
        from rlhf.data import did_you_mean_path

        raise UserError(f"reward function '{path}': {file} is not a file{did_you_mean_path(file)}; give "
                        "path/to/file.py:function, the path from the current folder or absolute")
    loaded = sys.modules.get(file.stem)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == file.resolve():
        return loaded  # imported once (the preflight checked it): its top level runs once, as an import's would
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.setdefault(file.stem, module)  # as an import would: pickle and the user's own imports find it
    return module


def import_reward_func(path):
    """A user function given by dotted import path, e.g. `my_rewards.brevity` (the current folder is searched), or by
    file, `path/to/my_rewards.py:brevity`, ready to be called with TRL's arguments: a function of one argument (the
    batch as a list of dicts, as TRL's GRPO guide writes it) is adapted. A module that does not import, or a
    signature that cannot work, is a `UserError`."""
    by_file = _file_and_function(path)
    if by_file is None and ":" in path:
        raise UserError(f"reward function '{path}': give module.function or path/to/file.py:function (the file "
                        "ending in .py)")
    module_name, _, name = path.rpartition(".") if by_file is None else (str(by_file[0]), ":", by_file[1])
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name) if by_file is None else _import_file(by_file[0], path)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):  # a module the user's module imports
            raise UserError(f"the module of reward function '{path}' does not import: ModuleNotFoundError: {error}; "
                            "install it, or fix the import, and run again") from None
        raise UserError(
            f"cannot import reward function '{path}' ({error}); give a built-in ({', '.join(BUILTIN)}) or "
            "module.function importable from the current folder"
        ) from None
    except UserError:
        raise
    except Exception as error:  # the user's module: a syntax error, or anything its top level raised
        where = f" ({Path(error.filename).name} line {error.lineno})" if isinstance(error, SyntaxError) else ""
        raise UserError(f"the module of reward function '{path}' does not import: {type(error).__name__}{where}: "
                        f"{getattr(error, 'msg', error)}; fix it and run again") from None
    func = getattr(module, name, None)
    if func is None:
        raise UserError(f"cannot import reward function '{path}' (module '{module_name}' has no '{name}'); give a "
                        f"built-in ({', '.join(BUILTIN)}), module.function importable from the current folder, or "
                        "path/to/file.py:function")
    if not callable(func):
        raise UserError(f"reward function '{path}' is not callable")
    style = _call_style(func)
    if style is None:
        raise UserError(f"reward function '{path}' takes {_parameters(func)}, which no reward call can fill; write it "
                        f"as {SIGNATURES[0]}, or as {SIGNATURES[1]}")
    return func if style == "trl" else SamplesRewardFunc(func)


def _call_style(func):
    """'trl' (keywords prompts, completions and the columns), 'samples' (one argument: the batch as dicts), or None
    (neither can call it)."""
    import inspect

    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # no signature to read (some builtins): called as TRL calls it
        return "trl"
    if any(p.kind is p.VAR_KEYWORD for p in parameters):  # TRL passes everything by keyword (columns included)
        return None if any(p.default is p.empty and p.kind is p.POSITIONAL_ONLY for p in parameters) else "trl"
    required = [p for p in parameters if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(required) == 1 and positional and required[0] is positional[0]:
        return "samples"
    return None  # TRL also passes trainer_state, completion_ids and every column: without **kwargs, it fails


def _parameters(func):
    import inspect

    return f"{func.__name__}{inspect.signature(func)}"


class SamplesRewardFunc:
    """A reward function of one argument, called with the batch as one dict per completion: {'prompt': the prompt's
    last message, 'completion': the completion's text, and each dataset column's value}."""

    def __init__(self, func):
        self.func, self.__name__ = func, func.__name__

    def __call__(self, prompts, completions, completion_ids=None, **kwargs):
        columns = {key: value for key, value in kwargs.items()
                   if isinstance(value, list) and len(value) == len(completions)}
        samples = [{"prompt": completion_text(prompt), "completion": completion_text(completion),
                    **{key: value[i] for key, value in columns.items()}}
                   for i, (prompt, completion) in enumerate(zip(prompts, completions))]
        return self.func(samples)


def check_reward_funcs(names):
    """Import each user function of --reward_funcs now (one line for a module that does not import or a signature
    that cannot work): before the output folder is taken or any model loads."""
    for name in names:
        if is_user_func(name):
            import_reward_func(name)


class CheckedRewardFunc:
    """Wraps a reward function: one clear line naming it if it raises, returns the wrong count or a non-number."""

    def __init__(self, func, name):
        self.func, self.__name__ = func, name

    def __call__(self, prompts, completions, **kwargs):
        from rlhf.rewards.reward_model import check_finite

        try:
            returned = self.func(prompts=prompts, completions=completions, **kwargs)
        except Exception as error:  # a user's function: report it in one line, whatever it raised
            raise RewardFunctionError(f"reward function '{self.__name__}' raised {type(error).__name__}: {error}")
        expected = f"it must return a list of {len(completions)} numbers, one per completion"
        if isinstance(returned, (str, bytes, dict)) or not hasattr(returned, "__iter__"):
            raise RewardFunctionError(f"reward function '{self.__name__}' returned {_shown(returned)}; {expected}")
        values = list(returned)
        if len(values) != len(completions):
            raise RewardFunctionError(
                f"reward function '{self.__name__}' returned {len(values)} values for {len(completions)} "
                f"completions; {expected}"
            )
        for i, value in enumerate(values):
            values[i] = _number(value)
            if values[i] is None:
                raise RewardFunctionError(
                    f"reward function '{self.__name__}' returned {_shown(value)} for completion {i + 1}; {expected}"
                )
        state = kwargs.get("trainer_state")
        check_finite(values, f"reward function '{self.__name__}'", state.global_step + 1 if state else "?")
        return values


def _number(value):
    """`value` as a float, or None when it is not a number (a string is not, even "1.0": it is a mistake)."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _shown(value):
    """A returned value as a reward function's error names it: its repr, cut short, and its type."""
    text = repr(value)
    return f"{text[:60] + '...' if len(text) > 60 else text} (a {type(value).__name__})"


def check_reward_weights(weights, names):
    """One weight per reward function, or none at all (all 1); each function named once (twice would count it
    twice, under one name in the logs)."""
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UserError(f"--reward_funcs names {' '.join(twice)} more than once; name each function once (weigh it "
                        "with --reward_weights)")
    if weights is not None and len(weights) != len(names):
        raise UserError(
            f"--reward_weights has {len(weights)} values for {len(names)} --reward_funcs ({' '.join(names)}); "
            "give one weight per function"
        )


def check_reward_columns(names, dataset_name, columns):
    """Refuse, before any model loads, data the reward functions cannot score: `boxed_answer` needs each row's
    reference answer (found out after generating, the generation would be thrown away)."""
    if "boxed_answer" in names and not {"ground_truth", "answer"} & set(columns):
        raise UserError(f"--reward_funcs boxed_answer needs each row's reference answer in a `ground_truth` (or GSM8K "
                        f"`answer`) column; dataset {dataset_name} has {', '.join(sorted(columns))}: add one, or "
                        "score with other --reward_funcs")


def _load_math_verify():
    """Import math-verify now (a missing install fails before any model loads) and set up its parser."""
    try:
        verifier.warm_up()
    except ImportError:
        raise UserError(
            "boxed_answer needs math-verify: pip install math-verify==0.9.0 (it is in requirements.txt)"
        ) from None


def _boxed_answer(boxed_rewards, stop_token_ids):
    _load_math_verify()
    return make_boxed_answer(*boxed_rewards, stop_token_ids=stop_token_ids)


# The built-in rule-based reward functions, by the name --reward_funcs gives: each entry builds its function from the
# run's settings (the boxed_* rewards, the tokens that end a completion). Adding one is one entry here; `--help`,
# the errors and `outcome_rewards` (what it pays) follow. `reward_model` is not here: it loads a model.
REGISTRY = {
    "boxed_answer": _boxed_answer,
    "boxed_format": lambda boxed_rewards, stop_token_ids: boxed_format,
}
BUILTIN = ("reward_model", *REGISTRY)


def load_reward_funcs(names, reward_model_scorer=None, boxed_rewards=(1.0, 0.0, 0.0), stop_token_ids=()):
    """The reward functions named on the command line, each wrapped in `CheckedRewardFunc`.

    Names are all resolved (user functions imported) before `reward_model_scorer`, a zero-argument callable that
    loads the reward model, is called, so a typo costs seconds. `stop_token_ids`: the tokens that end a completion
    (`boxed_answer` scores one that has none as cut off).
    """
    resolved = {}
    for name in names:
        if name in REGISTRY:
            resolved[name] = CheckedRewardFunc(REGISTRY[name](boxed_rewards, stop_token_ids), name)
        elif is_user_func(name):
            resolved[name] = CheckedRewardFunc(import_reward_func(name), logged_name(name))
        elif name != "reward_model":
            raise UserError(
                f"unknown reward function '{name}'; use {', '.join(BUILTIN)}, a dotted import path (module.func) or "
                "a file and function (path/to/file.py:func)"
            )
    if "reward_model" in names:
        resolved["reward_model"] = reward_model_scorer()  # checks its own values
    return [resolved[name] for name in names]


################
# What each outcome earns
################

# A math completion's possible outcomes, each as a completion of "What is 2 + 3?" (ground truth 5) and whether it
# ended (False: cut off at the length limit).
OUTCOMES = {
    "correct": ("2 + 3 = 5. \\boxed{5}", True),
    "wrong": ("2 + 3 = 6. \\boxed{6}", True),
    "right number, no box": ("2 + 3 = 5.", True),
    "no answer": ("I do not know.", True),
    "correct, cut off": ("2 + 3 = 5. \\boxed{5} \\boxed{5} \\boxed", False),
    "wrong, cut off": ("2 + 3 = 6. \\boxed{6} \\boxed{6} \\boxed", False),
    "no answer, cut off": ("2 + 3 = 5, and 5 is", False),
}


def outcome_rewards(names, weights=None, boxed_rewards=(1.0, 0.0, 0.0)):
    """{outcome: the weighted total it earns} under these rule-based reward functions (the package's own functions
    score each outcome of `OUTCOMES`), or None when one of them is not rule-based (a reward model, a user's
    function): then no table can be worked out in advance."""
    if not names or any(name not in REGISTRY for name in names):
        return None
    weights = list(weights or [1.0] * len(names))
    texts = [[{"role": "assistant", "content": text}] for text, _ in OUTCOMES.values()]
    ended = [done for _, done in OUTCOMES.values()]
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}]] * len(texts)
    totals = [0.0] * len(texts)
    for name, weight in zip(names, weights):
        func = REGISTRY[name](boxed_rewards, ())
        values = func(prompts=prompts, completions=texts, ground_truth=["5"] * len(texts), ended=ended)
        totals = [total + weight * value for total, value in zip(totals, values)]
    return dict(zip(OUTCOMES, totals))


def reward_order_problems(totals):
    """What a policy would learn to game under these outcome totals (`outcome_rewards`), one phrase each; [] when a
    correct answer earns more than every other outcome, a wrong answer no more than none, and a completion cut off no
    more than an ended wrong or missing one. Under GRPO's group normalisation only this order matters."""
    if totals is None:
        return []
    problems = []
    others = {name: value for name, value in totals.items() if name != "correct"}
    beaten = [name for name, value in others.items() if value >= totals["correct"]]
    if beaten:
        problems.append(f"a correct answer ({totals['correct']:g}) earns no more than {', '.join(beaten)}")
    if totals["wrong"] > totals["no answer"]:
        problems.append(f"a wrong answer ({totals['wrong']:g}) earns more than none ({totals['no answer']:g}): the "
                        "policy learns to box guesses")
    floor = min(totals["wrong"], totals["no answer"])
    running_on = [name for name in OUTCOMES if name.endswith("cut off") and totals[name] > floor]
    if running_on:
        kinds = " or ".join(name.removesuffix(", cut off") for name in running_on)
        problems.append(f"a completion cut off at the length limit ({kinds}: up to "
                        f"{max(totals[name] for name in running_on):g}) earns more than an ended wrong or missing "
                        f"answer ({floor:g}): the policy learns not to end")
    return problems


def check_reward_order(names, weights, boxed_rewards):
    """A warning line (or None) when rule-based rewards let a policy earn more by gaming them than by answering."""
    problems = reward_order_problems(outcome_rewards(names, weights, boxed_rewards))
    if not problems:
        return None
    return (f"warning: these rewards can be gamed: {'; '.join(problems)}. Pay the format only with a correct answer "
            "(e.g. --reward_weights 1 0 logs boxed_format without paying it) and give a wrong answer no more than a "
            "missing one (docs/rewards.md, What each outcome earns)")
