"""Spellings users bring from other scripts (the seeds' hand-written GRPO, a math GRPO's YAML, an older TRL PPO):
translated into this package's flags where they mean something here (said in one `note:` line each), and the hint
an unknown flag or key gets. Where a spelling means the same thing as a flag, it is an alias of that flag instead
(the `aliases` of a config field, e.g. --num_return_sequences for --num_generations).
"""

import difflib
import os

from rlhf.errors import UserError

# Spellings from other scripts and libraries (the seeds' hand-written GRPO, a math GRPO's YAML, older TRL PPO) that
# mean something here with another flag or a different unit: what to write instead. Consulted before any close
# match, which can point the wrong way (num_return_sequences is not num_train_epochs). Where a spelling means the
# same thing, it is an alias of the flag itself (e.g. --num_return_sequences for --num_generations).
KNOWN_SPELLINGS = {
    "batch_size": "--per_device_train_batch_size, per device and pass",
    "mini_batch_size": "GRPO: --per_device_train_batch_size counts completions per pass, --prompts_per_step prompts "
                       "per optimizer step",
    "use_wandb": "--report_to wandb",
    "wandb_project": "the environment variable WANDB_PROJECT (in a --config YAML: env: {WANDB_PROJECT: name})",
    "wandb_run_name": "--run_name",
    "device": "--use_cpu to train on the CPU; a GPU is used when there is one",
    "model": "model_name_or_path: PATH (or a section model: {path: PATH})",
    # TRL 1.12's PPOConfig fields this package's PPO does not have
    "num_sample_generations": "TRL's sample table is not in this PPO; --eval_prompts N evaluates N held-out prompts "
                              "at each checkpoint, with a win rate or accuracy and its interval",
    "dataset_num_proc": "not used: the prompts are tokenized once, in one process",
    "model_adapter_name": "not in this PPO: with --use_peft the policy has one adapter, and the reference is the "
                          "policy with it disabled",
    "ref_adapter_name": "not in this PPO: with --use_peft the reference is the policy with its adapter disabled",
    "use_dynamic_sampling": "GRPO's (train_grpo.py); PPO has no groups: a rollout whose completions all scored the "
                            "same is trained on with advantages of 0 (--skip_rollouts_without_signal)",
}


# Flags of the seeds (the hand-written GRPO, the older TRL PPO) that this package spells otherwise, run as written, as
# flags or YAML keys: each becomes the flags (or the environment variable) that mean it here, said in one `note:` line.
# {name: (takes a value, the flag it needs the script to have, translate)}, where translate(value) gives the flags that
# replace it and what it became, in words.
def _device(value):
    if value not in ("cpu", "cuda"):
        raise UserError(f"--device {value}: give cpu (the same as --use_cpu) or cuda (the GPU, used where there is "
                        "one)")
    if value == "cpu":
        return ["--use_cpu"], "--use_cpu"
    return [], "nothing to set: the GPU is used where there is one"


def _wandb_project(value):
    os.environ["WANDB_PROJECT"] = value
    return [], f"WANDB_PROJECT={value}"


def _flags(*flags):
    return list(flags), " ".join(flags)


def _count(value, flag):
    try:
        count = int(value)
    except ValueError:
        raise UserError(f"--{flag} {value}: give a whole number") from None
    if count < 1:
        raise UserError(f"--{flag} must be >= 1, got {count}")
    return count


def _ppo_batch_size(value):
    # The older TRL PPO's batch: completions per rollout on each process, one per prompt.
    from rlhf.processes import launched_processes

    count, processes = _count(value, "batch_size"), launched_processes()
    flags, meaning = _flags("--prompts_per_rollout", str(count * processes))
    return flags, meaning + (f" ({count} on each of {processes} processes)" if processes > 1 else "")


def _ppo_mini_batch_size(value):
    # The older TRL PPO's mini-batch: completions per forward/backward pass on each process.
    return _flags("--per_device_train_batch_size", str(_count(value, "mini_batch_size")))


TRANSLATED_FLAGS = {
    "device": (True, "use_cpu", _device),
    "use_wandb": (False, "report_to", lambda value: _flags("--report_to", "wandb") if value != "false"
                  else ([], "nothing to set: no W&B logging")),
    "wandb_project": (True, "report_to", _wandb_project),
    "wandb_run_name": (True, "run_name", lambda value: _flags("--run_name", value)),
    # the older TRL PPO's (GRPO's --batch_size is a flag of its own: its translation needs --num_generations)
    "batch_size": (True, "prompts_per_rollout", _ppo_batch_size),
    "mini_batch_size": (True, "prompts_per_rollout", _ppo_mini_batch_size),
}


def translate_flags(args, known):
    """`args` with the seeds' flags of `TRANSLATED_FLAGS` replaced by this package's, and a note line for each (a
    script without the flags they mean keeps them, to be refused as unknown with a hint)."""
    out, notes, i = [], [], 0
    while i < len(args):
        arg = args[i]
        name, has_value, value = arg[2:].partition("=")[0].replace("-", "_"), "=" in arg, arg.partition("=")[2]
        if not arg.startswith("--") or name not in TRANSLATED_FLAGS or TRANSLATED_FLAGS[name][1] not in known:
            out.append(arg)
            i += 1
            continue
        takes_value, _, translate = TRANSLATED_FLAGS[name]
        if not has_value and (takes_value or (i + 1 < len(args) and args[i + 1] in ("true", "false"))):
            if i + 1 >= len(args):
                raise UserError(f"{arg} needs a value; see --help")
            value, i = args[i + 1], i + 1
        replaced, meaning = translate(value)
        notes.append(f"note: {arg.partition('=')[0]} {value}".rstrip() + f" -> {meaning} (this package's spelling)")
        out += replaced
        i += 1
    return out, notes


def did_you_mean(name, known):
    """What to write instead of an unknown `name`: its meaning here if it is a known spelling, else a close match
    (only a close one: a far match points the wrong way)."""
    if name in KNOWN_SPELLINGS:
        return f" (here: {KNOWN_SPELLINGS[name]})"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    return f" (did you mean '{close[0]}'?)" if close else ""
