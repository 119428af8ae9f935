"""The scripts' flag tables (`rlhf/flags/`): fresh, and refusing what the scripts' own parsers refuse, the same way."""

import contextlib
import importlib
import io
import json
import subprocess
import sys

import pytest

from conftest import ROOT, grpo_args, ppo_args
from rlhf import flags
from rlhf.cli import Parser, UserError, check_quickly
from rlhf.flags.write import table


@pytest.mark.parametrize("script", flags.SCRIPTS)
def test_each_flag_table_is_fresh(script):
    written = json.loads(flags.table_path(script).read_text(encoding="utf-8"))
    here = flags.freshness(script)["versions"]
    if written["freshness"]["versions"] != here:  # requirements.txt's pins: a table for another set is never used
        pytest.skip(f"rlhf/flags/{script}.json was written with {written['freshness']['versions']}, here {here}: not "
                    "used here (python -m rlhf.flags.write writes it for these)")
    assert written == json.loads(json.dumps(table(script))), (
        f"rlhf/flags/{script}.json is stale: run python -m rlhf.flags.write")


def outcome(parse, args):
    """What parsing `args` ends in: ("help", text), ("error", line) or ("ok", None)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            parse(args)
    except SystemExit as stop:
        assert stop.code in (0, None)
        return "help", out.getvalue()
    except UserError as error:
        return "error", str(error)
    return "ok", None


def heavy(script, monkeypatch):
    """The script's own parser, as it runs after the heavy imports, with the help written as the table's is."""
    module = importlib.import_module(script)
    monkeypatch.setenv("COLUMNS", str(flags.HELP_COLUMNS))

    def parse(args):
        parser = Parser(module.configs(), module.__doc__)
        parser.parser.prog = f"{script}.py"
        return parser.parse(args)

    return parse


def vectors(script, tmp_path):
    """Commands each script refuses while reading its flags (and one it takes), built from its table."""
    actions = [spec for spec in flags.fresh_table(script)["actions"] if spec["action"] == "store"]
    choice = next((spec for spec in actions if spec["choices"]), None)
    boolean = next(spec for spec in actions if spec["type"] == "string_to_bool")
    number = next((spec for spec in actions if spec["type"] == "int"), None)
    name = boolean["dest"]

    def config(text):
        path = tmp_path / f"c{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(text)
        return ["--config", str(path)]

    found = [["--help"], [f"--{name[:-1]}", "1"], [f"--{name}", "maybe"], ["foo"], ["--device", "tpu"],
             config("not_a_key_here: 1\n"), config(f"{name[:-1]}: true\n"), config(f"{name}: [1, 2]\n"),
             config("just text\n"), ["--config", str(tmp_path / "missing.yaml")], ["--config"], ["--help", "--nope"]]
    if choice:
        found.append([choice["options"][0], "no-such-choice"])
    if number:
        found += [[number["options"][0], "abc"], config(f"{number['dest']}: abc\n"),
                  config(f"{number['dest']}: [1, 2]\n")]
    return found


@pytest.mark.parametrize("script", flags.SCRIPTS)
def test_the_flag_table_refuses_what_the_scripts_parser_refuses_in_the_same_line(script, tmp_path, monkeypatch):
    light, full = (lambda args: check_quickly(script, args)), heavy(script, monkeypatch)
    for args in vectors(script, tmp_path):
        said = outcome(light, args)
        assert said[0] != "ok", f"{args}: the table took what the script's parser refuses"
        assert said == outcome(full, args), args


# Values each script's configs refuse (their checks, `rlhf.fields.checks.CONFIG_CHECKS`) or settling its flags
# refuses (the batch arithmetic): the table refuses them too, before the heavy imports.
VALUE_REFUSALS = {
    "train_grpo": [["--temperature", "0"], ["--learning_rate", "abc"], ["--learning_rate", "-1"], ["--lora_r", "0"],
                   ["--max_samples", "-1"], ["--max_prompt_length", "0"],
                   ["--prompts_per_step", "3", "--prompts_per_generation", "4"],
                   ["--eval_prompts", "4", "--save_steps", "10", "--eval_steps", "3"],
                   ["--beta", "0", "--target_kl", "0.1"], ["--load_in_4bit"], ["--dataset_name", " "],
                   ["--num_generations", "4", "--per_device_train_batch_size", "6"], ["--seed", "-1"],
                   ["--end_on_best_checkpoint"], ["--eval_strategy", "steps"], ["--lora_target_modules", ","]],
    "train_ppo": [["--lam", "2"], ["--kl_coef", "-1"], ["--stop_token", "eos", "--stop_token_id", "3"],
                  ["--prompts_per_rollout", "6", "--per_device_train_batch_size", "4"], ["--critic_warmup", "-1"],
                  ["--missing_eos_penalty", "-1"], ["--push_to_hub"], ["--max_steps", "0"], ["--top_p", "0"]],
    "train_reward_model": [["--max_length", "0"], ["--eval_samples", "-1"], ["--save_steps", "0"],
                           ["--lora_dropout", "1"], ["--model_revision", "v2"]],
    "evaluate_generations": [["--num_prompts", "0"], ["--temperature", "-1"], ["--train_samples", "-1"],
                             ["--dataset_config", "x"]],
}
# Commands each script takes (those of the README and the docs among them): the table refuses none of them.
GOOD_COMMANDS = {
    "train_grpo": [[], ["--learning_rate", "1e-6", "--use_lora", "--seed", "3"], ["--config", "configs/grpo.yaml"],
                   ["--config", "configs/grpo_math_long.yaml"], ["--use_peft", "--lora_target_modules", "q_proj"],
                   ["--prompts_per_step", "8", "--num_generations", "4", "--per_device_train_batch_size", "8"],
                   ["--gradient_accumulation_steps", "2", "--per_device_train_batch_size", "8"],
                   ["--eval_prompts", "16", "--save_steps", "10", "--end_on_best_checkpoint"], ["--warmup_steps", "4"],
                   ["--use_dynamic_sampling", "--beta", "0.04", "--target_kl", "0.1"], ["--max_samples", "none"]],
    "train_ppo": [[], ["--batch_size", "4", "--target_kl", "none"], ["--config", "configs/ppo.yaml"],
                  ["--stop_token", "none", "--stop_token_id", "2"], ["--prompts_per_rollout", "8"],
                  ["--reward_funcs", "boxed_answer", "--eval_prompts", "4", "--save_steps", "2"]],
    "train_reward_model": [[], ["--max_steps", "2", "--bf16", "false"], ["--config", "configs/reward_model.yaml"]],
    "evaluate_generations": [[], ["--model_path", "a", "b", "--num_prompts", "4", "--temperature", "0.5"]],
    "plot_training_progress": [[]],
}


@pytest.mark.parametrize("script", VALUE_REFUSALS)
def test_the_flag_table_refuses_the_values_the_configs_refuse_in_the_same_line(script, monkeypatch):
    light, full = (lambda args: check_quickly(script, args)), heavy(script, monkeypatch)
    for args in VALUE_REFUSALS[script]:
        said = outcome(light, args)
        assert said[0] == "error", f"{args}: the table took what the script's configs refuse"
        assert said == outcome(full, args), args


@pytest.mark.parametrize("script", GOOD_COMMANDS)
def test_the_flag_table_takes_a_good_command(script, monkeypatch):
    light, full = (lambda args: check_quickly(script, args)), heavy(script, monkeypatch)
    monkeypatch.chdir(ROOT)
    for args in GOOD_COMMANDS[script]:
        assert outcome(full, args) == ("ok", None), args
        assert outcome(light, args) == ("ok", None), args


def path_refusals(models, tmp_path):
    """For each script: (a command naming the tiny models and prompts, commands with paths that do not exist or hold
    no model, or reward weights that do not fit: nothing else in them is wrong, so the preflight says what its quick
    checks find)."""
    missing, other, empty = tmp_path / "no_such_model", tmp_path / "no_such_reward_model", tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    data = ["--dataset_name", tmp_path / "no_such_prompts.jsonl"]
    cases = {}
    for script, command in (("train_grpo", grpo_args(models, tmp_path / "run")),
                          ("train_ppo", ppo_args(models, tmp_path / "run"))):
        cases[script] = (command, [[*command, *changes] for changes in (
            ["--model_name_or_path", missing], data, ["--model_name_or_path", empty, *data],
            ["--model_name_or_path", missing, "--reward_model_name_or_path", other, *data],
            ["--model_name_or_path", models["prompts"]], ["--reward_weights", "1", "2", *data],
            ["--value_model_path", missing])
            if script == "train_ppo" or "--value_model_path" not in changes])
    command = ["--dataset_name", models["prompts"]]
    cases["train_reward_model"] = (command, [[*command, "--model_name_or_path", missing],
                                             [*command, "--model_name_or_path", empty]])
    scored = ["--reward_model_name_or_path", models["reward_model"], "--dataset_name", models["prompts"]]
    cases["evaluate_generations"] = ([*scored, "--model_path", models["policy"]], [
        [*scored, "--model_path", models["policy"], missing], [*scored, "--model_path", missing, empty, *data],
        [*scored, "--model_path", models["policy"], "--judge_model_name_or_path", other], scored,
        [*scored, "--model_path", missing, "--output_file", empty]])
    return cases


def preflight_of(script, monkeypatch):
    """The script's own parser, then its preflight (`rlhf/preflight.py`), as `main` runs them."""
    from rlhf import preflight

    parse = heavy(script, monkeypatch)
    run = {"train_grpo": preflight.grpo, "train_ppo": preflight.ppo, "evaluate_generations": preflight.evaluation,
           "train_reward_model": lambda model, data, training: preflight.reward_model(model, training)}[script]
    return lambda args: run(*parse(args))


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo", "train_ppo", "train_reward_model", "evaluate_generations"])
def test_a_wrong_path_is_refused_before_the_heavy_imports_in_the_preflights_line(
        script, tiny_models, tmp_path, monkeypatch):
    module = importlib.import_module(script)
    quick = {"train_grpo": "quick_grpo", "train_ppo": "quick_ppo", "train_reward_model": "quick_reward_model",
             "evaluate_generations": "quick_evaluation"}[script]
    light = lambda args: check_quickly(script, args, getattr(module.preflight, quick))  # noqa: E731
    full = preflight_of(script, monkeypatch)
    good, refusals = path_refusals(tiny_models, tmp_path)[script]
    monkeypatch.chdir(tmp_path)  # the evaluation's report path
    assert outcome(light, list(map(str, good))) == ("ok", None)
    for args in (list(map(str, args)) for args in refusals):
        said = outcome(light, args)
        assert said[0] == "error", f"{args}: taken before the heavy imports"
        assert said == outcome(full, args), args


def test_a_stale_table_is_not_used(monkeypatch):
    monkeypatch.setattr(flags, "freshness", lambda script: {"sources": "another"})
    assert flags.fresh_table("train_grpo") is None
    check_quickly("train_grpo", ["--seed", "abc"])  # left to the script's own parser


# A script run as a user runs it, that fails if it imported torch.
WITHOUT_TORCH = ("import os, runpy, sys\nsys.argv = sys.argv[1:]\n"
                 "sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))\n"  # as `python script.py` does
                 "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
                 "finally:\n    assert 'torch' not in sys.modules, 'torch was imported'\n")


@pytest.mark.slow
@pytest.mark.parametrize("args, line", [
    (["--help"], None),
    (["--seed", "abc"], "error: argument --seed: invalid int value: 'abc'; see --help"),
    (["--temperature", "0"], "error: --temperature must be > 0 for sampling, got 0.0."),  # the config's check
])
def test_help_and_a_bad_flag_come_before_torch_loads(args, line):
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "train_grpo.py", *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == (2 if line else 0), result.stderr[-2000:]
    if line:
        assert result.stderr.splitlines() == [line]
    else:
        assert result.stdout.startswith("usage: python train_grpo.py") and not result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, line", [
    (["--smoothing", "2"], "error: --smoothing must be in [0, 1) (e.g. 0.6), got 2.0"),
    (["--log_dir", "no_such_run"],
     "error: --log_dir no_such_run does not exist; pass the output_dir of a training run"),
])
def test_the_plots_refusals_come_before_torch_loads(args, line, tmp_path):
    """The plot's configs are its own (no TRL config): its whole parsing, its config's checks and its folders' are
    refused without torch, transformers' trainer or TRL's trainers."""
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, str(ROOT / "plot_training_progress.py"), *args],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.splitlines() == [line], result.stderr[-2000:]


def test_a_checkout_with_windows_line_ends_finds_its_tables_fresh(tmp_path, monkeypatch):
    """git on Windows may check the sources out with CRLF line ends: the same sources, the same table."""
    import rlhf.flags as flags

    for source in (*flags.SOURCES, "train_grpo.py"):
        copy = tmp_path / source
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes((flags.ROOT / source).read_bytes().replace(b"\n", b"\r\n"))
    expected = flags.freshness("train_grpo")
    monkeypatch.setattr(flags, "ROOT", tmp_path)
    assert flags.freshness("train_grpo") == expected
