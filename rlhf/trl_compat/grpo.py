"""TRL's `GRPOTrainer`, resumed exactly where it stopped, also inside a generation block.

What TRL does (1.12.0, and 1.16.0 the same, trl/trainer/grpo_trainer.py lines cited for 1.16.0): it generates the
completions of `steps_per_generation x num_iterations` forward/backward passes at once and keeps them in
`_buffered_inputs` (951); `_prepare_inputs` (1522) trains each pass on the slice `_step % steps_per_generation` of
that buffer (1546) and generates afresh when `_step` (0 when the trainer is built, 948; counted by `training_step`,
1513) is a multiple of the block (1539). It saves neither (`_save_checkpoint`, 3384, saves TRL's own state only).
And its train sampler, `RepeatSampler` (trl/trainer/utils.py:859, from `_get_train_sampler`, 1280), draws each
pass over the prompts from one generator seeded once, with no `set_epoch`.
What goes wrong: a run resumed (or continued) inside a block starts at `_step` 0 with no buffer, so its first pass
generates again (a second sample for a block already half trained on) and every later block is shifted; a run
resumed in a later pass over the prompts draws the first pass's order again. Observable: the resumed run's weights
differ from one uninterrupted run's (`tests/test_interruption.py`, `tests/test_distributed.py`), and it generates
where an uninterrupted run trains on its buffer (`tests/test_trl_compat.py`).

Fix: `ResumableGeneration` saves the buffer and `_step` in each checkpoint (before `trainer_state.json`, which
marks a checkpoint complete), puts them back on resume, and gives the sampler the `set_epoch` that accelerate
calls before each pass (and a callback, where accelerate's call does not reach it). It is a mixin for any of TRL's
online trainers built that way: TRL 1.16's `RLOOTrainer` has the same `_step`, `_buffered_inputs`, `RepeatSampler`
and `beta` (`class ResumableRLOOTrainer(ResumableGeneration, RLOOTrainer)`, tested as GRPO's is).
`ResumableGRPOTrainer` is it on `GRPOTrainer`, with the adaptive KL coefficient (`--target_kl`).
"""

import contextlib
import json
import logging
import math
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rlhf.trl_compat import check_trl_version, say
from rlhf.trl_compat.dynamic_sampling import DynamicSampling, completion_lengths, seek_pass

check_trl_version()

from trl import GRPOTrainer  # noqa: E402

logger = logging.getLogger(__name__)


def tied_weight_names(model):
    """The names of `model`'s weights that are another weight tied (the LM head of tied embeddings): transformers'
    `_tied_weights_keys` of each submodule, prefixed with its path; only where the config ties them."""
    if not getattr(model.config.get_text_config(), "tie_word_embeddings", False):
        return []
    names = []
    for prefix, module in model.named_modules():
        for key in getattr(module, "_tied_weights_keys", None) or {}:
            names.append(f"{prefix}.{key}" if prefix else key)
    return names


def generation_state_file(process_index):
    """The file in a checkpoint that holds one process's generation buffer (each process generates its own)."""
    return f"grpo_generation_{process_index}.pt"


class ResumableGeneration:
    """A mixin for TRL's online trainers (GRPO, RLOO), put first among the bases: checkpoints hold the generation
    being trained on, resume puts it back, and each pass over the prompts draws its uninterrupted run's order."""

    num_completion_tokens = 0  # completion tokens generated in training so far, every process's (GRPO counts them)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_sampler = None  # built by train()
        self.add_callback(_SamplerPass(self))

    def _save_checkpoint(self, model, trial):
        """Each process saves its own buffer first, and all wait for each other before transformers saves: the main
        process writes trainer_state.json last, which marks the checkpoint complete, so every process's buffer must be
        in it by then. (transformers 5.23's save happened to wait for every process too, measured; this is the
        guarantee, not that.)"""
        import torch

        checkpoint = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        checkpoint.mkdir(parents=True, exist_ok=True)
        state = {"step": self._step, "buffered_inputs": self._buffered_inputs, "beta": self.beta,
                 "num_completion_tokens": self.num_completion_tokens}
        torch.save(state, checkpoint / generation_state_file(self.args.process_index))
        self.accelerator.wait_for_everyone()
        super()._save_checkpoint(model, trial)

    def train(self, resume_from_checkpoint=None, **kwargs):
        if resume_from_checkpoint and not isinstance(resume_from_checkpoint, bool):  # the scripts pass the path
            self.restore_generation(resume_from_checkpoint)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def restore_generation(self, checkpoint):
        """Put back the generation buffer and pass counter saved in `checkpoint`: the next pass trains on the slice
        an uninterrupted run would, and the next generation comes where it would have."""
        import torch
        from accelerate.utils import send_to_device

        path = Path(checkpoint) / generation_state_file(self.args.process_index)
        if not path.exists():  # a checkpoint written by an earlier version of this package
            logger.warning("%s has no saved generation: the first step resumed generates afresh (TRL's own resume), "
                           "so it does not train what an uninterrupted run would", path)
            return
        # weights_only: tensors, numbers and lists, nothing is unpickled beyond that. Loaded on the CPU first: under
        # torchrun on CPUs the tensors are tagged "cpu:0", which torch.load cannot map to a device.
        state = torch.load(path, map_location="cpu", weights_only=True)
        self._step = state["step"]
        self._buffered_inputs = send_to_device(state["buffered_inputs"], self.accelerator.device)
        self.beta = state.get("beta", self.beta)  # adapted by --target_kl (not in checkpoints of earlier versions)
        self.num_completion_tokens = state.get("num_completion_tokens", 0)  # nor this count (0: counted afresh)

    def _issue_warnings_after_load(self, load_result):
        """transformers (5.23: trainer.py `Trainer._issue_warnings_after_load`, called when a checkpoint's weights
        load on resume) warns of every key missing from the checkpoint. A model with tied embeddings (SmolLM2: the
        LM head is the embedding matrix) is saved without the tied copy, on purpose: its keys are dropped from the
        warning, which then shows only what is really missing."""
        tied = set(tied_weight_names(self.accelerator.unwrap_model(self.model)))
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _get_train_sampler(self, dataset=None):
        self.train_sampler = EpochRepeatSampler(super()._get_train_sampler(dataset))
        return self.train_sampler


# The vocabulary columns of one tile of TRL 1.16's fused LM head on a CPU (TRL's: 32,768, `trl/trainer/utils.py`
# `_CHUNKED_LOGPROB_CHUNK_SIZE`). Its CPU backward (`trl/kernels/chunked_logprob.py`, `_backward_tile`) keeps about
# nine tile-sized float32 temporaries alive at once, over every position of the batch: measured with TRL's own
# GRPOTrainer at the benchmark's shape, peak RSS 5.56 GB at TRL's tile and 4.36 GB at 4,096, the same losses to the
# 7 digits printed (docs/performance.md; `bench/lm_head_memory.py`). A GPU runs TRL's Triton kernel: left as it is.
CPU_VOCABULARY_TILE = 4096


@contextlib.contextmanager
def cpu_vocabulary_tile(device):
    """Within it, TRL's fused LM head projects onto the vocabulary in tiles of CPU_VOCABULARY_TILE columns where
    `device` is a CPU. TRL's GRPOConfig has no field for it: its module constant is set for the block alone, and put
    back after (tests/test_trl_compat.py fails when TRL renames it)."""
    from trl.trainer import utils

    kept = utils._CHUNKED_LOGPROB_CHUNK_SIZE  # TRL 1.16.0
    if device.type == "cpu":
        utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(kept, CPU_VOCABULARY_TILE)
    try:
        yield
    finally:
        utils._CHUNKED_LOGPROB_CHUNK_SIZE = kept


def add_reward_func(trainer, func, weight=1.0):
    """Add a reward function to a built GRPOTrainer as TRL adds an environment's reward (trl/trainer/grpo_trainer.py
    1.16.0: 727-730): its name, no processing class, its weight after --reward_weights. The trainer gets a new list,
    so the list it was built with (the held-out evaluation's) stays as it was."""
    import torch

    trainer.reward_funcs = [*trainer.reward_funcs, func]
    trainer.reward_func_names.append(func.__name__)
    trainer.reward_processing_classes.append(None)
    trainer.reward_weights = torch.cat([trainer.reward_weights, torch.tensor([weight], dtype=torch.float32)])


class ResumableGRPOTrainer(ResumableGeneration, DynamicSampling, GRPOTrainer):
    """TRL's GRPOTrainer resumed exactly (`ResumableGeneration`), with the adaptive KL coefficient (--target_kl),
    dynamic sampling (--use_dynamic_sampling, `rlhf/trl_compat/dynamic_sampling.py`), and on a CPU its LM head's
    smaller vocabulary tile (`cpu_vocabulary_tile`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._beta_step = 0  # the step at which --target_kl last adapted beta
        if getattr(self.args, "target_kl", None):  # ours, not in TRL's GRPOConfig
            self.add_callback(_KLHorizonNote(self))

    def train(self, *args, **kwargs):
        with cpu_vocabulary_tile(self.accelerator.device):
            return super().train(*args, **kwargs)

    def _generate(self, prompts):
        """TRL's generation, counting the completion tokens generated in training, every process's and every round of
        dynamic sampling's: logged as `num_completion_tokens` beside TRL's `num_tokens` (prompt and completion
        tokens), as TRL logs that one (trl/trainer/grpo_trainer.py 1.16.0: 2274-2293, which counts a completion's
        model tokens where a tool mask is given), and kept in each checkpoint."""
        import torch

        result = super()._generate(prompts)
        if self.model.training:
            tokens = sum(completion_lengths(result[1], result[2]))  # (prompt_ids, completion_ids, tool_mask, ...)
            tokens = self.accelerator.gather(torch.tensor([tokens], device=self.accelerator.device)).sum().item()
            self.num_completion_tokens += tokens
            self._metrics["train"]["num_completion_tokens"] = [self.num_completion_tokens]
        return result

    def log(self, logs, *args, **kwargs):
        """A training step's logs get `beta`, the KL coefficient that step trained with; with `--target_kl`, the
        coefficient then adapts to the step's `kl` (`rlhf.kl_control`), in every process alike (TRL's `kl` is
        averaged over all processes).

        TRL's GRPOTrainer keeps the step's KL in `_metrics["train"]["kl"]` (one value per pass since the last log,
        averaged into `logs` by its own `log`) and reads `self.beta` at each loss (trl/trainer/grpo_trainer.py 1.16.0:
        983, 3150, 3268, 3302)."""
        kl = [value for value in self._metrics["train"].get("kl", []) if not math.isnan(value)]
        training = self.model.training and kl
        if training:
            logs["beta"] = self.beta
        super().log(logs, *args, **kwargs)
        if training and self.args.target_kl:
            from rlhf.kl_control import adaptive_kl_coef

            steps, self._beta_step = self.state.global_step - self._beta_step, self.state.global_step
            per_step = (self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps
                        * self.accelerator.num_processes)  # completions per optimizer step
            self.beta = adaptive_kl_coef(self.beta, sum(kl) / len(kl), self.args.target_kl, steps * per_step,
                                         self.args.kl_horizon)

    def restore_generation(self, checkpoint):
        super().restore_generation(checkpoint)
        self._beta_step = json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"]


class _KLHorizonNote(TrainerCallback):
    """Says it, once the run's length is known, where --target_kl cannot move beta measurably within the run: it
    adapts at each log (`ResumableGRPOTrainer.log`), for the steps after."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        from rlhf.kl_control import kl_horizon_note

        per_step = (args.per_device_train_batch_size * args.gradient_accumulation_steps
                    * self.trainer.accelerator.num_processes)  # completions per optimizer step
        every = max(1, int(state.logging_steps or 1))
        line = kl_horizon_note("--beta", args.target_kl, (state.max_steps - 1) // every, every * per_step,
                               args.kl_horizon, "completions", "logs (every --logging_steps steps)")
        if line and state.is_world_process_zero:
            say(line)


class _SamplerPass(TrainerCallback):
    """Tells the train sampler which pass over the prompts begins. accelerate's `set_epoch` does not reach it in a
    multi-process run resumed mid-pass (through transformers' skip, accelerate's shard and torch's batch sampler),
    which then drew the first pass's order again. `state.epoch` at a pass's start is its index (a resumed run's is
    the checkpoint's: passes done, plus a fraction)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self.trainer.train_sampler is not None:
            self.trainer.train_sampler.set_epoch(math.floor(state.epoch or 0))


class EpochRepeatSampler:
    """TRL's `RepeatSampler` whose pass `epoch` draws the order that pass draws in an uninterrupted run.

    TRL's sampler draws one permutation per pass from a generator seeded once (its `generator`, `seed`, `shuffle`,
    `num_samples`). accelerate calls `set_epoch` before each pass (transformers before the pass a resumed run starts
    in), which here seeds the generator again and draws the `epoch` permutations before it.
    """

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        return iter(self.sampler)

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        sampler = self.sampler
        if not sampler.shuffle or sampler.seed is None:
            return
        seek_pass(sampler.generator, sampler.seed, epoch, sampler.num_samples)
