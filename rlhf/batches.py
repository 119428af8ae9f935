"""The batch arithmetic of GRPO and PPO, as pure functions of the flags, the process count and the device.

This package counts prompts (`--prompts_per_step`, `--prompts_per_generation`, `--prompts_per_rollout`); TRL's GRPO
counts completions per device (`per_device_train_batch_size`, `gradient_accumulation_steps`, `generation_batch_size`).
The parser (`rlhf.cli`) translates one into the other with `grpo_flags` and `ppo_flags`, after
`rlhf.engines.resolve_machine` has sized the GPU's defaults with these, before the configs are built: TRL's
GRPOConfig derives its generation batch from the translated flags as it is built. Each raises ValueError naming the
flag to change.
"""

import math
from dataclasses import dataclass

# GRPO's advantage compares the completions of one prompt: one alone has nothing to be compared with.
GROUP_WHY = "GRPO compares the completions of each prompt with each other; give 2 or more (e.g. 4)"

# Prompts generated at once on a GPU (GRPO's prompts_per_generation, PPO's prompts_per_rollout): one H100 went
# from 13.2 to 0.9 s per optimizer step from 4 to 64 prompts per generation (docs/performance.md).
GPU_PROMPTS_PER_GENERATION = 64
# Prompts per generate call and no-grad forward pass of a PPO rollout on a CPU (measured: docs/performance.md).
CPU_ROLLOUT_CHUNK = 16


def generation_prompts(step_prompts, on_gpu):
    """The prompts generated together by default: one optimizer step's on a CPU; on a GPU, where decoding is
    launch-bound, the smallest multiple of them that reaches GPU_PROMPTS_PER_GENERATION (a multiple, so that each
    step takes a whole share)."""
    if not on_gpu or not step_prompts:
        return step_prompts
    return step_prompts * math.ceil(GPU_PROMPTS_PER_GENERATION / step_prompts)


def grpo_step_prompts(prompts_per_step, batch_size, gradient_accumulation_steps, generation_batch_size,
                      steps_per_generation, processes):
    """GRPO's prompts per optimizer step: as given; from a hand-written GRPO's `--batch_size` (prompts per pass and
    device); 0 where TRL's own batch flags (gradient_accumulation_steps, generation_batch_size,
    steps_per_generation) are given instead, to be used as they are; else 4."""
    if batch_size is not None:
        return batch_size * (gradient_accumulation_steps or 1) * processes
    if prompts_per_step is None:
        trl_batch = (gradient_accumulation_steps, generation_batch_size, steps_per_generation)
        return 0 if trl_batch != (None, None, None) else 4
    return prompts_per_step


def grpo_batch(prompts_per_step, num_generations, per_device, processes, gradient_accumulation_steps,
               prompts_per_generation):
    """TRL's batch for `prompts_per_step` prompts x `num_generations` completions per optimizer step, generated
    `prompts_per_generation` prompts at a time: {per_device_train_batch_size, gradient_accumulation_steps,
    generation_batch_size}, all counted in completions. `per_device` shrinks to one step's share per process where
    a pass would hold more than a step."""
    completions = prompts_per_step * num_generations
    if per_device * processes > completions and completions % processes == 0:
        per_device = completions // processes  # e.g. the default 16 on 2 GPUs: each device takes its share
    per_pass = per_device * processes
    if completions % per_pass:
        raise ValueError(
            f"prompts_per_step x num_generations = {completions} completions per optimizer step is not a multiple "
            f"of per_device_train_batch_size x processes = {per_pass}; lower --per_device_train_batch_size so that "
            "it divides evenly."
        )
    accumulation = completions // per_pass
    if gradient_accumulation_steps not in (None, 1, accumulation):
        raise ValueError(
            f"--gradient_accumulation_steps {gradient_accumulation_steps} conflicts with --prompts_per_step "
            f"{prompts_per_step} (which needs {accumulation}); pass --prompts_per_step 0 to set TRL's batch flags "
            "yourself."
        )
    if prompts_per_generation % prompts_per_step:
        raise ValueError(
            f"--prompts_per_generation {prompts_per_generation} is not a multiple of --prompts_per_step "
            f"{prompts_per_step}; each optimizer step takes prompts_per_step of the prompts generated."
        )
    return {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
            "generation_batch_size": prompts_per_generation * num_generations}


def grpo_flags(flags, processes):
    """GRPO's batch flags in TRL's terms, from `flags` (the parsed values, as attributes) and the launch's
    `processes`: a hand-written GRPO's `--batch_size` as `--prompts_per_step`, then `--prompts_per_step` as TRL's
    completion-counted batch (`grpo_batch`); TRL's own batch flags used as they are where given without it.

    Returns (changes, notes): changes [(field, value, why)] in the order they apply, each said `note: --field old ->
    new (why)` where the user gave the field (why None: set unsaid), and note lines said whatever the user gave."""
    at_least(flags, 1, "batch_size", "per_device_train_batch_size", "gradient_accumulation_steps",
             "prompts_per_generation")
    at_least(flags, 2, "num_generations", why=GROUP_WHY)
    at_least(flags, 0, "prompts_per_step")
    step, per_device, group = flags.prompts_per_step, flags.per_device_train_batch_size, flags.num_generations
    accumulation = flags.gradient_accumulation_steps
    changes, notes = [], []
    if flags.batch_size is not None:  # prompts per pass and device, each with its num_generations completions
        if step is not None:
            raise ValueError(f"--batch_size {flags.batch_size} and --prompts_per_step {step} both set the prompts of "
                             "a step; give one (--prompts_per_step counts prompts per optimizer step)")
        step = grpo_step_prompts(None, flags.batch_size, accumulation, None, None, processes)
        per_device = flags.batch_size * group
        passes = f", {accumulation} passes" if (accumulation or 1) > 1 else ""
        devices = f" on each of {processes} processes" if processes > 1 else ""
        notes.append(f"note: --batch_size {flags.batch_size} -> --prompts_per_step {step} "
                     f"--per_device_train_batch_size {per_device} ({flags.batch_size} prompts x {group} completions "
                     f"per pass{devices}{passes} per optimizer step; this package counts prompts per optimizer step)")
        changes += [("batch_size", None, None), ("prompts_per_step", step, None),  # recorded as what it became
                    ("per_device_train_batch_size", per_device, None)]
    elif step is None:  # 4, or 0 where TRL's batch flags are given (a `trl grpo` YAML): used as they are
        step = grpo_step_prompts(None, None, accumulation, flags.generation_batch_size, flags.steps_per_generation,
                                 processes)
        changes.append(("prompts_per_step", step, None))
        if accumulation:  # said always: a flag that elsewhere multiplies prompts multiplies completions here
            completions = per_device * accumulation * processes
            notes.append(f"note: --gradient_accumulation_steps {accumulation} sets TRL's batch, counted in "
                         f"completions: --per_device_train_batch_size {per_device} x {accumulation} = {completions} "
                         f"completions per optimizer step, {completions / group:g} prompts x {group} completions "
                         "(--prompts_per_step N counts prompts instead)")
    # Prompts and TRL's completion counts cannot both set one generation: the one given last would be dropped.
    if not step and flags.prompts_per_generation is not None:
        raise ValueError(f"--prompts_per_generation {flags.prompts_per_generation} counts prompts of "
                         "--prompts_per_step, but TRL's batch flags (--gradient_accumulation_steps, "
                         "--generation_batch_size, --steps_per_generation, or --prompts_per_step 0) set this run's "
                         "batch as they are: give "
                         "--prompts_per_step N with it, or TRL's --generation_batch_size (in completions) without it")
    if step and flags.steps_per_generation is not None:
        given = f"--batch_size {flags.batch_size}" if flags.batch_size is not None else f"--prompts_per_step {step}"
        raise ValueError(f"--steps_per_generation {flags.steps_per_generation} is TRL's, and this package's "
                         f"{given} sets the batch here: give --prompts_per_generation (prompts "
                         "generated at once, a multiple of --prompts_per_step) instead, or --prompts_per_step 0 to "
                         "use TRL's batch flags as they are")
    if step:
        generation = flags.prompts_per_generation or step  # a GPU's default is set before (resolve_machine)
        batch = grpo_batch(step, group, per_device, processes, accumulation, generation)
        changes += [
            ("prompts_per_generation", generation, None),
            ("per_device_train_batch_size", batch["per_device_train_batch_size"],
             "one optimizer step's share per process"),
            ("gradient_accumulation_steps", batch["gradient_accumulation_steps"], "derived from --prompts_per_step"),
            # TRL derives steps_per_generation (forward/backward passes per generation) from this.
            ("generation_batch_size", batch["generation_batch_size"],
             "derived from --prompts_per_generation x --num_generations; pass --prompts_per_step 0 to set it"),
        ]
    return changes, notes


def ppo_flags(flags, processes):
    """PPO's rollout from `flags` (the parsed values, as attributes) and the launch's process count:
    `--prompts_per_rollout` and TRL's `--num_mini_batches` (`ppo_rollout`), as `grpo_flags` returns them."""
    at_least(flags, 1, "per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches",
             "prompts_per_rollout")
    update = ppo_update_prompts(flags.per_device_train_batch_size, flags.gradient_accumulation_steps, processes)
    rollout, mini_batches = ppo_rollout(flags.prompts_per_rollout, flags.num_mini_batches, update)
    changes = [("prompts_per_rollout", rollout, None),
               ("num_mini_batches", mini_batches, "derived from --prompts_per_rollout")]
    episodes = ppo_episodes(flags.total_episodes, flags.max_steps, rollout)  # None: --num_train_epochs decides
    if episodes is not None:
        rollouts = episodes // rollout
        changes.append(("total_episodes", episodes, f"whole rollouts: {rollouts} rollout{'s' * (rollouts != 1)} of "
                        f"--prompts_per_rollout {rollout}"))
    return changes, []


def at_least(flags, minimum, *names, why=""):
    """Refuse (one line naming the flag, and `why` where given) any of `names` that `flags` has, is set, and is below
    `minimum`: the batch arithmetic here checks before it computes, the configs (config.py) as they are built."""
    for name in names:
        value = getattr(flags, name, None)
        if value is not None and value < minimum:
            raise ValueError(f"--{name} must be >= {minimum}, got {value}{': ' + why if why else '.'}")


def ppo_update_prompts(per_device, gradient_accumulation_steps, processes):
    """PPO's prompts per optimizer step (one mini-batch), over all processes."""
    return per_device * gradient_accumulation_steps * processes


def ppo_rollout(prompts_per_rollout, num_mini_batches, update_prompts):
    """(prompts per rollout, mini-batches per rollout): from `--prompts_per_rollout`, else from TRL's
    `--num_mini_batches`, else one mini-batch."""
    if prompts_per_rollout is None:
        prompts_per_rollout = update_prompts * (num_mini_batches or 1)
    if prompts_per_rollout % update_prompts:
        raise ValueError(
            f"--prompts_per_rollout {prompts_per_rollout} is not a multiple of the {update_prompts} prompts of one "
            "optimizer step (per_device_train_batch_size x gradient_accumulation_steps x processes)."
        )
    if num_mini_batches not in (None, 1, prompts_per_rollout // update_prompts):
        raise ValueError(f"--num_mini_batches {num_mini_batches} conflicts with --prompts_per_rollout "
                         f"{prompts_per_rollout}, which sets it to {prompts_per_rollout // update_prompts}.")
    return prompts_per_rollout, prompts_per_rollout // update_prompts


def ppo_episodes(total_episodes, max_steps, prompts_per_rollout):
    """PPO's length in episodes (prompts trained on), a whole number of rollouts: `max_steps` rollouts where it is
    > 0 (PPO's steps are rollouts, as its logs and checkpoints count them), else `total_episodes` rounded up to whole
    rollouts; None where neither is given (`--num_train_epochs` decides, once the prompts are counted)."""
    if max_steps > 0:
        episodes = max_steps * prompts_per_rollout
        if total_episodes not in (None, episodes):
            raise ValueError(
                f"--max_steps {max_steps} ({max_steps} rollouts of {prompts_per_rollout} prompts = {episodes} "
                f"episodes) and --total_episodes {total_episodes} both set how long PPO trains; give one."
            )
        return episodes
    if total_episodes is None:
        return None
    return math.ceil(total_episodes / prompts_per_rollout) * prompts_per_rollout


@dataclass(frozen=True)
class PPOSizes:
    """A PPO run's sizes, under the names TRL's PPOTrainer gave them (it wrote them onto its config): a rollout is
    `batch_size` prompts over all processes, `local_batch_size` in each, cut into mini-batches of
    `local_mini_batch_size` prompts per process, one optimizer step each."""

    world_size: int  # processes
    local_mini_batch_size: int  # prompts per optimizer step, per process
    local_batch_size: int  # prompts per rollout, per process
    batch_size: int  # prompts per rollout, over all processes
    total_episodes: int  # prompts the run trains on
    num_total_batches: int  # rollouts: the last one whole, so the run may train beyond total_episodes


def ppo_sizes(args, processes, num_prompts):
    """The sizes (`PPOSizes`) of a PPO run of `args` (a `config.PPOTrainingConfig`, or any object with its batch and
    length fields) on `processes` processes over `num_prompts` prompts. Its length: `max_steps` rollouts where > 0
    (PPO's steps are rollouts), else `total_episodes`, else `num_train_epochs` passes over the prompts."""
    local_mini_batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps
    local_batch_size = local_mini_batch_size * args.num_mini_batches
    batch_size = local_batch_size * processes
    if args.max_steps > 0:
        total_episodes = args.max_steps * batch_size
    elif args.total_episodes is None:
        total_episodes = int(args.num_train_epochs * num_prompts)
    else:
        total_episodes = args.total_episodes
    return PPOSizes(processes, local_mini_batch_size, local_batch_size, batch_size, total_episodes,
                    math.ceil(total_episodes / batch_size))


def ppo_rollouts(total_episodes, num_train_epochs, num_prompts, prompts_per_rollout):
    """The rollouts a PPO run trains, as its trainer counts them: `total_episodes` (else `num_train_epochs` passes
    over `num_prompts` prompts) in rollouts of `prompts_per_rollout`, the last one whole."""
    if total_episodes is None:
        total_episodes = int(num_train_epochs * num_prompts)
    return math.ceil(total_episodes / prompts_per_rollout)


def rollout_chunk(prompts, budget_bytes, vocabulary, prompt_tokens, completion_tokens, logit_bytes=4):
    """Prompts per generate call and no-grad forward pass of a PPO rollout of `prompts` (per process): all of them in
    one call where `budget_bytes` holds it, else the largest divisor of `prompts` that fits (at least 1). Without a
    budget (a CPU), CPU_ROLLOUT_CHUNK.

    What a rollout holds over the vocabulary, at `logit_bytes` per logit (float32): the generation's logits of every
    completion (prompts x completion tokens, whatever the chunk), twice for a moment while they are padded into one
    tensor, and a chunk's reference logits (chunk x (prompt + completion tokens)).
    """
    if budget_bytes is None:
        return min(prompts, CPU_ROLLOUT_CHUNK)
    generated = 2 * prompts * completion_tokens * vocabulary * logit_bytes
    per_sequence = (prompt_tokens + completion_tokens) * vocabulary * logit_bytes
    fits = max(1, int((budget_bytes - generated) // per_sequence))
    return max(chunk for chunk in range(1, prompts + 1) if prompts % chunk == 0 and chunk <= fits)
