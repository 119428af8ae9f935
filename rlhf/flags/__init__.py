"""Each script's flags as a table (`<script>.json` here), for what parsing refuses before the heavy imports.

A script's parser is built from its configs, subclasses of TRL's, so building it imports TRL, transformers and torch
(seconds). The table holds what that parser knows, written by `python -m rlhf.flags.write`: its `--help` text, its
actions (options, dest, nargs, default, choices, type) and the names each flag answers to (`known`). `rlhf.cli` reads
it before the heavy imports: `--help` and the refusals made while reading the flags come at once (`TableParser`), as
do those of the package's own steps and checks that a table names (`settled`, and each config's `checks`, run by
`rlhf.cli.check_quickly`). A table is used only while it is fresh: the same Python, TRL, transformers, peft,
accelerate and torch release, and the same source files (`SOURCES`, the script); otherwise parsing takes the heavy
path alone, which is always right.
"""

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

from rlhf.errors import UserError

FOLDER = Path(__file__).parent
ROOT = FOLDER.parents[1]
SCRIPTS = ("train_grpo", "train_ppo", "train_reward_model", "evaluate_generations", "plot_training_progress")
LIBRARIES = ("trl", "transformers", "peft", "accelerate", "torch")  # torch: transformers' default --optim reads it
# The files a script's flags and help come from, besides the script itself (its docstring is the help's top).
SOURCES = ("config.py", "rlhf/fields/shared.py", "rlhf/fields/checks.py", "rlhf/cli.py", "rlhf/spellings.py",
           "rlhf/batches.py", "rlhf/models.py", "rlhf/flags/__init__.py")
HELP_COLUMNS = 120  # the width the stored --help is written at


def freshness(script):
    """What a table must match to be used: Python's and the libraries' versions (a release, whatever its build:
    torch's +cpu or +cu128), and a hash of the source files."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": "{}.{}".format(*sys.version_info)}  # argparse's help layout changes between them
    for name in LIBRARIES:
        try:
            versions[name] = version(name).split("+")[0]
        except PackageNotFoundError:
            versions[name] = None
    digest = hashlib.sha256()
    for source in (*SOURCES, f"{script}.py"):  # line ends as written: a Windows checkout may turn them into CRLF
        digest.update((ROOT / source).read_bytes().replace(b"\r\n", b"\n"))
    return {"versions": versions, "sources": digest.hexdigest()}


def table_path(script):
    return FOLDER / f"{script}.json"


def fresh_table(script):
    """The script's table, or None where there is none or it is stale (the caller then builds the heavy parser)."""
    path = table_path(script)
    if script not in SCRIPTS or not path.is_file():
        return None
    table = json.loads(path.read_text(encoding="utf-8"))
    return table if table.get("freshness") == freshness(script) else None


def finite_float(text):
    """argparse's `float` without nan and inf: no setting means either, and a NaN learning rate or reward weight
    would fail (or train on NaN) only once training runs."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def string_to_bool(text):
    """TRL's `string_to_bool` (trl/scripts/_hf_argparser.py, 1.16), the type of a bool flag; the same error line."""
    if text.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if text.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {text} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive).")


def _none_or(inner):
    """TRL's `_accept_none`: a `T | None` flag also takes none and null."""
    def parse(text):
        return None if text.lower() in ("none", "null") else inner(text)

    parse.__name__ = inner.__name__  # argparse's error line names the type
    return parse


# The types a table names, by the name of the parser's type function; any other type is not checked here.
TYPES = {"int": int, "float": float, "finite_float": finite_float, "string_to_bool": string_to_bool, "str": str,
         "<lambda>": str}  # TRL's choice type: a string checked against the choices


class OneLineErrors:
    """An argparse parser whose error is one `UserError` line (argparse would print the usage and exit)."""

    def error(self, message):
        raise UserError(f"{message}; see --help")


class TableParser(OneLineErrors, argparse.ArgumentParser):
    """A plain argparse parser with the script's actions as its table holds them: it refuses what the script's own
    parser refuses while reading flags (an unknown type's values are left to that parser), and prints the stored
    `--help`."""

    def __init__(self, table):
        super().__init__(add_help=False)
        self.actions = []
        for spec in table["actions"]:
            if spec["action"] == "help":
                self.actions.append(self.add_argument(*spec["options"], action=_StoredHelp, help_text=table["help"]))
                continue
            kwargs = {"dest": spec["dest"], "default": spec["default"], "required": spec["required"]}
            if spec["action"] == "store":
                kind = TYPES.get(spec["type"])
                kwargs.update(nargs=spec["nargs"], const=spec["const"], choices=spec["choices"],
                              type=_none_or(kind) if kind and spec["takes_none"] else kind)
            self.actions.append(self.add_argument(*spec["options"], action=spec["action"], **kwargs))

    def set_defaults_with_config(self, **config):
        """TRL's `TrlParser.set_defaults_with_config`: a YAML's values become the defaults."""
        for action in self.actions:
            if action.dest in config:
                action.default, action.required = config[action.dest], False


class _StoredHelp(argparse.Action):
    def __init__(self, option_strings, dest, help_text, **kwargs):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0)
        self.help_text = help_text

    def __call__(self, parser, namespace, values, option_string=None):
        print(self.help_text, end="")
        parser.exit()
