"""TRL 1.12's `PPOTrainer` with named hook points, so that `rlhf/ppo.py` reaches into nothing private.

TRL's `PPOTrainer.train()` is one long loop with no hooks of its own: it always starts at batch 1 with its
counters at zero, generates through the policy's `generate()`, reads `args.kl_coef` afresh for each batch, and
saves through transformers' private `_save_checkpoint`. `PPOTrainerHooks` gives each of those details a name and
a docstring; `tests/test_trl_compat.py` pins every one of them.

Hooks a subclass overrides (each does nothing here):
- `record_completions(completions, stop_token_id)`: each batch of completions generated for training;
- `save_extra_checkpoint_files(checkpoint)`: files that must be in a checkpoint before it counts as complete.

What a subclass calls or reads:
- `kl_coef`: the KL coefficient of the next batch (can be set);
- `trained_policy`, `trained_value_model`, `value_model_state_dict()`;
- `use_train_dataloader(dataloader)`: where train() draws its batches from;
- `restore_optimizer_scheduler_and_rng(checkpoint)` and `start_at_batch(done)`: to resume a run.

Saving also works under DDP here, which TRL 1.12 gets wrong (trl issue #2375), and so does LoRA (TRL 1.12 reads the
reference policy through the DDP wrapper, see `_fix_lora_reference_under_ddp`), and so do rollouts of several
mini-batches (`num_mini_batches` > 1), which TRL 1.12 refuses or trains on wrongly (see `__init__`).
"""

from contextlib import contextmanager
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rlhf.trl_compat import check_trl_version

check_trl_version()  # another release breaks what follows in ways that no error message would explain

from trl.experimental.ppo import PPOTrainer  # noqa: E402


class PPOTrainerHooks(PPOTrainer):
    # transformers' Trainer.__init__ sets this, but TRL's PPOTrainer does not call it; saving reads it in every
    # process but the first of a multi-process run.
    is_distributed_loading_by_transformers = False

    def __init__(self, *args, **kwargs):
        # TRL 1.12 makes a rollout of per_device_train_batch_size x gradient_accumulation_steps prompts per process,
        # cuts it into num_mini_batches mini-batches (one optimizer step each) of per_device_train_batch_size
        # micro-batches, and has accelerate accumulate gradients over gradient_accumulation_steps micro-batches.
        # With num_mini_batches > 1 those disagree: the rollout is num_mini_batches times too small (an error when
        # it does not divide, else fewer steps on fewer prompts than asked). So the rollout is sized with the
        # accumulation counted once per mini-batch, and accelerate then accumulates over one mini-batch. Nor may the
        # rollout that ends a pass over the prompts step at every micro-batch (accelerate's default at the end of
        # a dataloader): TRL draws one batch of the dataloader per rollout and trains on it after.
        config = kwargs["args"] if "args" in kwargs else args[0]
        accumulation = config.gradient_accumulation_steps
        config.gradient_accumulation_steps = accumulation * config.num_mini_batches
        try:
            super().__init__(*args, **kwargs)
        finally:
            config.gradient_accumulation_steps = accumulation  # train() sizes its per-micro-batch statistics by it
        self.accelerator.gradient_accumulation_steps = accumulation
        self.accelerator.gradient_state.plugin_kwargs["sync_with_dataloader"] = False
        self._fix_lora_reference_under_ddp()
        # TRL generates inside train(), through the policy's own generate() (trl's `batch_generation`): wrapping it
        # on this policy object is the only way to see the completions.
        self._recording = True
        generate = self.trained_policy.generate

        def recording_generate(input_ids, **kwargs):
            output = generate(input_ids=input_ids, **kwargs)
            if self._recording:
                self.record_completions(output.sequences[:, input_ids.shape[1]:], self.stop_token_id)
            return output

        self.trained_policy.generate = recording_generate

    def _fix_lora_reference_under_ddp(self):
        """With LoRA and several processes, TRL 1.12's train() died at the first rollout (AttributeError:
        'DistributedDataParallel' object has no attribute 'policy'): its reference forward, the policy with the
        adapter disabled, reads `self.model.policy` in `null_ref_context` and `model.policy` in train(), through
        the DDP wrapper. The wrapper gets the policy as a plain attribute, not a registered submodule: DDP's
        parameters and state dict stay as they are, and that forward runs under no_grad, where DDP has no
        gradients to synchronise."""
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(self.model, DistributedDataParallel):
            object.__setattr__(self.model, "policy", self.model.module.policy)

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
        self._recording = False  # TRL's sample table, drawn between batches: not completions trained on
        try:
            super().generate_completions(sampling)
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

    def use_train_dataloader(self, dataloader):
        """Make train() draw its batches from `dataloader` (see `get_train_dataloader()` for the current one).

        TRL's train() iterates `self.dataloader` as it is when train() starts, pass after pass, for as many batches
        as it needs: `dataloader` needs `__iter__` (called once per pass) and `__len__`.
        """
        self.dataloader = dataloader

    def restore_optimizer_scheduler_and_rng(self, checkpoint):
        """Load the optimizer, learning-rate scheduler and random states that transformers saved in `checkpoint`."""
        import torch

        checkpoint = Path(checkpoint)
        # weights_only: these are plain tensors and numbers, nothing is unpickled beyond that.
        optimizer = torch.load(checkpoint / OPTIMIZER_NAME, map_location=self.accelerator.device, weights_only=True)
        self.optimizer.load_state_dict(optimizer)
        self.lr_scheduler.load_state_dict(torch.load(checkpoint / SCHEDULER_NAME, weights_only=True))
        self._load_rng_state(str(checkpoint))  # this process's own file in a multi-process run

    def start_at_batch(self, done):
        """Continue a run that stopped after `done` batches: train() runs only the batches left, and its step and
        episode counters continue from `done`.

        TRL's train() runs batches 1 to `args.num_total_batches` and zeroes the counters before `on_train_begin`,
        where a callback puts them back.
        """
        total = self.args.num_total_batches
        self.args.num_total_batches = total - done
        self.add_callback(_ContinueCounters(global_step=done, episode=done * self.args.batch_size, max_steps=total))

    # ---- Saving ----

    def _save_checkpoint(self, model, trial):
        checkpoint = Path(self.args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        self.save_extra_checkpoint_files(checkpoint)
        with self._without_ddp_wrapper():
            super()._save_checkpoint(model, trial)

    def save_model(self, output_dir=None, _internal_call=False):
        with self._without_ddp_wrapper():
            super().save_model(output_dir, _internal_call)

    @contextmanager
    def _without_ddp_wrapper(self):
        """TRL 1.12's PPO saving reads `.policy` and `.config` off the model, which DDP hides (trl issue #2375)."""
        from torch.nn.parallel import DistributedDataParallel

        wrapped = self.model
        if isinstance(wrapped, DistributedDataParallel):
            self.model = wrapped.module
        try:
            yield
        finally:
            self.model = wrapped


class _ContinueCounters(TrainerCallback):
    """Puts back, at `on_train_begin`, the step and episode counters that TRL's train() has just zeroed."""

    def __init__(self, global_step, episode, max_steps):
        self.global_step, self.episode, self.max_steps = global_step, episode, max_steps

    def on_train_begin(self, args, state, control, **kwargs):
        state.global_step, state.episode, state.max_steps = self.global_step, self.episode, self.max_steps
