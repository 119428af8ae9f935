import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlhf import tiny

ROOT = Path(__file__).resolve().parent.parent
# Tests never reach the Hugging Face Hub: everything they load is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Tiny random policy + reward model sharing one tokenizer, a reward model with another tokenizer, prompts."""
    root = tmp_path_factory.mktemp("tiny")
    artifacts = tiny.build_all(root)
    other_tokenizer = tiny.build_tokenizer(vocab_size=300, seed=7)
    artifacts["other_reward_model"] = tiny.build_reward_model(root / "other_reward_model", other_tokenizer)
    return artifacts


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


def run_script(script, *args, timeout=600, cwd=ROOT, processes=1, env=None):
    """Run one of the package's scripts as a user would (from the repository root unless `cwd` is given)."""
    command, env = script_command(script, *args, processes=processes, env=env)
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
