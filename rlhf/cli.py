"""Command-line parsing and the one-line errors a user can cause.

A mistake a user can make (bad path, typo in a flag or YAML key, values that cannot work together) ends in
one line on stderr that names the value and the fix, with exit code 2 and no traceback. Bugs still raise.
"""

import difflib
import functools
import sys
from pathlib import Path

import yaml

from rlhf.trl_compat import TrlParser

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """A problem the user can fix; reported as `error: <message>` and exit code 2."""


def exit_on_user_error(main):
    """Decorate a script's `main()` so that a `UserError` ends in one line and exit code 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(USER_ERROR_EXIT_CODE)

    return wrapper


def parse_args(dataclass_types, args=None, description=None):
    """Parse flags into `dataclass_types` (defaults < `--config file.yaml` < command line).

    Wraps `TrlParser.parse_args_and_config` so that a missing config file, an unknown key or flag, and a value
    rejected by a config's `__post_init__` become `UserError`s.
    """
    parser = TrlParser(dataclass_types, description=description)
    args = list(sys.argv[1:] if args is None else args)
    known = {action.dest for action in parser._actions} | {"env"}
    if "--config" in args:
        _check_config_file(args[args.index("--config") + 1 :][:1], known)
    _check_flags(args, known)
    try:
        return parser.parse_args_and_config(args)
    except ValueError as error:  # raised by HfArgumentParser and by the configs' __post_init__ checks
        raise UserError(str(error).splitlines()[0]) from None


def _check_config_file(path_arg, known):
    if not path_arg:
        raise UserError("--config needs a path to a YAML file, e.g. --config recipes/grpo.yaml")
    path = Path(path_arg[0])
    if not path.is_file():
        raise UserError(f"config file {path} does not exist; check the path given to --config")
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"config file {path} is not valid YAML{where}; fix the syntax there") from None
    if not isinstance(config, dict):
        raise UserError(f"config file {path} must hold a YAML mapping of flag names to values (key: value lines)")
    for key in config:
        if key not in known:
            raise UserError(f"unknown key '{key}' in {path}{_did_you_mean(str(key), known)}; see --help for names")


def _check_flags(args, known):
    for arg in args:
        if arg.startswith("--") and arg != "--config":
            name = arg[2:].split("=", 1)[0].replace("-", "_")
            if name.startswith("no_") and name[3:] in known:
                continue
            if name not in known and name != "help":
                raise UserError(f"unknown flag {arg.split('=', 1)[0]}{_did_you_mean(name, known)}; see --help")


def _did_you_mean(name, known):
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
