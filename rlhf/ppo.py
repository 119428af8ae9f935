"""What PPO needs beyond TRL 1.12's `trl.experimental.ppo.PPOTrainer`: adaptive KL, resume, a saved value model.

TRL's `PPOTrainer.train()` is one loop that always starts at step 0 and saves only the policy. Without copying
that loop, `ResumablePPOTrainer` adds:
- checkpoints that also hold the value model and the live KL coefficient (written before TRL's
  `trainer_state.json`, which marks a checkpoint complete);
- `resume(checkpoint)`: optimizer, scheduler, RNG and KL coefficient are restored, the step and episode counters
  continue where they stopped, the rest of the interrupted epoch comes next, and the run ends at the same
  episode count as an uninterrupted one;
- `AdaptiveKLCallback`: the KL coefficient follows a target KL (Ziegler et al. 2019), logged as
  `objective/kl_coef` at every step.
- `completions/mean_length`, `min_length`, `max_length` and `clipped_ratio`, under GRPO's names: TRL's PPO logs
  no completion length, which is where length hacking shows.
"""

import json
from contextlib import contextmanager
from pathlib import Path

from transformers import TrainerCallback

from rlhf.errors import UserError
from rlhf.trl_compat import PPOTrainer

VALUE_MODEL_DIR = "value_model"
PPO_STATE = "ppo_state.json"


def check_same_tokenizer(tokenizer, path, what, flag, trust_remote_code=False):
    """Refuse a reward or value model whose tokenizer differs from the policy's: PPO feeds it the policy's ids."""
    from transformers import AutoTokenizer

    from rlhf.models import tokenizer_source

    other = AutoTokenizer.from_pretrained(tokenizer_source(path), trust_remote_code=trust_remote_code)
    if other.get_vocab() != tokenizer.get_vocab():
        raise UserError(
            f"{what} {path} uses another tokenizer than the policy {tokenizer.name_or_path}, but PPO feeds it the "
            f"policy's token ids; pass a {flag} trained from the policy's base model, or use train_grpo.py, which "
            "scores with the reward model's own tokenizer"
        )


def adaptive_kl_coef(coef, kl, target, n_steps, horizon):
    """One update of the adaptive KL controller (Ziegler et al. 2019, as in OpenRLHF).

    The coefficient moves toward keeping the measured KL at `target`: up when KL is above it, down when below.
    The proportional error is clipped to +-0.2, so one update changes the coefficient by at most
    0.2 * n_steps / horizon (n_steps: episodes in this batch; horizon: episodes over which to adapt).
    """
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)


class AdaptiveKLCallback(TrainerCallback):
    """Logs the KL coefficient used for each batch and, with a target KL, adapts it for the next batch."""

    def __init__(self, target_kl=None, horizon=10_000):
        self.target_kl, self.horizon = target_kl, horizon

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "objective/kl" not in logs:
            return
        logs["objective/kl_coef"] = args.kl_coef  # the coefficient this batch was trained with
        if self.target_kl:
            args.kl_coef = adaptive_kl_coef(args.kl_coef, logs["objective/kl"], self.target_kl, args.batch_size,
                                            self.horizon)


def completion_lengths(completions, stop_token_id):
    """Per completion: its tokens up to and including the first stop token, and whether it has none (clipped).

    A clipped completion ran to --max_completion_length and counts whole. Without a stop token, all are clipped.
    """
    import torch

    stops = torch.zeros_like(completions, dtype=torch.bool) if stop_token_id is None else completions == stop_token_id
    clipped = ~stops.any(dim=1)
    first_stop = stops.int().argmax(dim=1)  # the first True (0 where there is none)
    return torch.where(clipped, completions.shape[1], first_stop + 1), clipped


class _SkipFirstBatches:
    """A dataloader whose first pass leaves out the first `skip` batches (the ones already trained on).

    The first pass is drawn at once, before the checkpoint's RNG state is restored: the RNG is then where it was
    when the interrupted run drew its first epoch, so in the first epoch the same batches are skipped. A run
    interrupted in a later epoch gets a fresh shuffle of that epoch, of which the same number is skipped.
    """

    def __init__(self, dataloader, skip):
        self.dataloader = dataloader
        self.first_pass = iter(dataloader)
        for _ in range(skip):
            next(self.first_pass, None)

    def __iter__(self):
        if self.first_pass is not None:
            iterator, self.first_pass = self.first_pass, None
            return iterator
        return iter(self.dataloader)

    def __len__(self):
        return len(self.dataloader)


class _RestoreProgress(TrainerCallback):
    """TRL's train() zeroes the counters before `on_train_begin`; put back those of the checkpoint."""

    def __init__(self, global_step, episode, max_steps):
        self.global_step, self.episode, self.max_steps = global_step, episode, max_steps

    def on_train_begin(self, args, state, control, **kwargs):
        state.global_step, state.episode, state.max_steps = self.global_step, self.episode, self.max_steps


class ResumablePPOTrainer(PPOTrainer):
    # transformers' Trainer.__init__ sets this, but TRL's PPOTrainer does not call it; saving reads it in every
    # process but the first of a multi-process run.
    is_distributed_loading_by_transformers = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # TRL generates inside its train() loop; wrapping the policy's generate() is how we see the completions.
        self._lengths, self._clipped, self._recording = [], [], True
        policy = self.accelerator.unwrap_model(self.model).policy
        generate = policy.generate

        def recording_generate(input_ids, **kwargs):
            output = generate(input_ids=input_ids, **kwargs)
            if self._recording:
                lengths, clipped = completion_lengths(output.sequences[:, input_ids.shape[1]:], self.stop_token_id)
                self._lengths.append(lengths)
                self._clipped.append(clipped)
            return output

        policy.generate = recording_generate

    def generate_completions(self, sampling=False):
        self._recording = False  # TRL's sample table, drawn between steps: not training completions
        try:
            super().generate_completions(sampling)
        finally:
            self._recording = True

    def log(self, logs, *args, **kwargs):
        if "objective/kl" in logs and self._lengths:  # a training step's metrics, logged by every process
            import torch

            lengths = self.accelerator.gather_for_metrics(torch.cat(self._lengths)).float()
            clipped = self.accelerator.gather_for_metrics(torch.cat(self._clipped)).float()
            self._lengths, self._clipped = [], []
            logs["completions/mean_length"] = lengths.mean().item()
            logs["completions/min_length"] = lengths.min().item()
            logs["completions/max_length"] = lengths.max().item()
            logs["completions/clipped_ratio"] = clipped.mean().item()
        super().log(logs, *args, **kwargs)

    def _save_checkpoint(self, model, trial):
        # The value model and KL coefficient go in first: TRL writes trainer_state.json last, marking completion.
        checkpoint = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        self.save_value_model(checkpoint / VALUE_MODEL_DIR)  # in every process: ZeRO-3 / FSDP gather its weights
        if self.args.should_save:
            (checkpoint / PPO_STATE).write_text(json.dumps({"kl_coef": self.args.kl_coef}) + "\n")
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

    def save_value_model(self, path):
        """Save the value model. Call it in every process: under ZeRO-3 or FSDP its weights are gathered from all."""
        state_dict = self.accelerator.get_state_dict(self.model)  # policy.* and value_model.*, unsharded
        if self.accelerator.is_main_process:
            prefix = "value_model."
            weights = {name.removeprefix(prefix): tensor for name, tensor in state_dict.items()
                       if name.startswith(prefix)}
            self.accelerator.unwrap_model(self.model).value_model.save_pretrained(path, state_dict=weights)

    def resume(self, checkpoint, load_adapter=False):
        """Restore optimizer, scheduler, RNG, KL coefficient and progress from `checkpoint`.

        Full weights (policy, value model) are loaded from the checkpoint before the trainer is built; a LoRA
        adapter is loaded here (`load_adapter`), once the trainer has wrapped the policy.
        """
        checkpoint = Path(checkpoint)
        if load_adapter:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            policy = self.accelerator.unwrap_model(self.model).policy
            set_peft_model_state_dict(policy, load_file(checkpoint / "adapter_model.safetensors"))
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        done = state["global_step"]
        self.dataloader = _SkipFirstBatches(self.dataloader, done % len(self.dataloader))
        import torch

        # weights_only: these are plain tensors and numbers, nothing is unpickled beyond that.
        device = self.accelerator.device
        self.optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", map_location=device, weights_only=True))
        self.lr_scheduler.load_state_dict(torch.load(checkpoint / "scheduler.pt", weights_only=True))
        self._load_rng_state(str(checkpoint))
        self.args.kl_coef = json.loads((checkpoint / PPO_STATE).read_text(encoding="utf-8"))["kl_coef"]
        total = self.args.num_total_batches
        self.args.num_total_batches = total - done  # TRL's loop counts from 1 to this
        self.add_callback(_RestoreProgress(done, done * self.args.batch_size, total))
