"""Write each script's flag table (`rlhf/flags/<script>.json`) from the script's own parser:

    python -m rlhf.flags.write

Run it after a change to a flag, a default, a help text, a script's docstring or the parsing (`SOURCES`), and after
upgrading Python, TRL, transformers, peft, accelerate or torch: a stale table is never used (the scripts then start
in seconds), and `tests/test_flags.py` fails until it is written again. The scripts are imported by name, from the
repository root.
"""

import argparse
import dataclasses
import importlib
import json
import os

from rlhf.cli import Parser, settled_steps
from rlhf.fields.checks import CONFIG_CHECKS
from rlhf.flags import HELP_COLUMNS, SCRIPTS, TYPES, freshness, table_path
from rlhf.trl_compat import parser_actions

ACTIONS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
           "_HelpAction": "help"}


def table(script):
    """The flag table of `script` (e.g. "train_grpo"), as its parser is built now."""
    module = importlib.import_module(script)
    parser = Parser(module.configs(), module.__doc__)
    parser.parser.prog = f"{script}.py"
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)  # argparse wraps the help at the terminal's width
    try:
        text = parser.parser.format_help()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return {"freshness": freshness(script), "help": text, "known": parser.known,
            "actions": [_action(action) for action in parser_actions(parser.parser)],
            "settled": settled_steps(parser.dataclass_types),
            "configs": [_config(cls) for cls in parser.dataclass_types]}


def _config(cls):
    """What `rlhf.cli.check_quickly` needs of a config class: the name its checks go by (`CONFIG_CHECKS`: its own, or
    its nearest parent's), and its fields."""
    checks = next((parent.__name__ for parent in cls.__mro__ if parent.__name__ in CONFIG_CHECKS), None)
    return {"checks": checks, "fields": [f.name for f in dataclasses.fields(cls) if f.init]}


def _action(action):
    kind = ACTIONS[type(action).__name__]  # another kind of action: add it here and to rlhf.flags.TableParser
    spec = {"action": kind, "options": action.option_strings}
    if kind == "help":
        return spec
    spec.update(dest=action.dest, default=_plain(action.default), required=action.required)
    if kind == "store":
        name = getattr(action.type, "__name__", None)
        choices = list(action.choices) if action.choices is not None else None
        if name not in TYPES or (choices and not all(isinstance(choice, str) for choice in choices)):
            name, choices = None, None  # not checked by the table: the script's parser checks it
        spec.update(nargs=action.nargs, const=_plain(action.const), choices=choices, type=name,
                    takes_none=name is not None and _takes_none(action.type))
    return spec


def _plain(value):
    """A default or const as JSON holds it, or None (argparse converts only a string default, and None is none)."""
    if type(value) in (str, int, float, bool, type(None)):
        return value
    if type(value) is list and all(type(item) in (str, int, float, bool) for item in value):
        return value
    return None


def _takes_none(parse):
    """Whether a type function reads none as None (TRL's `_accept_none` around a `T | None` field's type)."""
    try:
        return parse("none") is None
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return False


def main():
    for script in SCRIPTS:
        path = table_path(script)
        path.write_text(json.dumps(table(script), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(path.parents[2])}")


if __name__ == "__main__":
    main()
