"""Four bugs of TRL 1.12's PPO trainer (`trl/experimental/ppo/ppo_trainer.py`, `PPOTrainer`), each fixed by one class.

`PatchedPPOTrainer` is TRL's trainer with all four; each fix is a mixin named for what it fixes, so that a test can
build the trainer without one and see TRL's own behaviour (`tests/test_trl_compat.py`):
- `OneOptimizerStepPerMiniBatch`: gradient accumulation over a rollout's mini-batches;
- `SavePolicyUnderDDP`: checkpoints and the final model of a multi-process run;
- `LoraReferenceUnderDDP`: the reference forward (the policy, adapter off) of a multi-process LoRA run;
- `SavePolicyUnderDeepSpeed`: checkpoints and the final model under DeepSpeed ZeRO-2/3.
TRL 1.13 removed PPO (huggingface/trl#7020): none of this is ever fixed upstream. See CONTRIBUTING.md.
"""

from contextlib import contextmanager

from rlhf.trl_compat import check_trl_version

check_trl_version()  # these fixes are for 1.12's code: another release needs them re-checked (CONTRIBUTING.md)

from rlhf.trl_compat import PPOTrainer  # noqa: E402


class OneOptimizerStepPerMiniBatch:
    """One optimizer step per mini-batch of a rollout, each over `gradient_accumulation_steps` micro-batches.

    TRL 1.12, `PPOTrainer.__init__` ("calculate various batch sizes"): a rollout (`local_batch_size`) is
    `per_device_train_batch_size x gradient_accumulation_steps` prompts, cut into `num_mini_batches` mini-batches
    (`local_mini_batch_size = exact_div(...)`), and its `Accelerator(gradient_accumulation_steps=...)` steps once
    every `gradient_accumulation_steps` micro-batches. `train()` then loops mini-batch by micro-batch under
    `accelerator.accumulate(model)` and calls `optimizer.step()` at each micro-batch. What goes wrong:
    - with `num_mini_batches` > 1 a mini-batch holds `gradient_accumulation_steps / num_mini_batches` micro-batches
      but accumulation waits for `gradient_accumulation_steps` of them: one optimizer step spans several
      mini-batches, on a rollout `num_mini_batches` times smaller than asked; where the division is not exact,
      `ValueError: batch_size must be a multiple of num_mini_batches` before training;
    - `train()` draws one dataloader batch per rollout (`next(iter_dataloader)`), so the rollout that ends a pass over
      the prompts is trained on while accelerate's `end_of_dataloader` is set, and accelerate (its default
      `sync_with_dataloader`) then steps at every micro-batch: with gradient accumulation, that rollout takes
      `gradient_accumulation_steps` times the optimizer steps of the others.
    - under DeepSpeed the engine takes its accumulation count from that accelerator at `prepare()`
      (`gradient_accumulation_steps x num_mini_batches` with the first fix alone) and scales each micro-batch's loss
      by its inverse, while accelerate steps every `gradient_accumulation_steps`: gradients `num_mini_batches` times
      too small, so `max_grad_norm` clips `num_mini_batches` times looser (measured: ZeRO-2, 2 mini-batches, the
      engine's count 2 where 1 is right).
    Observable: the optimizer steps per rollout; expected `num_ppo_epochs x num_mini_batches`.

    Fix: the rollout is sized with the accumulation counted once per mini-batch (`gradient_accumulation_steps x
    num_mini_batches` while TRL's `__init__` sizes the batches), accelerate accumulates over one mini-batch (and so
    does a DeepSpeed engine: `set_train_batch_size`), and does not sync at the end of the dataloader.
    """

    def __init__(self, *args, **kwargs):
        config = kwargs["args"] if "args" in kwargs else args[0]
        accumulation = config.gradient_accumulation_steps
        config.gradient_accumulation_steps = accumulation * config.num_mini_batches
        try:
            super().__init__(*args, **kwargs)
        finally:
            config.gradient_accumulation_steps = accumulation  # train() sizes its per-micro-batch statistics by it
        self.accelerator.gradient_accumulation_steps = accumulation
        self.accelerator.gradient_state.plugin_kwargs["sync_with_dataloader"] = False
        if getattr(self, "is_deepspeed_enabled", False):
            # DeepSpeed scales the loss by its own accumulation count, taken from the accelerator at prepare()
            engine = self.model
            engine.set_train_batch_size(
                engine.train_micro_batch_size_per_gpu() * accumulation * self.accelerator.num_processes)


class SavePolicyUnderDDP:
    """Checkpoints and the final model of a multi-process run hold the policy, loadable with `from_pretrained`.

    TRL 1.12 reads the policy and its config off `self.model`, which accelerate wraps in `DistributedDataParallel`
    in a multi-process run, and DDP hides both (huggingface/trl#2375):
    - `PPOTrainer._save_checkpoint` first writes a model card from `self.model.config`: `AttributeError:
      'DistributedDataParallel' object has no attribute 'config'` at the first checkpoint;
    - `PPOTrainer.save_model` keeps only the policy `if hasattr(self.model, "policy")`, false under DDP: transformers
      then saves the state dict of the whole policy-and-value wrapper, which safetensors refuses where the policy
      ties its embeddings (`RuntimeError: Some tensors share memory`), and which is otherwise a bare state dict, no
      config.json, that no model loads.
    And `PPOTrainer.__init__` does not call transformers' `Trainer.__init__`, which sets
    `is_distributed_loading_by_transformers`: transformers 5's `Trainer._save` reads it in every process but the
    first (`AttributeError` there).

    Fix: both save with the DDP wrapper taken off `self.model` (and put back after); the attribute is False.
    """

    is_distributed_loading_by_transformers = False

    def _save_checkpoint(self, model, trial):
        with self._without_ddp_wrapper():
            super()._save_checkpoint(model, trial)

    def save_model(self, output_dir=None, _internal_call=False):
        with self._without_ddp_wrapper():
            super().save_model(output_dir, _internal_call)

    @contextmanager
    def _without_ddp_wrapper(self):
        from torch.nn.parallel import DistributedDataParallel

        wrapped = self.model
        if isinstance(wrapped, DistributedDataParallel):
            self.model = wrapped.module
        try:
            yield
        finally:
            self.model = wrapped


class LoraReferenceUnderDDP:
    """With LoRA, the reference log-probs of a multi-process run come from the policy with its adapter disabled.

    TRL 1.12 has no reference model with LoRA: `PPOTrainer.train()` computes the reference as
    `forward(model.policy, ...)` under `self.null_ref_context()`, which disables the adapter of
    `self.model.policy`. Under DDP both read `.policy` through the wrapper: `AttributeError:
    'DistributedDataParallel' object has no attribute 'policy'` at the first rollout.

    Fix: before training, the DDP wrapper gets the policy as a plain attribute, not a registered submodule: DDP's
    parameters and state dict stay as they are, and the reference forward runs under no_grad, where DDP has no
    gradients to synchronise.
    """

    def train(self):
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(self.model, DistributedDataParallel):
            object.__setattr__(self.model, "policy", self.model.module.policy)
        return super().train()


class SavePolicyUnderDeepSpeed:
    """Under DeepSpeed, checkpoints and the final model hold the policy, loadable with `from_pretrained`.

    TRL 1.12, `PPOTrainer.save_model`: under DeepSpeed it sets `self.deepspeed = self.model` (the bare policy, not a
    DeepSpeed engine) and calls transformers' `Trainer.save_model`, which reads the engine's config:
    `AttributeError: 'LlamaConfig' object has no attribute 'get'` at the first checkpoint, under ZeRO-2 and ZeRO-3.

    Fix: the weights are gathered from the engine (every process takes part: ZeRO-3 gathers its shards), and the main
    process saves the policy's part with the policy's `save_pretrained` (with LoRA, the adapter).
    """

    def save_model(self, output_dir=None, _internal_call=False):
        if not self.is_deepspeed_enabled:
            return super().save_model(output_dir, _internal_call)
        output_dir = output_dir or self.args.output_dir
        weights = self.accelerator.get_state_dict(self.deepspeed)
        policy = self.accelerator.unwrap_model(self.deepspeed).policy
        if self.args.should_save:
            policy.save_pretrained(output_dir, state_dict={name.removeprefix("policy."): tensor
                                                           for name, tensor in weights.items()
                                                           if name.startswith("policy.")})


class PatchedPPOTrainer(SavePolicyUnderDeepSpeed, OneOptimizerStepPerMiniBatch, SavePolicyUnderDDP,
                        LoraReferenceUnderDDP, PPOTrainer):
    """TRL 1.12's `PPOTrainer` with the four fixes above."""
