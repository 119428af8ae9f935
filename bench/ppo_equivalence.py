"""Is this checkout's PPO the same PPO as another commit's? Runs `train_ppo.py` of both on the same tiny models with
the same seed (CPU, deterministic) and compares the saved policy and value model tensor by tensor (`torch.equal`) and
every logged scalar but throughput.

    git worktree add /tmp/ppo_old <commit>
    python bench/ppo_equivalence.py /tmp/ppo_old                 # every case
    python bench/ppo_equivalence.py /tmp/ppo_old --cases lora

The other checkout runs with this interpreter: it must work with the installed packages (e.g. a commit from before
PPO was copied into the package needs trl==1.12.0).
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SMALL = ["--max_completion_length", "8", "--per_device_train_batch_size", "2", "--num_ppo_epochs", "1",
         "--save_steps", "2", "--seed", "0"]
# name: (processes, flags). Each covers a path of the loop: mini-batches with accumulation, the LoRA reference,
# reward functions (weighted, with the reward model) at top_p with adaptive KL, rollouts without signal, DDP.
CASES = {
    "full": (1, ["--total_episodes", "8", "--prompts_per_rollout", "4", "--per_device_train_batch_size", "1",
                 "--gradient_accumulation_steps", "2", "--num_ppo_epochs", "2"]),
    "lora": (1, ["--use_lora", "--total_episodes", "8", "--prompts_per_rollout", "4"]),
    "reward_funcs": (1, ["--reward_funcs", "reward_model", "boxed_format", "--reward_weights", "1", "0.5",
                         "--total_episodes", "8", "--prompts_per_rollout", "4", "--top_p", "0.9",
                         "--target_kl", "0.1"]),
    "no_signal": (1, ["--reward_funcs", "boxed_format", "--total_episodes", "8"]),
    "one_by_one": (1, ["--total_episodes", "8", "--prompts_per_rollout", "4", "--gradient_accumulation_steps", "1",
                       "--per_device_train_batch_size", "1"]),
    "two_processes": (2, ["--total_episodes", "8", "--prompts_per_rollout", "4", "--gradient_accumulation_steps", "1",
                          "--per_device_train_batch_size", "1"]),
    "lora_two_processes": (2, ["--use_lora", "--total_episodes", "8", "--per_device_train_batch_size", "1"]),
    "reward_funcs_two_processes": (2, ["--reward_funcs", "reward_model", "boxed_format", "--total_episodes", "8",
                                       "--per_device_train_batch_size", "1"]),
    "zero2": ("zero2", ["--total_episodes", "8", "--prompts_per_rollout", "4", "--per_device_train_batch_size", "1"]),
    "zero3_lora": ("zero3", ["--use_lora", "--total_episodes", "8", "--per_device_train_batch_size", "1"]),
}
NOT_COMPARED = {"train/eps"}  # episodes per second


def run(checkout, models, output_dir, processes, flags):
    if str(processes).startswith("zero"):  # DeepSpeed ZeRO-2/3 on 2 CPU processes, as docs/multi-gpu.md launches it
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                    str(Path(checkout) / f"configs/accelerate/deepspeed_{processes}.yaml"), "--mixed_precision", "no",
                    "--num_processes", "2"]
    else:
        launcher = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                        str(processes)] if processes > 1 else [])
    command = [*launcher, str(Path(checkout) / "train_ppo.py"), "--model_name_or_path", models["policy"],
               "--reward_model_name_or_path", models["reward_model"], "--dataset_name", models["prompts"],
               "--output_dir", str(output_dir), *SMALL, *flags]
    env = {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"}
    started = time.time()
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True, env={**os.environ, **env})
    if result.returncode:
        raise SystemExit(f"{checkout}: exit {result.returncode}\n{result.stderr[-3000:]}")
    return time.time() - started


def tensors(folder):
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    assert files, f"no weights in {folder}"
    return {f"{file.name}:{name}": tensor for file in files for name, tensor in load_file(file).items()}


def series(points):
    """{step: value} with NaN as a string, so that two NaN compare equal."""
    return {step: "nan" if math.isnan(value) else value for step, (_, value) in points.items()}


def compare(old_dir, new_dir):
    """(policy tensors equal, value tensors equal, scalars equal, what differs)."""
    import torch

    from rlhf.evaluation.metrics import event_files, read_scalars

    differs = []
    verdicts = []
    for sub in ("", "value_model"):
        old, new = tensors(old_dir / sub), tensors(new_dir / sub)
        same = old.keys() == new.keys() and all(torch.equal(old[key], new[key]) for key in old)
        verdicts.append(f"{len(old)} tensors {'equal' if same else 'DIFFER'}")
        if not same:
            differs += [f"{sub or 'policy'}:{key}" for key in old
                        if key not in new or not torch.equal(old[key], new[key])]
    old_scalars, new_scalars = (read_scalars(event_files(d)) for d in (old_dir, new_dir))
    tags = (old_scalars.keys() | new_scalars.keys()) - NOT_COMPARED
    unequal = sorted(tag for tag in tags if series(old_scalars.get(tag, {})) != series(new_scalars.get(tag, {})))
    verdicts.append(f"{len(tags)} logged series {'equal' if not unequal else 'DIFFER: ' + ', '.join(unequal)}")
    return verdicts, differs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", help="the other checkout (e.g. a git worktree of the commit to compare with)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = parser.parse_args()
    from rlhf import tiny

    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        models = tiny.build_all(Path(tmp) / "tiny")
        for name in args.cases:
            processes, flags = CASES[name]
            old_dir, new_dir = Path(tmp) / name / "old", Path(tmp) / name / "new"
            seconds = [run(checkout, models, folder, processes, flags)
                       for checkout, folder in ((args.other, old_dir), (ROOT, new_dir))]
            verdicts, differs = compare(old_dir, new_dir)
            failed |= bool(differs) or any("DIFFER" in v for v in verdicts)
            launch = (f"DeepSpeed ZeRO-{processes[-1]}, 2 processes" if str(processes).startswith("zero")
                      else f"{processes} process(es)")
            print(f"{name} ({launch}; {seconds[0]:.0f} s / {seconds[1]:.0f} s):"
                  f" policy {verdicts[0]}; value model {verdicts[1]}; {verdicts[2]}", flush=True)
            for key in differs[:10]:
                print(f"  differs: {key}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
