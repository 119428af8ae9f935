"""TRL 1.12's `PPOTrainer` (its bugs fixed, see `ppo_fixes.py`) with named hook points, so that `rlhf/ppo.py`
reaches into nothing private.

TRL's `PPOTrainer.train()` is one long loop with no hooks of its own: it always starts at batch 1 with its
counters at zero, generates through the policy's `generate()`, reads `args.kl_coef` afresh for each batch, and
saves through transformers' private `_save_checkpoint`. `PPOTrainerHooks` gives each of those details a name and
a docstring; `tests/test_trl_compat.py` checks each by what a tiny trainer does.

Hooks a subclass overrides (each does nothing here):
- `record_completions(completions, stop_token_id)`: each batch of completions generated for training;
- `save_extra_checkpoint_files(checkpoint)`: files that must be in a checkpoint before it counts as complete.
- `generating_aside()`: a context in which the policy generates without `record_completions` (an evaluation).

Rollouts are sampled at `args.top_p` where it is below 1.0 (our PPO config has the field; TRL's has none and samples
at 1.0), with the rollout's log-probabilities those of the whole distribution at the temperature, as TRL's training
forward computes them.

A rollout whose scores are all equal (no completion scored apart from the others) is trained on with advantages of 0
where `args.skip_rollouts_without_signal` is set (our PPO config's field; TRL's has none and whitens them to unit size,
see `_masked_whiten` below); `advantages_zeroed` says whether the last rollout's were.

A reward model with a `score_completions(query_responses, context_length)` method scores there, and only its
`reward_model` attribute (a sequence classifier, or None) goes through DeepSpeed (see `_get_reward` below): how
reward functions take the reward model's place.

What a subclass calls or reads:
- `kl_coef`: the KL coefficient of the next batch (can be set);
- `advantages_zeroed`: whether the last rollout was one without signal, trained on with advantages of 0;
- `trained_policy`, `trained_value_model`, `value_model_state_dict()`;
- `restore_optimizer_scheduler_and_rng(checkpoint)` and `start_at_batch(done)`: to resume a run, in the pass over
  the prompts it stopped in, drawn in the same order (each checkpoint holds the random state the pass was drawn from).
"""

import contextlib
import copy
import sys
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rlhf.trl_compat import check_trl_version

DATA_ORDER_FILE = "ppo_data_order.pt"  # in a checkpoint: the random states of the order of the prompts

check_trl_version()  # another release breaks what follows in ways that no error message would explain

from trl.experimental import utils as _trl_utils  # noqa: E402
from trl.experimental.ppo import ppo_trainer as _trl_ppo_trainer  # noqa: E402

from rlhf.trl_compat.ppo_fixes import PatchedPPOTrainer  # noqa: E402


def reward_model_scores(model, query_responses, pad_token_id, context_length):
    """TRL's score of each sequence under a sequence-classification `model`: its output at the last token that is
    not padding (`trl.experimental.utils.get_reward`)."""
    return _trl_utils.get_reward(model, query_responses, pad_token_id, context_length)[1]


def _get_reward(model, query_responses, pad_token_id, context_length):
    """TRL 1.12's `PPOTrainer.train()` and `generate_completions()` score a batch with the module-level
    `get_reward(reward_model, query_responses, pad_token_id, context_length)`, which reads a sequence classifier's
    backbone and score head, and keep only its second value. A reward model with `score_completions` (the reward
    functions of `rlhf.ppo.PPORewards`) scores there instead; every other model (the value model too) as before."""
    scorer = getattr(model, "module", model)  # a DeepSpeed engine wraps the reward model
    if hasattr(scorer, "score_completions"):
        return None, scorer.score_completions(query_responses, context_length), None
    return _trl_utils.get_reward(model, query_responses, pad_token_id, context_length)


def _prepare_deepspeed(model, accelerator):
    """TRL 1.12's `PPOTrainer.__init__` puts the reward model into a DeepSpeed engine with `prepare_deepspeed`, which
    reads its `config`; reward functions have none (nor, without a reward model, any weights): only the reward model
    among them is prepared."""
    if hasattr(model, "score_completions"):
        if model.reward_model is not None:
            model.reward_model = _trl_prepare_deepspeed(model.reward_model, accelerator)
        return model
    return _trl_prepare_deepspeed(model, accelerator)


def _masked_whiten(values, mask, shift_mean=True):
    """TRL 1.12's `PPOTrainer.train()` whitens a rollout's advantages with the module-level
    `masked_whiten(advantages, ~padding_mask)` (and, with `whiten_rewards`, its rewards, `shift_mean=False`), in the
    frame where `scores` holds the rollout's score of each completion (the missing-EOS penalty included).

    Whitened, the advantages have unit size whatever the scores: where every completion scored the same (a verifier
    that none passed), they are GAE's noise (the value model's errors, the KL penalty and, with `lam` < 1, a push
    against the last token, EOS), and PPO takes a full step from them. Where the trainer's
    `args.skip_rollouts_without_signal` is set, such a rollout's advantages are 0 instead: the policy gets no gradient
    from it (GRPO's zero advantage for a group whose completions all scored the same); its returns, which the value
    model learns, are computed before this call and stay."""
    whitened = _trl_masked_whiten(values, mask, shift_mean)
    caller = sys._getframe(1)
    if shift_mean and caller.f_code is _trl_ppo_trainer.PPOTrainer.train.__code__:
        trainer, scores = caller.f_locals["self"], caller.f_locals["scores"]
        trainer.advantages_zeroed = (getattr(trainer.args, "skip_rollouts_without_signal", False)
                                     and bool((scores == scores[0]).all()))
        if trainer.advantages_zeroed:
            return whitened.zero_()
    return whitened


_trl_prepare_deepspeed = _trl_ppo_trainer.prepare_deepspeed
_trl_masked_whiten = _trl_ppo_trainer.masked_whiten
# The names PPOTrainer looks up in its module when it runs: every model but reward functions goes through TRL's
# own, and the advantages of every rollout with a signal are TRL's whitened ones.
_trl_ppo_trainer.get_reward = _get_reward
_trl_ppo_trainer.prepare_deepspeed = _prepare_deepspeed
_trl_ppo_trainer.masked_whiten = _masked_whiten


class PPOTrainerHooks(PatchedPPOTrainer):
    """TRL's PPO trainer, its 1.12 bugs fixed, with the hook points this module's docstring lists."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.advantages_zeroed = False  # set at each rollout by _masked_whiten
        self.dataloader = _RecordedPasses(self.dataloader)
        # TRL generates inside train(), through the policy's own generate() (trl's `batch_generation`): wrapping it
        # on this policy object is the only way to see the completions, and to sample them from a nucleus.
        self._recording = True
        generate = self.trained_policy.generate

        def recording_generate(input_ids, **kwargs):
            nucleus = self._recording and getattr(self.args, "top_p", 1.0) < 1.0
            if nucleus:
                config = copy.deepcopy(kwargs["generation_config"])
                config.top_p = self.args.top_p
                kwargs.update(generation_config=config, output_scores=False, output_logits=True)
            output = generate(input_ids=input_ids, **kwargs)
            if nucleus:
                # TRL takes a rollout's log-probabilities from `output.scores`, the logits after sampling's processors
                # (top_p sets all but the nucleus to -inf), and its training forward from the model's logits over
                # the temperature: the rollout's must be the same, or the first ratio and KL are off before any step.
                # Only the raw logits are kept, so generation holds one copy of them, as at top_p 1.0.
                output.scores = tuple(logits / config.temperature for logits in output.logits)
            if self._recording:
                self.record_completions(output.sequences[:, input_ids.shape[1]:], self.stop_token_id)
            return output

        self.trained_policy.generate = recording_generate

    # ---- Hooks ----

    def record_completions(self, completions, stop_token_id):
        """Called with each batch of completions generated for training, in the process that generated them.

        `completions`: the token ids generated after the prompt, one row each, padded after the stop token;
        `stop_token_id`: the token that ends a completion (None: no token does).
        """

    def save_extra_checkpoint_files(self, checkpoint):
        """Called in every process with a checkpoint's folder (not created yet), before anything else is saved in it.

        transformers writes `trainer_state.json` last, and that file marks a checkpoint complete (see
        `rlhf.run.last_checkpoint`): what is saved here is in every checkpoint that counts.
        """

    def generate_completions(self, sampling=False):
        with self.generating_aside():  # TRL's sample table, drawn between batches: not completions trained on
            super().generate_completions(sampling)

    @contextlib.contextmanager
    def generating_aside(self):
        """Within it, what the policy generates is not trained on, and not passed to `record_completions` (an
        evaluation, a sample table)."""
        self._recording = False
        try:
            yield
        finally:
            self._recording = True

    # ---- The models ----

    @property
    def trained_policy(self):
        """The policy being trained (a PEFT model with LoRA), out of DDP and TRL's policy-and-value wrapper."""
        return self.accelerator.unwrap_model(self.model).policy

    @property
    def trained_value_model(self):
        return self.accelerator.unwrap_model(self.model).value_model

    def value_model_state_dict(self):
        """The value model's weights on the main process (None on the others). Call it in every process: under
        ZeRO-3 or FSDP they are gathered from all."""
        state_dict = self.accelerator.get_state_dict(self.model)  # policy.* and value_model.*, unsharded
        if not self.accelerator.is_main_process:
            return None
        prefix = "value_model."
        return {name.removeprefix(prefix): tensor for name, tensor in state_dict.items() if name.startswith(prefix)}

    # ---- The KL coefficient ----

    @property
    def kl_coef(self):
        """The KL penalty coefficient of the next batch: TRL's train() reads `args.kl_coef` for each batch, so
        setting it here (which sets `args.kl_coef`) changes the coefficient from the next batch on."""
        return self.args.kl_coef

    @kl_coef.setter
    def kl_coef(self, value):
        self.args.kl_coef = value

    # ---- Resuming ----

    def restore_optimizer_scheduler_and_rng(self, checkpoint):
        """Load the optimizer, learning-rate scheduler and random states that transformers saved in `checkpoint`,
        and the random states of the data order (ours)."""
        import torch

        checkpoint = Path(checkpoint)
        def load(name):
            # weights_only: plain tensors and numbers, nothing is unpickled beyond that. On the CPU: under torchrun on
            # CPUs the tensors are tagged "cpu:0", which torch.load cannot map back; the optimizer moves its state
            # to its parameters' device.
            return torch.load(checkpoint / name, map_location="cpu", weights_only=True)

        if getattr(self, "is_deepspeed_enabled", False):
            # DeepSpeed keeps the optimizer state in its own checkpoint (global_step*/), one shard per process
            from transformers.integrations.deepspeed import deepspeed_load_checkpoint

            deepspeed_load_checkpoint(self.model, str(checkpoint))
        else:
            self.optimizer.load_state_dict(load(OPTIMIZER_NAME))
        self.lr_scheduler.load_state_dict(load(SCHEDULER_NAME))
        self._load_rng_state(str(checkpoint))  # this process's own file in a multi-process run
        if (checkpoint / DATA_ORDER_FILE).exists():  # not in checkpoints of earlier versions of this package
            self.dataloader.load_state(load(DATA_ORDER_FILE))

    def start_at_batch(self, done):
        """Continue a run that stopped after `done` batches: train() runs only the batches left, and its step and
        episode counters continue from `done`.

        TRL's train() runs batches 1 to `args.num_total_batches` and zeroes the counters before `on_train_begin`,
        where a callback puts them back. The rest of the pass over the prompts it stopped in comes first, in the
        order that pass was drawn in: call it after `restore_optimizer_scheduler_and_rng`.
        """
        self.dataloader.skip_first(done % len(self.dataloader))
        total = self.args.num_total_batches
        self.args.num_total_batches = total - done
        self.add_callback(_ContinueCounters(global_step=done, episode=done * self.args.batch_size, max_steps=total))

    # ---- Saving ----

    def _save_checkpoint(self, model, trial):
        import torch

        checkpoint = Path(self.args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:  # the order is drawn alike in every process (see _RecordedPasses)
            checkpoint.mkdir(parents=True, exist_ok=True)
            torch.save(self.dataloader.state(), checkpoint / DATA_ORDER_FILE)
        self.save_extra_checkpoint_files(checkpoint)
        super()._save_checkpoint(model, trial)


class _RecordedPasses:
    """TRL's train dataloader, which keeps the random state that the order of the pass in flight was drawn from.

    TRL's `DataLoader(shuffle=True)` draws a pass's order when the pass begins: from its sampler's generator, which
    accelerate gives it (seeded alike in every process) in a multi-process run and calls `synchronized_generator`,
    else one seed from torch's global generator. A run resumed inside a later pass must draw that pass again from
    the state it was drawn from: the checkpoint's random state is where that pass left it.
    """

    def __init__(self, dataloader):
        self.dataloader = dataloader
        self.pass_start = None  # the order generator's state when the pass in flight began
        self._first_pass = None  # the rest of the pass a resumed run stopped in

    def _generator_state(self, state=None):
        """The state of the generator that passes are drawn from; with `state`, set it first."""
        import torch

        generator = self.dataloader.synchronized_generator  # accelerate's name for the sampler's generator
        if state is not None:
            (generator.set_state if generator is not None else torch.set_rng_state)(state)
        return generator.get_state() if generator is not None else torch.get_rng_state()

    def state(self):
        return {"pass_start": self.pass_start, "now": self._generator_state()}

    def load_state(self, state):
        """Put back `state()` as saved; then `skip_first` draws the pass in flight again."""
        self.pass_start = state["pass_start"]
        self._generator_state(state["now"])  # the sampler's generator is not in transformers' random states

    def skip_first(self, skip):
        """Draw the pass in flight again from its saved state, and leave out its first `skip` batches."""
        import torch

        if not skip:
            return  # a pass had just ended: the next is drawn from the state restored
        # torch's DataLoader also draws a base seed from the global generator at each pass: the checkpoint's global
        # state comes after that draw, so it is put back too.
        now, global_now = self._generator_state(), torch.get_rng_state()
        self._generator_state(self.pass_start if self.pass_start is not None else now)
        self.pass_start = self._generator_state()
        self._first_pass = iter(self.dataloader)
        for _ in range(skip):  # the first batch draws the order
            next(self._first_pass, None)
        self._generator_state(now)
        torch.set_rng_state(global_now)

    def __iter__(self):
        if self._first_pass is not None:
            iterator, self._first_pass = self._first_pass, None
            return iterator
        self.pass_start = self._generator_state()
        return iter(self.dataloader)

    def __len__(self):
        return len(self.dataloader)


class _ContinueCounters(TrainerCallback):
    """Puts back, at `on_train_begin`, the step and episode counters that TRL's train() has just zeroed."""

    def __init__(self, global_step, episode, max_steps):
        self.global_step, self.episode, self.max_steps = global_step, episode, max_steps

    def on_train_begin(self, args, state, control, **kwargs):
        state.global_step, state.episode, state.max_steps = self.global_step, self.episode, self.max_steps
