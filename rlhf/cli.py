"""Command-line parsing, a `--help` a person can read, and the one-line errors a user can cause.

A mistake a user can make (bad path, typo in a flag or YAML key, values that cannot work together) ends in
one line on stderr that names the value and the fix, with exit code 2 and no traceback. Bugs still raise.
"""

import argparse
import dataclasses
import functools
import os
import signal
import sys
from pathlib import Path

from rlhf import flags
from rlhf.batches import grpo_flags, ppo_flags
from rlhf.errors import INTERRUPTED_EXIT_CODE, USER_ERROR_EXIT_CODE, NothingToDo, UserError
from rlhf.flags import OneLineErrors
from rlhf.flags import finite_float as _finite_float
from rlhf.lifecycle.lock import release_locks
from rlhf.lifecycle.signals import Ending, abort, handle_stop_signals, restore
from rlhf.processes import is_main_process, launched_processes
from rlhf.spellings import TRANSLATED_FLAGS, did_you_mean, translate_flags

__all__ = ["USER_ERROR_EXIT_CODE", "UserError", "exit_on_user_error", "parse_args"]

# The package's own flags, by group, as `--help` lists them first (the full list follows, one group per argument
# class: TRL's and transformers' options included). A flag a script does not have is skipped.
HELP_GROUPS = {
    "Model": ("model_name_or_path", "model_path", "dtype", "load_in_4bit", "trust_remote_code"),
    "LoRA": ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"),
    "Data": ("dataset_name", "dataset_train_split", "max_samples", "train_samples", "eval_samples", "num_prompts",
             "max_prompt_length", "system_prompt", "append_system_prompt", "max_length"),
    "Reward": ("reward_model_name_or_path", "reward_model_dtype", "reward_funcs", "reward_weights",
               "boxed_correct_reward", "boxed_wrong_reward", "boxed_missing_reward", "value_model_path",
               "missing_eos_penalty", "judge_model_name_or_path"),
    "Batch and generation": ("prompts_per_step", "prompts_per_generation", "prompts_per_rollout", "num_generations",
                             "num_completions", "per_device_train_batch_size", "gradient_accumulation_steps",
                             "batch_size", "max_completion_length", "max_new_tokens", "temperature", "top_p",
                             "use_dynamic_sampling", "dynamic_sampling_max_gen_batches", "dynamic_sampling_tolerance"),
    "Optimization": ("learning_rate", "lr_scheduler_type", "warmup_steps", "num_train_epochs", "max_steps",
                     "total_episodes", "beta", "epsilon", "num_ppo_epochs", "kl_coef", "target_kl", "kl_horizon",
                     "gamma", "lam", "value_lam", "critic_warmup", "cliprange", "bf16", "tf32",
                     "gradient_checkpointing", "seed"),
    "Held-out evaluation": ("eval_prompts", "eval_steps", "eval_completions", "eval_dataset_name",
                            "end_on_best_checkpoint"),
    "Output": ("output_dir", "output_file", "log_dir", "output", "csv", "smoothing", "extra", "logging_steps",
               "save_steps", "save_total_limit", "report_to", "resume_from_checkpoint"),
}
SUMMARY_TITLE = "Main flags (each is described below, with TRL's and transformers' other options):"
# Keys of a `trl grpo` YAML that this package does not take, with what to write instead.
UNSUPPORTED_KEYS = {
    "datasets": "TRL's dataset mixtures are not supported; give one dataset with dataset_name (and "
                "dataset_train_split)",
}
class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the usage examples of a script's docstring as written, and shows each flag's default (once: a help that
    says its own, "Default: ...", one derived from other flags, gets no "(default: None)" after it)."""

    def _get_help_string(self, action):
        if "Default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser:
    """TRL's `TrlParser` (defaults < `--config file.yaml` < flags) with one-line errors and grouped help."""

    def __init__(self, dataclass_types, description=None):
        from rlhf.trl_compat import TrlParser, check_trl_version, parser_actions

        check_trl_version()  # before any flag is read: every script relies on the pinned release
        self.dataclass_types = tuple(dataclass_types)

        class _Parser(OneLineErrors, TrlParser):  # argparse would print the usage and exit: one line instead
            pass

        fields = {f.name for dataclass_type in dataclass_types for f in dataclasses.fields(dataclass_type) if f.init}
        description = "\n\n".join(text for text in (description, _summary(fields)) if text)
        self.parser = _Parser(dataclass_types, description=description, formatter_class=_HelpFormatter,
                              usage="python %(prog)s [--config FILE.yaml] [--flag value ...]")
        for action in parser_actions(self.parser):
            if action.type is float:
                action.type = _finite_float
        _describe_negations(self.parser)
        # Every name a flag answers to (its field name, `-` spellings, aliases such as --use_lora for --use_peft),
        # with `_` for `-`, mapped to the field it sets.
        self.known = {option.lstrip("-").replace("-", "_"): action.dest
                      for action in parser_actions(self.parser) for option in action.option_strings if option != "-h"}

    def parse(self, args):
        from rlhf.trl_compat import parser_actions

        try:
            values, args, config, translated = read_flags(self.parser, parser_actions(self.parser), self.known, args)
            for key, value in (config.pop("env", None) or {}).items():  # TRL's `env:` section: environment variables
                os.environ[key] = str(value)
            machine_notes = self._machine(values)
            notes = _settle(values, settled_steps(self.dataclass_types)) + machine_notes
            configs = self.parser.parse_dict(vars(values))  # each config checks its own fields (raises ValueError)
        except ValueError as error:  # raised by HfArgumentParser, rlhf.batches and the configs' __post_init__ checks
            raise UserError(str(error).splitlines()[0]) from None
        given = {*config, *self._given_flags(args)}
        if translated and is_main_process():  # once the flags parsed: a refused launch says its error alone
            print("\n".join(translated), flush=True)
        _print_notes(notes, given)
        for parsed in configs:  # what the user gave (a flag or a YAML key), for checks that fit only defaults
            parsed.__dict__["_given"] = frozenset(given)
        return configs

    def _machine(self, values):
        """What the machine and the launcher decide (`rlhf.engines.resolve_machine`: CPU processes, DeepSpeed's
        backend on CPU, TF32, pinned memory, bf16 refused without it), set on the parsed `values`, and the note lines
        that say so. Decided before the configs are built: transformers sets its devices up from these fields when
        its `TrainingArguments` is. Nothing for a script without training arguments."""
        if "use_cpu" not in self.known.values():
            return []
        from rlhf.engines import launch_notes, resolve_machine

        notes = _set(values, resolve_machine(values))
        notes += [(name, line, False) for name, line in launch_notes(values)]  # said where the flag is given
        return notes

    def _given_flags(self, args):
        """The fields the command line sets (a `--no_X` flag sets X)."""
        names = (arg[2:].split("=", 1)[0].replace("-", "_") for arg in args if arg.startswith("--"))
        return {self.known.get(name, self.known.get(name.removeprefix("no_"))) for name in names}


def _print_notes(notes, given):
    """Say, in one line each, every value changed on the user's behalf and every flag that does nothing (`notes`:
    [(field, line, said always)]): where the user gave the field, or where it is news anyway. Once per launch: the
    main process prints."""
    lines = list(dict.fromkeys(line for name, line, always in notes if always or name in given))  # each line once
    if lines and is_main_process():
        print("\n".join(lines), flush=True)


# TRL's ModelConfig fields that set up the LoRA adapter, which --use_peft asks for.
LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save", "use_rslora",
               "use_dora")


def settled_steps(dataclass_types):
    """The steps of `_settle` for configs of `dataclass_types`: each class names its own (`_settled`, keys of
    `SETTLE`), run in the order of the classes and of their names."""
    return list(dict.fromkeys(step for cls in dataclass_types for step in getattr(cls, "_settled", ())))


def _settle(values, steps):
    """What the package settles from the flags before the configs are built, set on the parsed `values`, and the
    note lines that say so or that a flag does nothing here: [(field, line, said always)], by the `steps` the
    configs name (`settled_steps`). The configs only check their own fields; what needs the launch (the process
    count) is read here. The batches of GRPO and PPO in TRL's terms come from `rlhf.batches` (TRL's GRPOConfig
    derives its generation batch from them as it is built)."""
    return [note for step in steps for note in SETTLE[step](values)]


def _lora_without_peft(values):
    if values.use_peft:
        return []
    line = ("note: the LoRA settings given (--lora_r, --lora_alpha, ...) do nothing without --use_peft: all weights "
            "train; add --use_peft (or use_peft: true) to train a LoRA adapter")
    return [(name, line, False) for name in LORA_FIELDS]  # said where the user gave one of them


def _reward_model_unused(values):
    """`trl grpo` would score with the reward model as well: say that this package does not."""
    if "reward_model" in values.reward_funcs:
        return []
    return [("reward_model_name_or_path", f"note: --reward_model_name_or_path {values.reward_model_name_or_path} "
             "is not used: --reward_funcs has no reward_model (add it to score with the model too)", False)]


def _held_out_off(values):
    if values.eval_prompts:
        return []
    return [(name, f"note: --{name} does nothing without --eval_prompts N: the held-out evaluation is off "
             "(--eval_prompts 0)", False) for name in ("eval_steps", "eval_completions", "eval_dataset_name")]


def _reward_model_eval_steps(values):
    return [("eval_steps", "note: --eval_steps does nothing in train_reward_model.py: the held-out pairs "
             "(--eval_samples) are scored once, after training", False)]


def _dynamic_sampling_off(values):
    if values.use_dynamic_sampling:
        return []
    return [(name, f"note: --{name} does nothing without --use_dynamic_sampling: every group drawn is trained on",
             False) for name in ("dynamic_sampling_max_gen_batches", "dynamic_sampling_tolerance")]


def _batches(translate):
    """The step of a batch translation (`rlhf.batches.grpo_flags` or `ppo_flags`): its lines, then its changes."""

    def settle(values):
        changes, lines = translate(values, launched_processes())
        return [(None, line, True) for line in lines] + _set(values, [(*change, False) for change in changes])

    return settle


def _stop_token_none(values):
    """PPO: without a stop token the penalty of a cut-off completion would lower every score alike."""
    if (str(values.stop_token).lower() != "none" or values.stop_token_id is not None
            or values.missing_eos_penalty is None):
        return []
    why = ("--stop_token none without --stop_token_id: completions run to --max_completion_length, none can end "
           "before it")
    return _set(values, [("missing_eos_penalty", None, why, True)])


def _best_checkpoint_kept(values):
    """transformers keeps the best checkpoint besides the newest, and at the end of training deletes every other
    checkpoint, the newest included, which resuming needs."""
    if not values.eval_prompts or values.save_total_limit != 1:
        return []
    why = "the best checkpoint by the held-out metric is kept besides the newest, which resuming needs"
    return _set(values, [("save_total_limit", 2, why, False)])


# What the parser may settle, by the name a config class gives in its `_settled`: each a function of the parsed
# values that sets what it settles on them and returns its note lines [(field, line, said always)].
SETTLE = {
    "lora_without_peft": _lora_without_peft,
    "reward_model_unused": _reward_model_unused,
    "held_out_off": _held_out_off,
    "reward_model_eval_steps": _reward_model_eval_steps,
    "dynamic_sampling_off": _dynamic_sampling_off,
    "grpo_batches": _batches(grpo_flags),
    "ppo_batches": _batches(ppo_flags),
    "stop_token_none": _stop_token_none,
    "best_checkpoint_kept": _best_checkpoint_kept,
}


def _set(values, changes):
    """Set each (field, value, why, said always) of `changes` on the parsed `values`, in order, and return the note
    lines [(field, line, said always)] of those whose value changed and have a `why`."""
    notes = []
    for name, value, why, always in changes:
        old = getattr(values, name)
        setattr(values, name, value)
        if why and old != value:
            notes.append((name, _changed_line(name, old, value, why), always))
    return notes


def exit_on_user_error(main):
    """Decorate a script's `main()`: a `UserError` ends in one line and exit code 2, `NothingToDo` in one, exit 0.

    Ctrl-C or SIGTERM outside training (models loading, saving; in training `rlhf.lifecycle.guard` decides) stops the
    script at once, in one line with exit code 130, not in a traceback.
    """

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        sigterm = handle_stop_signals(abort, (signal.SIGTERM,))
        code = None  # the exit code, once known; None for a bug's traceback, which Python prints
        try:
            result = main(*args, **kwargs)
            code = 0
            return result
        except NothingToDo as done:
            print(done)
            code = 0
        except UserError as error:
            if not is_main_process():
                _wait_for_the_main_process()
            print(f"error: {error}", file=sys.stderr)
            code = USER_ERROR_EXIT_CODE
        except KeyboardInterrupt:
            print("\nInterrupted: stopped at once (what was saved before stays intact).", file=sys.stderr, flush=True)
            code = INTERRUPTED_EXIT_CODE
        except SystemExit as stop:  # rlhf.lifecycle.guard's ends of training (interrupted, NaN)
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
            raise
        finally:
            restore(sigterm)
            if code is not None:  # ended: a signal from here on (the exit's own teardown) is said, not a traceback
                handle_stop_signals(Ending(code, is_main_process()))
            release_locks()  # every way out (done, refused, interrupted, NaN) frees the output folder
            if _close_process_group() and code is not None:
                from rlhf.trl_compat import exit_now  # (torch is loaded already: there is a process group)

                exit_now(code)
        sys.exit(code)

    return wrapper


def _wait_for_the_main_process(seconds=10):
    """In a process of a torchrun launch other than the main one, before its error line: every process of a launch
    meets the same error before training, and the main process says it. Once that process has ended, the launcher
    stops this one (SIGTERM, here ended silently) before it says it again; an error of this process alone is said
    after `seconds`."""
    import time

    handle_stop_signals(signal.SIG_DFL, (signal.SIGTERM,))
    time.sleep(seconds)


def _close_process_group():
    """Shut down the process group of a torchrun / accelerate launch, if there is one; say whether there was."""
    distributed = sys.modules.get("torch.distributed")  # never imported here: a one-process run has none
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return False
    distributed.destroy_process_group()
    return True


def _changed_line(name, old, value, why):
    """The one `note:` line of a value changed on the user's behalf (by the package's settling or by the machine)."""
    return f"note: --{name} {_spelled(old)} -> {_spelled(value)} ({why})"


def _spelled(value):
    return str(value).lower() if isinstance(value, bool) else value


def parse_args(dataclass_types, args=None, description=None, quick=None):
    """Parse flags into `dataclass_types` (defaults < `--config file.yaml` < command line).

    A missing config file, an unknown key or flag, a value of the wrong type and a value rejected by a config's
    `__post_init__` become `UserError`s. YAML keys, like flags, may be written with `-` or `_`.

    `dataclass_types` may be a script's function that imports and returns them (`configs`): the script's flag table
    (`rlhf.flags`) is read first, so that `--help` and what parsing refuses come before TRL, transformers and torch
    load (`check_quickly`), and with them what `quick` refuses (the checks of the script's preflight that need no
    model loaded and no library imported, e.g. `rlhf.preflight.quick_grpo`, given the parsed flags).
    """
    args = sys.argv[1:] if args is None else list(args)
    if callable(dataclass_types):
        check_quickly(Path(dataclass_types.__code__.co_filename).stem, args, quick)
        dataclass_types = dataclass_types()
    return Parser(dataclass_types, description).parse(args)


def check_quickly(script, args, quick=None):
    """What parsing `args` would refuse, from the script's flag table, without the heavy imports: what reading the
    flags refuses (`read_flags`), what settling them refuses (`_settle`: the batch arithmetic) and what the configs'
    own checks refuse (`rlhf.fields.checks.CONFIG_CHECKS`, run on a copy of each config's fields), then what `quick`
    refuses on the parsed flags (the preflight's checks that need no model and no library); `--help` prints the
    table's help and exits. Nothing where the table is missing or stale. The script's own parser and preflight run
    next and check it all again, with what only they know: TRL's and transformers' checks of their fields, what the
    machine decides (`Parser._machine`), the models' configs."""
    from rlhf.trl_compat import check_trl_version  # (TRL's package alone: 0.1 s)

    table = flags.fresh_table(script)
    if table is None:
        return
    check_trl_version()  # as the script's parser does, before any flag is read
    parser = flags.TableParser(table)
    try:
        values = read_flags(parser, parser.actions, table["known"], args)[0]
        _settle(values, table["settled"])
        for config in table["configs"]:
            _check_config(config, values)
    except ValueError as error:
        raise UserError(str(error).splitlines()[0]) from None
    if quick is not None:
        quick(values)


def _check_config(config, values):
    """Run a config's checks (`config`: their name in `CONFIG_CHECKS` and the config's fields, as the table holds
    them) on its fields' parsed `values`. A value that only the script's parser reads right (a type the table does
    not name stays text) can make a check fail otherwise than ValueError: that is left to the script's parser."""
    from rlhf.fields.checks import CONFIG_CHECKS

    check = CONFIG_CHECKS.get(config["checks"])
    if check is None:
        return
    try:
        check(argparse.Namespace(**{name: getattr(values, name) for name in config["fields"]}))
    except ValueError:
        raise
    except Exception:  # e.g. a comparison of text with a number: the script's parser reads the value, then checks
        return


def read_flags(parser, actions, known, args):
    """The steps of parsing that read the flags, the same for the script's parser and its flag table's
    (`check_quickly`): the `--config` YAML (defaults < YAML < flags), the seeds' spellings translated, unknown flags
    refused, argparse's types and choices, values that follow no flag refused. Returns the parsed values, the
    flags (translated), the YAML's values (its `env:` section included) and the note lines of what was translated."""
    args, config, read = list(args), {}, []
    for i, arg in enumerate(args):
        if arg == "--config" or arg.startswith("--config="):
            path = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else None)
            config, as_flags, read = _read_config(path, known)
            _check_config_values(config, actions, path)
            config = _listed(config, actions)
            del args[i : i + (1 if "=" in arg else 2)]
            args[:0] = as_flags  # the seeds' keys, translated as their flags are; first, so any flag given wins
            break
    args, translated = translate_flags(args, known)
    _check_flags(args, known)
    parser.set_defaults_with_config(**{key: value for key, value in config.items() if key != "env"})
    values, unused = parser.parse_known_args(args)
    if unused:  # unknown flags were refused above: what is left are values that follow no flag
        raise UserError(_stray_values_line(unused))
    return values, args, config, read + translated


def _stray_values_line(values):
    """The error line of values given without a flag (`python train_grpo.py foo`): the scripts take flags only."""
    listed = ", ".join(repr(value) for value in values)
    return (f"unexpected argument{'s' * (len(values) > 1)} {listed}: these scripts take no positional arguments; give "
            f"each value after the flag it sets (--name {values[0]}), or quote a value that holds spaces; see --help")


def _describe_negations(parser):
    """Give each `--no_X` flag its own help: transformers copies X's ("Enable ...") and shows `(default: False)`.

    The negation's default is set to X's (argparse takes a destination's default from its first action, X, so
    parsing is unchanged; a YAML `--config` sets both) for `--help` to show the value it turns off.
    """
    from rlhf.trl_compat import parser_actions

    positives = {}
    for action in parser_actions(parser):
        if action.dest in positives and f"--no_{action.dest}" in action.option_strings:
            action.default = positives[action.dest].default
            action.help = f"Same as --{action.dest} false: turns it off (--{action.dest} defaults to %(default)s)."
        positives.setdefault(action.dest, action)


def _summary(fields):
    """The package's own flags by group (`HELP_GROUPS`), for the top of `--help`: the full list is long."""
    import textwrap

    lines = [SUMMARY_TITLE]
    for title, names in HELP_GROUPS.items():
        flags = " ".join(f"--{name}" for name in names if name in fields)
        if flags:
            lines += textwrap.wrap(flags, 116, initial_indent=f"  {title + ':':<22}", subsequent_indent=" " * 24)
    return "\n".join(lines) if len(lines) > 1 else ""


def _read_config(path, known):
    """The YAML file of `--config` as {field name: value}; keys are read like flags (`-` or `_`, aliases)."""
    import yaml

    if not path:
        raise UserError("--config needs a path to a YAML file, e.g. --config configs/grpo.yaml")
    path = Path(path)
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
    normalized, as_flags, notes, unknown = {}, [], [], []
    for key, value in _flattened(config, known, notes):
        name = str(key).replace("-", "_")
        if name in UNSUPPORTED_KEYS:
            raise UserError(f"{key} in {path}: {UNSUPPORTED_KEYS[name]}")
        if name in TRANSLATED_FLAGS and TRANSLATED_FLAGS[name][1] in known:  # a seed's key: as its flag
            as_flags += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
        elif name not in known and name != "env":
            unknown.append(f"'{key}'{did_you_mean(name, known)}")
        else:
            normalized[known.get(name, name)] = value
    if unknown:
        keys = "unknown key" + ("s " if len(unknown) > 1 else " ")
        raise UserError(f"{keys}{', '.join(unknown)} in {path}; see --help for names")
    return normalized, as_flags, notes


def _flattened(config, known, notes):
    """A YAML's (key, value) pairs, a nested section (`model: {path: ...}`, as a math GRPO's YAML writes it) read
    as the flat keys it means here (`model_path`, then `path`), with a note; TRL's `env:` section and a key that
    takes a mapping stay as they are."""
    for key, value in config.items():
        name = str(key).replace("-", "_")
        if not isinstance(value, dict) or name in known or name == "env":
            yield key, value
            continue
        for sub, inner in value.items():
            sub = str(sub).replace("-", "_")
            flat = next((option for option in (f"{name}_{sub}", sub) if option in known), f"{name}.{sub}")
            if flat in known:
                notes.append(f"note: {key}: {{{sub}: ...}} read as {flat} (this package's keys are flat)")
            yield flat, inner


def _check_config_values(config, actions, path):
    """Check a YAML value as argparse checks a flag's: a value that is not a string skips argparse's conversion, so a
    list, a mapping or a null where a number goes would otherwise fail deep inside a config's checks."""
    by_dest = {}
    for action in actions:
        by_dest.setdefault(action.dest, action)
    for dest, value in config.items():
        action = by_dest.get(dest)
        if action is None or action.type is None or isinstance(value, str):
            continue  # a string is converted and checked by argparse, as a flag is
        if value is None:
            if action.default is None:
                continue
            raise UserError(f"{dest} is empty (null) in {path}; give it a value or delete the line")
        listed = action.nargs in ("+", "*")
        for item in value if isinstance(value, list) and listed else [value]:
            try:
                if isinstance(item, (list, dict)) or (isinstance(item, bool) and action.type in (int, _finite_float)):
                    raise argparse.ArgumentTypeError("")
                action.type(str(item))
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                kind = {int: "integer", _finite_float: "number", str: "text"}.get(action.type, "value")
                what = f"a {kind} or a list of them" if listed else f"one {kind}"
                raise UserError(f"{dest}: {value!r} in {path} is not valid; give {what} there") from None


def _listed(config, actions):
    """A YAML scalar given to a flag that takes a list (`model_path: a`) as a one-item list, as the flag would give."""
    listed = {action.dest for action in actions if action.nargs in ("+", "*")}
    return {dest: [value] if dest in listed and value is not None and not isinstance(value, list) else value
            for dest, value in config.items()}


def _check_flags(args, known):
    """Refuse unknown flags, every one of them named in one line (with what to write instead where known)."""
    unknown = []
    for arg in args:
        if arg.startswith("--"):
            name = arg[2:].split("=", 1)[0].replace("-", "_")
            if name.startswith("no_") and name[3:] in known:
                continue
            if name not in known:
                unknown.append(f"{arg.split('=', 1)[0]}{did_you_mean(name, known)}")
    if unknown:
        flags = "unknown flag" + ("s " if len(unknown) > 1 else " ")
        raise UserError(f"{flags}{', '.join(unknown)}; see --help")
