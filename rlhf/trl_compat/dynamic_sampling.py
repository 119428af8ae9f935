"""DAPO's dynamic sampling (arXiv 2503.14476, section 3.2) in TRL's GRPOTrainer: `--use_dynamic_sampling`.

A group whose completions all got one reward has advantage 0 and teaches nothing. With the flag, each generation keeps
the groups whose rewards differ and draws and generates more prompts until it holds as many as it would train on
(`generation_batch_size / num_generations`, over all processes), up to `--dynamic_sampling_max_gen_batches`
generation batches; short of that, the groups of one reward found first fill the rest (the batch TRL would have
trained on, or better), said once and counted in `dynamic_sampling/cap_reached`. "One reward" is the task's, within
`--dynamic_sampling_tolerance`: such a group trains with the advantages TRL gives it, 0 where its rewards are equal,
but TRL normalises a spread under the tolerance, and `--missing_eos_penalty`'s, by the group's std.

Where it hooks into TRL 1.16.0 (trl/trainer/grpo_trainer.py): `_prepare_inputs` (1522) calls
`_generate_and_score_completions` (2324) once per generation and splits what it returns into the steps' slices;
that function gathers every process's rewards in `_calculate_rewards` (1579, `gather` at 1680), computes the
advantages per group (2749-2797) and returns this process's rows (2803-2808): prompt and completion ids and masks,
advantages, log-probabilities, `num_items_in_batch` (2897-2935). Here each round is one call to it, unchanged; the
decision is taken on the gathered rewards, so every process keeps the same groups; each process then takes its slice
of the kept groups' rows, those another process generated sent by it to this process alone (CPU tensors, one
`scatter_object_list` per process that sends). Advantages are TRL's, computed in the round the group was generated in
(the group's own mean and std; with `--scale_rewards batch`, that round's std).

TRL logs `completions/*` (in `_generate`, 2295-2310), `rewards/<f>/mean|std`, `reward`, `reward_std` and
`frac_reward_zero_std` (2820-2830) once per call, over every process's completions: here they are replaced by one
value per generation, the same statistics of the groups trained on (`completion_metrics`, from every process's
rewards and lengths, so every process logs the same), and what every round drew, discarded groups included, is
logged as `dynamic_sampling/drawn_reward`, `drawn_mean_length` and `drawn_clipped_ratio` (`DRAWN`). Left per round:
`num_tokens` (every token generated), vLLM's `sampling/*` and the completions table (`--log_completions`).

Every round's prompts, the first included, come from the data order: the order TRL's sampler gives an
uninterrupted run (`data_order`: pass k over the prompts is the k-th permutation of a generator seeded with `--seed`,
cut to whole generation batches), each round taking the next generation batch of it, as verl takes the next batch of
its dataloader. A run whose generations all differ takes TRL's batches, one per generation; an extra round takes the
batch TRL would have given the next generation, so no prompt is generated for twice within a pass, and a pass ends
sooner. The count taken (`prompts_taken`) is the same on every process and is saved in each checkpoint
(`PROMPTS_TAKEN_FILE`), so a resumed run takes what an uninterrupted run takes. The batches TRL's dataloader reads are
left unused. With `--num_train_epochs` (no `--max_steps`), the run ends after the generation that completes that many
passes (`_maybe_log_save_evaluate`), said once: TRL planned the steps, and the learning-rate schedule, for passes
without extra rounds.
"""

import functools
import json
from pathlib import Path

PROGRESS_ROUNDS = 10  # a line every this many generation batches drawn for one generation (each costs a generation)

# The name TRL logs --missing_eos_penalty's reward function under (`rlhf.rewards.functions.MISSING_EOS_PENALTY`, which
# tests/test_trl_compat.py checks is this): written here, as compat imports nothing from the package above it.
MISSING_EOS_PENALTY = "missing_eos_penalty"

# How TRL 1.16 pads each tensor of a scored batch (grpo_trainer.py 2437-2485): the side and the value (None: the pad
# token). Rows of several rounds are padded to the widest round's width the same way. Prompts are left-padded, and
# TRL's forward passes give no position ids (`_get_per_token_logps_and_entropies`, 1419-1505): the model counts
# positions from the first column, pads included, so a row whose prompt gets extra pads moves to later positions.
# Rotary embeddings see only differences of positions; a model that adds an embedding of each absolute position
# (GPT-2) computes other log-probabilities there. Such rows' old and reference log-probabilities are taken again at
# the merged layout (`DynamicSampling._logps_again`), so that the training forward sees what they saw.
PADDING = {"prompt_ids": ("left", None), "prompt_mask": ("left", 0), "completion_ids": ("right", None),
           "completion_mask": ("right", 0), "tool_mask": ("right", 1), "old_per_token_logps": ("right", 0.0),
           "ref_per_token_logps": ("right", 0.0), "sampling_per_token_logps": ("right", 0.0),
           "importance_sampling_ratio": ("right", 0.0)}
ONE_PER_ROW = ("advantages",)


def task_columns(names):
    """The reward functions (by position) dynamic sampling judges a group by: the task's. `--missing_eos_penalty` (a
    reward function GRPO adds after `--reward_funcs`) is shaping, not the outcome, and is left out: DAPO keeps groups
    whose accuracy differs, and verl judges on the task's reward, not a shaped total (verl#7792). A group that differs
    only in being cut off still trains where the cap fills the batch: the penalty's spread gives it an advantage."""
    return [index for index, name in enumerate(names) if name != MISSING_EOS_PENALTY]


def groups_with_spread(rewards_per_func, weights, num_generations, tolerance, per_function=False):
    """One bool per group of `num_generations` consecutive completions: whether their rewards differ.

    `rewards_per_func`: (completions, functions), NaN where a function gave none; `weights`: (functions,); dynamic
    sampling passes the task's functions (`task_columns`). Judged on the weighted total, as the advantage is built
    from it (TRL's `sum_then_normalize`), or with `per_function` (TRL's `normalize_then_sum`, which normalises each
    function within the group) on each weighted function alone.
    Rewards differ when the group's highest and lowest are further apart than `tolerance` x max(1, |reward|): a float
    std compared to 0 counts rounding noise as a difference. Unscored completions (NaN) are left out; a group with
    fewer than two scored ones has no spread.
    """
    import torch

    weighted = rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)
    if per_function:
        columns = weighted
    else:
        columns = weighted.nansum(dim=1, keepdim=True)
        columns[torch.isnan(weighted).all(dim=1)] = torch.nan  # unscored by every function (TRL: NaN too)
    grouped = columns.view(-1, num_generations, columns.shape[1])
    unscored = torch.isnan(grouped)
    high = grouped.masked_fill(unscored, -torch.inf).amax(dim=1)
    low = grouped.masked_fill(unscored, torch.inf).amin(dim=1)
    scale = grouped.abs().masked_fill(unscored, 0).amax(dim=1).clamp(min=1)
    return ((high - low) > tolerance * scale).any(dim=1)


def choose_groups(spreads, target):
    """The `target` groups a generation trains on, as (round, group): those whose rewards differ, by round and
    position; where fewer differ, the first groups of one reward fill the rest. `spreads`: per round, per group,
    whether its rewards differ."""
    differ = [(r, g) for r, spread in enumerate(spreads) for g, kept in enumerate(spread) if kept]
    same = [(r, g) for r, spread in enumerate(spreads) for g, kept in enumerate(spread) if not kept]
    chosen = differ[:target]
    return chosen + same[:target - len(chosen)]


# The file of a checkpoint that holds how many prompts of the data order the run had taken (the same on every process).
PROMPTS_TAKEN_FILE = "dynamic_sampling.json"


def data_order(seed, taken, dataset_size, batch, count, shuffle=True):
    """The indices of the `count` training prompts that follow the `taken` taken before, in the order TRL 1.16's
    `RepeatSampler` (trl/trainer/utils.py:859) gives an uninterrupted run of `batch` prompts per generation: pass k
    over the `dataset_size` prompts is the k-th permutation drawn from a generator seeded with `seed` (the indices in
    order where the data is not shuffled), cut to whole batches (TRL drops the rest of each pass). The same on every
    process and on resume; no prompt twice within a pass."""
    size = pass_size(dataset_size, batch)
    picks = []
    for position in range(taken, taken + count):
        pass_, place = divmod(position, size)
        picks.append(_pass_order(seed, pass_, dataset_size, shuffle)[place])
    return picks


def pass_size(dataset_size, batch):
    """Prompts in one pass of the data order: whole batches of `batch` (TRL's RepeatSampler drops the rest)."""
    return dataset_size // batch * batch


def seek_pass(generator, seed, pass_, num_samples):
    """`generator` put where TRL's RepeatSampler, seeded with `seed`, draws the permutation of pass `pass_` over
    `num_samples` prompts: seeded again, the passes before drawn. The one rule for both the sampler
    (`rlhf.trl_compat.grpo.EpochRepeatSampler.set_epoch`) and dynamic sampling's data order (`data_order`)."""
    import torch

    generator.manual_seed(seed)
    for _ in range(pass_):
        torch.randperm(num_samples, generator=generator)
    return generator


@functools.lru_cache(maxsize=2)
def _pass_order(seed, pass_, dataset_size, shuffle):
    """Pass `pass_` of the data order (`data_order`), drawn as TRL's sampler draws it (`seek_pass`)."""
    if not shuffle:
        return tuple(range(dataset_size))
    import torch

    generator = seek_pass(torch.Generator(), seed, pass_, dataset_size)
    return tuple(torch.randperm(dataset_size, generator=generator).tolist())


def take_rows(pieces, index, pad_token_id, device, widths=None):
    """TRL's scored batch of the rows `index` [(piece, row)] of `pieces` {piece: a scored batch}, each tensor padded
    as TRL pads it (`PADDING`) to the widest piece's width, or to `widths` {key: width} where that is wider.
    `num_items_in_batch` is left to the caller."""
    import torch
    import torch.nn.functional as F

    names = list(pieces)
    offsets, start = {}, 0
    for name in names:
        offsets[name] = start
        start += len(pieces[name]["advantages"])
    rows = torch.tensor([offsets[name] + row for name, row in index], device=device)
    batch = {}
    for key, first in pieces[names[0]].items():
        values = [pieces[name][key] for name in names]
        if key == "num_items_in_batch":
            continue
        if first is None:
            batch[key] = None
            continue
        if key in PADDING:
            side, value = PADDING[key]
            value = pad_token_id if value is None else value
            width = max(max(v.shape[1] for v in values), (widths or {}).get(key, 0))
            values = [F.pad(v, (width - v.shape[1], 0) if side == "left" else (0, width - v.shape[1]), value=value)
                      for v in values]
        elif key not in ONE_PER_ROW:  # images, tool calls: not in this package's text-only GRPO
            raise NotImplementedError(f"dynamic sampling cannot regroup {key!r} of TRL's scored batch")
        batch[key] = torch.cat([v.to(device) for v in values])[rows]
    return batch


def completion_metrics(rewards_per_func, weights, names, lengths, truncated):
    """What TRL 1.16 logs of one generation's completions, computed on these: `completions/*` as `_generate` logs
    them (grpo_trainer.py 2295-2310) from each completion's length and whether it was cut off (no EOS), `rewards/<f>/
    mean|std`, `reward` and `reward_std` as `_generate_and_score_completions` does (2820-2829) from the rewards
    (completions, functions), NaN where a function gave none. Every argument holds every process's completions."""
    import torch
    from trl.trainer.utils import nanstd  # TRL 1.16.0

    lengths, truncated = lengths.float(), truncated.bool()
    ended = lengths[~truncated]
    if len(ended) == 0:  # none ended: TRL logs 0
        ended = torch.zeros(1, device=lengths.device)
    metrics = {"completions/mean_length": lengths.mean().item(), "completions/min_length": lengths.min().item(),
               "completions/max_length": lengths.max().item(),
               "completions/clipped_ratio": truncated.float().mean().item(),
               "completions/mean_terminated_length": ended.mean().item(),
               "completions/min_terminated_length": ended.min().item(),
               "completions/max_terminated_length": ended.max().item()}
    for i, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, i]).item()
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # unscored by every function: left out
    metrics["reward"] = torch.nanmean(rewards).item()
    metrics["reward_std"] = nanstd(rewards).item()
    return metrics


def completion_lengths(completion_ids, tool_mask):
    """Each completion's length as TRL 1.16 counts it for its metrics (grpo_trainer.py 2274-2281): its model tokens
    where a tool mask is given, else all its tokens."""
    return [sum(mask) for mask in tool_mask] if tool_mask is not None else [len(ids) for ids in completion_ids]


# Of every completion drawn for a generation (every round's), what dynamic sampling logs beside TRL's names (which
# describe the groups trained on): dynamic_sampling/<name> <- completion_metrics' <key>.
DRAWN = {"drawn_reward": "reward", "drawn_mean_length": "completions/mean_length",
         "drawn_clipped_ratio": "completions/clipped_ratio"}


class DynamicSampling:
    """A mixin for TRL's GRPOTrainer (before it among the bases): `--use_dynamic_sampling`, off by default (then
    TRL's methods run as they are)."""

    _cap_said = False  # the cap's line is said once per launch
    prompts_taken = None  # prompts of the data order taken so far (`data_order`), saved in each checkpoint
    _last_pass_ends = None  # with --num_train_epochs: the pass (TRL's `_step`) after which the run ends

    def _save_checkpoint(self, model, trial):
        """The count of prompts taken, written before transformers saves (its trainer_state.json, written last,
        marks the checkpoint complete); every process holds the same count, the main process writes it."""
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        if self.prompts_taken is not None and self.accelerator.is_main_process:
            checkpoint = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            checkpoint.mkdir(parents=True, exist_ok=True)
            (checkpoint / PROMPTS_TAKEN_FILE).write_text(json.dumps({"prompts_taken": self.prompts_taken}))
        super()._save_checkpoint(model, trial)

    def train(self, resume_from_checkpoint=None, **kwargs):
        if resume_from_checkpoint and not isinstance(resume_from_checkpoint, bool):  # the scripts pass the path
            saved = Path(resume_from_checkpoint) / PROMPTS_TAKEN_FILE
            if saved.exists():  # not in a checkpoint of a run without the flag, or of an earlier version
                self.prompts_taken = json.loads(saved.read_text()).get("prompts_taken")
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards  # every process's, group after group (TRL gathers them for the advantages)
        return rewards

    def _generate(self, prompts):
        result = super()._generate(prompts)
        if getattr(self.args, "use_dynamic_sampling", False) and self.model.training:
            import torch

            # What TRL 1.16 logs its completions/* from (grpo_trainer.py 2274-2304): each completion's length (its
            # model tokens where a tool mask is given) and whether it was cut off, every process's, in TRL's order
            # (all processes call this alike). `_generate` returns (prompt_ids, completion_ids, tool_mask, ...).
            completion_ids, tool_mask = result[1], result[2]
            lengths = completion_lengths(completion_ids, tool_mask)
            ends = [*self.eos_token_ids, self._tokenizer.pad_token_id]
            truncated = [ids[-1] not in ends for ids in completion_ids]
            self._gathered_lengths = self.accelerator.gather(
                torch.tensor([lengths, truncated], device=self.accelerator.device).T)  # (completions, 2)
        return result

    def _generate_and_score_completions(self, inputs):
        if not (getattr(self.args, "use_dynamic_sampling", False) and self.model.training):
            return super()._generate_and_score_completions(inputs)
        metrics = self._metrics["train"]
        logged = {key: len(values) for key, values in metrics.items()}  # what was logged before this generation
        size = self.num_generations
        target = self.args.generation_batch_size // size  # groups per generation, over all processes
        generate_every = self.args.steps_per_generation * self.num_iterations  # TRL's passes per generation
        if self.prompts_taken is None:  # a new run, or one resumed from a checkpoint without the flag
            self.prompts_taken = self._step // generate_every * target  # the generations TRL made before
        task = task_columns(self.reward_func_names)  # the rewards a group is judged by
        outputs, spreads, drawn_rewards, drawn_lengths = [], [], [], []
        while True:
            outputs.append(super()._generate_and_score_completions(self._round_inputs(inputs, target)))
            drawn_rewards.append(self._gathered_rewards)
            drawn_lengths.append(self._gathered_lengths)
            spread = groups_with_spread(self._gathered_rewards[:, task], self.reward_weights[task], size,
                                        self.args.dynamic_sampling_tolerance,
                                        per_function=self.multi_objective_aggregation == "normalize_then_sum")
            spreads.append(spread.tolist())
            found = sum(map(sum, spreads))
            if found >= target or len(outputs) == self.args.dynamic_sampling_max_gen_batches:
                break
            if len(outputs) % PROGRESS_ROUNDS == 0 and self.accelerator.is_main_process:  # a long draw says so
                from rlhf.trl_compat import say

                say(f"dynamic sampling, step {self.state.global_step + 1}: {len(outputs)} generation batches drawn "
                    f"of up to --dynamic_sampling_max_gen_batches {self.args.dynamic_sampling_max_gen_batches}, "
                    f"{min(found, target)} of the {target} groups whose rewards differ found so far")
        chosen = choose_groups(spreads, target)
        differ = min(found, target)
        output = outputs[0] if len(outputs) == 1 and differ == target else self._regroup(outputs, chosen)

        zero = self._log_trained_and_drawn(logged, output, chosen, drawn_rewards, drawn_lengths)
        drawn = target * len(outputs)
        metrics["dynamic_sampling/groups_drawn"].append(drawn)
        metrics["dynamic_sampling/groups_one_reward"].append(drawn - found)
        metrics["dynamic_sampling/groups_discarded"].append(drawn - target)
        metrics["dynamic_sampling/rounds"].append(len(outputs))
        metrics["dynamic_sampling/cap_reached"].append(float(differ < target))
        passes = self.prompts_taken / pass_size(len(self.train_dataset), target)
        metrics["dynamic_sampling/passes"].append(passes)
        if self.args.max_steps <= 0 and passes >= self.args.num_train_epochs and self._last_pass_ends is None:
            self._last_pass_ends = self._step + generate_every  # after this generation's last pass
        if differ < target and not self._cap_said:
            from rlhf.trl_compat import say

            self._cap_said = True
            filling, pushed = target - differ, int((~zero[differ:]).sum())
            if pushed:
                got = (f"got one reward within --dynamic_sampling_tolerance {self.args.dynamic_sampling_tolerance:g}: "
                       f"{filling - pushed} of them train with advantage 0, {pushed} with TRL's advantages, what "
                       "spread they have (--missing_eos_penalty's included) divided by their std")
            else:
                got = "got one reward (advantage 0)"
            if self.accelerator.is_main_process:
                say(f"note: dynamic sampling reached --dynamic_sampling_max_gen_batches "
                    f"{self.args.dynamic_sampling_max_gen_batches} at step {self.state.global_step + 1}: "
                    f"{differ} of the {target} groups it trains on have rewards that differ, the other {filling} "
                    f"{got}; each generation where it happens again is counted in dynamic_sampling/cap_reached, "
                    "not said")
        return output

    def _log_trained_and_drawn(self, logged, output, chosen, drawn_rewards, drawn_lengths):
        """TRL logs its metrics once per round: here they describe the groups trained on, one value per generation
        in place of the rounds' (`logged`: how many values each metric held before them), and what every round drew
        is logged under dynamic_sampling/ (`DRAWN`). Every process computes them alike from every process's rewards
        and lengths (per round, `drawn_rewards` and `drawn_lengths`). Returns, per group trained on (every process's,
        in the order of `chosen`: the groups that differ first), whether its advantages are all 0: TRL's
        frac_reward_zero_std is their share."""
        import torch

        metrics, size = self._metrics["train"], self.num_generations

        def kept(rounds):
            return torch.cat([rounds[r][g * size:(g + 1) * size] for r, g in chosen])

        weights, names = self.reward_weights, self.reward_func_names
        lengths = kept(drawn_lengths)
        trained = completion_metrics(kept(drawn_rewards), weights, names, lengths[:, 0], lengths[:, 1])
        advantages = self.accelerator.gather(output["advantages"]).view(len(chosen), size)
        zero = torch.isclose(advantages, torch.zeros_like(advantages)).all(dim=1)
        trained["frac_reward_zero_std"] = zero.float().mean().item()
        for key, value in trained.items():
            del metrics[key][logged.get(key, 0):]
            metrics[key].append(value)
        lengths = torch.cat(drawn_lengths)
        every = completion_metrics(torch.cat(drawn_rewards), weights, names, lengths[:, 0], lengths[:, 1])
        for name, key in DRAWN.items():
            metrics[f"dynamic_sampling/{name}"].append(every[key])
        return zero

    def _maybe_log_save_evaluate(self, *args, **kwargs):
        """With --num_train_epochs, the run ends at the end of the generation that completed that many passes over
        the prompts (extra rounds make passes shorter than the steps TRL planned for them), said once."""
        if (self._last_pass_ends is not None and self._step >= self._last_pass_ends
                and not self.control.should_training_stop):
            self.control.should_training_stop = True
            # saved as at the last step TRL planned (a save another strategy asked for stands)
            self.control.should_save = self.control.should_save or self.args.save_strategy == "steps"
            if self.accelerator.is_main_process:
                from rlhf.trl_compat import say

                say(f"dynamic sampling took --num_train_epochs {self.args.num_train_epochs:g} passes over the "
                    f"prompts by step {self.state.global_step} of the {self.state.max_steps} TRL planned for them "
                    "(its extra rounds take prompts of the next batches): training ends here, the learning-rate "
                    "schedule unfinished; give --max_steps to train a number of steps instead")
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    def _round_inputs(self, inputs, target):
        """This process's rows of a round: the next `target` prompts of the data order (`data_order`), each repeated
        for its group, laid out over the processes as TRL's RepeatSampler lays out a generation (process after
        process), with the columns of TRL's batch `inputs`."""
        picks = data_order(self.args.seed, self.prompts_taken, len(self.train_dataset), target, target,
                           self.shuffle_dataset)
        self.prompts_taken += target
        start = self.accelerator.process_index * len(inputs)
        keys = inputs[0].keys()  # the columns the dataloader gives
        rows = {index: self.train_dataset[index] for index in set(picks)}
        return [{key: rows[picks[j // self.num_generations]][key] for key in keys}
                for j in range(start, start + len(inputs))]

    def _regroup(self, outputs, chosen):
        """This process's slice of the `chosen` groups' rows, from the rounds' scored batches `outputs` (this
        process's rows of each); rows another process generated come from it (every process calls this alike)."""
        size, per_process = self.num_generations, len(outputs[0]["advantages"])
        rank = self.accelerator.process_index
        rows = [(r, g * size + i) for r, g in chosen for i in range(size)]  # over all processes, in training order
        mine = rows[rank * per_process:(rank + 1) * per_process]
        widths = None
        if all(row // per_process == n // per_process for n, (_, row) in enumerate(rows)):  # no row moves
            pieces = {(rank, r): output for r, output in enumerate(outputs)}
            index = [((rank, r), row % per_process) for r, row in mine]
        else:
            pieces, widths = self._rows_sent(outputs, rows, per_process)
            index, taken = [], {}
            for r, row in mine:  # each piece holds this process's rows of one (process, round) in its order
                key = (row // per_process, r)
                index.append((key, taken.setdefault(key, 0)))
                taken[key] += 1
        processing = self.processing_class
        pad = getattr(processing, "tokenizer", processing).pad_token_id
        batch = take_rows(pieces, index, pad, self.accelerator.device, widths)
        width = batch["prompt_ids"].shape[1]
        self._logps_again(batch, [n for n, (key, _) in enumerate(index) if pieces[key]["prompt_ids"].shape[1] < width])
        mask = batch["completion_mask"] if batch.get("tool_mask") is None else batch["completion_mask"] * batch[
            "tool_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()  # as TRL counts it (2498)
        return batch

    def _rows_sent(self, outputs, rows, per_process):
        """The rows a process trains on of each process's rounds, each process receiving only its own: {(process,
        round): its rows}, each piece's rows in this process's training order, and the width {key: width} the
        merged batch is padded to (the widest round of any process that holds a row trained on, on every process).
        `rows`: (round, row over all processes) in training order, `per_process` rows to each process. One
        `scatter_object_list` per process that sends rows to another, every process calling each alike; what is
        sent is CPU tensors of the rows (`_rows_of`)."""
        import torch
        import torch.distributed as dist

        rank, processes = self.accelerator.process_index, self.accelerator.num_processes
        # wanted[source][destination]: {round: the source's rows of that round the destination trains on, in order}
        wanted = [[{} for _ in range(processes)] for _ in range(processes)]
        for n, (r, row) in enumerate(rows):
            wanted[row // per_process][n // per_process].setdefault(r, []).append(row % per_process)
        pieces = {(rank, r): _rows_of(outputs[r], picked) for r, picked in wanted[rank][rank].items()}
        for source in range(processes):
            if not any(wanted[source][d] for d in range(processes) if d != source):  # it sends nothing
                continue
            sent = None
            if rank == source:
                sent = [{} if d == rank else {r: _rows_of(outputs[r], picked) for r, picked in part.items()}
                        for d, part in enumerate(wanted[rank])]
            received = [None]
            dist.scatter_object_list(received, sent, src=source)
            if rank != source:
                pieces.update({(source, r): piece for r, piece in received[0].items()})
        # The width of each padded tensor: the widest of the rounds, any process's, that hold a row trained on.
        names = [key for key in PADDING if outputs[0].get(key) is not None]
        held = {r for part in wanted[rank] for r in part}
        local = [max((outputs[r][key].shape[1] for r in held), default=0) for key in names]
        widths = self.accelerator.gather(torch.tensor([local], device=self.accelerator.device)).amax(dim=0)
        return pieces, dict(zip(names, widths.tolist()))

    def _logps_again(self, batch, rows):
        """The old and reference log-probabilities of the `rows` of `batch` whose prompts got extra left pads (their
        positions moved, `PADDING`), taken again at the batch's layout as TRL takes them (grpo_trainer.py 2634-2741:
        the policy itself for the old ones; for the reference, the reference model, or the policy with its adapter
        off or its "ref" adapter on). The weights are those the round used: no update comes between the rounds of a
        generation. What vLLM's importance-sampling ratio (`importance_sampling_ratio`) was computed from is left as
        the round took it."""
        import contextlib

        import torch
        from trl.models.utils import disable_gradient_checkpointing  # TRL 1.16.0
        from trl.trainer.utils import use_adapter  # TRL 1.16.0

        names = [name for name in ("old_per_token_logps", "ref_per_token_logps") if batch.get(name) is not None]
        if not rows or not names:
            return
        rows = torch.tensor(rows, device=batch["prompt_ids"].device)
        input_ids = torch.cat([batch["prompt_ids"][rows], batch["completion_ids"][rows]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"][rows], batch["completion_mask"][rows]], dim=1)
        logits_to_keep = batch["completion_ids"].shape[1]
        size = self.args.per_device_train_batch_size
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            for name in names:
                model, within = self.model, contextlib.nullcontext()
                if name == "ref_per_token_logps" and self.ref_model is not None:
                    model = self.ref_model
                elif name == "ref_per_token_logps":
                    unwrapped = self.accelerator.unwrap_model(self.model)
                    within = use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None)
                with within:
                    logps, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask,
                                                                          logits_to_keep, batch_size=size)
                batch[name][rows] = logps.to(batch[name].dtype)


def _rows_of(batch, rows):
    """The `rows` of a scored batch, on the CPU (to be sent to another process): its tensors of one row per
    completion; one value for the batch (`num_items_in_batch`, counted again once merged) is left out."""
    return {key: value if value is None else value[rows].cpu() for key, value in batch.items()
            if value is None or value.ndim}
