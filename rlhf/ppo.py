"""What PPO needs beyond TRL 1.12's `trl.experimental.ppo.PPOTrainer`: adaptive KL, resume, a saved value model.

TRL's `PPOTrainer.train()` is one loop that always starts at step 0 and saves only the policy. Without copying
that loop, and through the named hooks of `rlhf.trl_compat.ppo.PPOTrainerHooks` (this module touches nothing
private of TRL's), `ResumablePPOTrainer` adds:
- checkpoints that also hold the value model and the live KL coefficient (written before TRL's
  `trainer_state.json`, which marks a checkpoint complete);
- `resume(checkpoint)`: optimizer, scheduler, RNG and KL coefficient are restored, the step and episode counters
  continue where they stopped, the rest of the interrupted epoch comes next, and the run ends at the same
  episode count as an uninterrupted one;
- adaptive KL: with `--target_kl`, the KL coefficient follows a target KL (Ziegler et al. 2019); it is logged as
  `objective/kl_coef` at every step either way;
- `completions/mean_length`, `min_length`, `max_length` and `clipped_ratio`, under GRPO's names: TRL's PPO logs
  no completion length, which is where length hacking shows.
"""

import json
from pathlib import Path

from rlhf.errors import UserError
from rlhf.trl_compat import PPOTrainerHooks

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


def load_ppo_models(model_args, training_args, tokenizer, resume_from=None):
    """The policy, its frozen reference (None with LoRA: the policy with its adapter off), the frozen reward model
    and the value model, for `tokenizer`'s pad token. Resuming, full weights come from the checkpoint `resume_from`
    (a LoRA adapter is loaded by `ResumablePPOTrainer.resume`). Call it after `record_launch`: the policy starts from
    `trainable_model_path`, which merges an adapter into the output folder."""
    from transformers import AutoModelForCausalLM

    from rlhf.models import (
        load_kwargs,
        load_sequence_classifier,
        reward_model_dtype,
        trainable_model_path,
        trained_model_kwargs,
    )
    from rlhf.processes import on_gpu
    from rlhf.reward import load_reward_model

    trust = training_args.trust_remote_code
    reward_path = training_args.reward_model_name_or_path
    start = trainable_model_path(model_args.model_name_or_path, training_args.output_dir, trust)
    full_resume = resume_from and not model_args.use_peft
    pad = tokenizer.pad_token_id  # every model is built with it: see load_kwargs
    policy_weights = trained_model_kwargs(model_args, trust, pad)
    policy = AutoModelForCausalLM.from_pretrained(resume_from if full_resume else start, **policy_weights)
    ref_policy = None if model_args.use_peft else AutoModelForCausalLM.from_pretrained(
        start, **load_kwargs(model_args.dtype, trust, pad_token_id=pad))
    gpu = on_gpu(training_args.use_cpu)
    scorer_dtype = reward_model_dtype(training_args.reward_model_dtype, model_args.dtype, gpu)
    reward_model, _ = load_reward_model(reward_path, scorer_dtype, trust)
    reward_model.config.pad_token_id = pad  # it reads the policy's ids (check_same_tokenizer)
    value_source = (
        Path(resume_from) / VALUE_MODEL_DIR if resume_from else training_args.value_model_path or reward_path
    )
    value_model = load_sequence_classifier(value_source, model_args.dtype, trust, pad)
    # Finished completions are filled with pad, not EOS, so that val/num_eos_tokens counts completions that ended.
    policy.generation_config.pad_token_id = tokenizer.pad_token_id
    return policy, ref_policy, reward_model, value_model


def adaptive_kl_coef(coef, kl, target, n_steps, horizon):
    """One update of the adaptive KL controller (Ziegler et al. 2019, as in OpenRLHF).

    The coefficient moves toward keeping the measured KL at `target`: up when KL is above it, down when below.
    The proportional error is clipped to +-0.2, so one update changes the coefficient by at most
    0.2 * n_steps / horizon (n_steps: episodes in this batch; horizon: episodes over which to adapt).
    """
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)


def completion_lengths(completions, stop_token_id):
    """Per completion: its tokens up to and including the first stop token, and whether it has none (clipped).

    A clipped completion ran to --max_completion_length and counts whole. Without a stop token, all are clipped.
    """
    import torch

    stops = torch.zeros_like(completions, dtype=torch.bool) if stop_token_id is None else completions == stop_token_id
    clipped = ~stops.any(dim=1)
    first_stop = stops.int().argmax(dim=1)  # the first True (0 where there is none)
    return torch.where(clipped, completions.shape[1], first_stop + 1), clipped


class ResumablePPOTrainer(PPOTrainerHooks):
    """TRL's PPOTrainer with adaptive KL, completion lengths in the logs, resume, and a saved value model.

    Reads `target_kl` and `kl_horizon` from its `args` (config.PPOTrainingConfig).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lengths, self._clipped = [], []  # of the completions generated since the last log

    def record_completions(self, completions, stop_token_id):
        lengths, clipped = completion_lengths(completions, stop_token_id)
        self._lengths.append(lengths)
        self._clipped.append(clipped)

    def log(self, logs, *args, **kwargs):
        """Add the KL coefficient and completion lengths to a training step's metrics; then adapt the coefficient."""
        if "objective/kl" in logs:  # a training step's metrics, logged by every process
            logs["objective/kl_coef"] = self.kl_coef  # the coefficient this batch was trained with
            if self._lengths:
                logs.update(self._completion_metrics())
            if self.args.target_kl:  # objective/kl is the mean over all processes: each adapts the same way
                self.kl_coef = adaptive_kl_coef(self.kl_coef, logs["objective/kl"], self.args.target_kl,
                                                self.args.batch_size, self.args.kl_horizon)
        super().log(logs, *args, **kwargs)

    def _completion_metrics(self):
        """Lengths of the completions generated since the last log, over all processes (call it in every one)."""
        import torch

        lengths = self.accelerator.gather_for_metrics(torch.cat(self._lengths)).float()
        clipped = self.accelerator.gather_for_metrics(torch.cat(self._clipped)).float()
        self._lengths, self._clipped = [], []
        return {
            "completions/mean_length": lengths.mean().item(),
            "completions/min_length": lengths.min().item(),
            "completions/max_length": lengths.max().item(),
            "completions/clipped_ratio": clipped.mean().item(),
        }

    def save_extra_checkpoint_files(self, checkpoint):
        """The value model and the KL coefficient: TRL's checkpoints hold only the policy."""
        self.save_value_model(checkpoint / VALUE_MODEL_DIR)  # in every process: ZeRO-3 / FSDP gather its weights
        if self.args.should_save:
            (checkpoint / PPO_STATE).write_text(json.dumps({"kl_coef": self.kl_coef}) + "\n")

    def save_value_model(self, path):
        """Save the value model. Call it in every process: under ZeRO-3 or FSDP its weights are gathered from all."""
        weights = self.value_model_state_dict()
        if self.accelerator.is_main_process:
            self.trained_value_model.save_pretrained(path, state_dict=weights)

    def resume(self, checkpoint, load_adapter=False):
        """Restore optimizer, scheduler, RNG, KL coefficient and progress from `checkpoint`.

        Full weights (policy, value model) are loaded from the checkpoint before the trainer is built; a LoRA
        adapter is loaded here (`load_adapter`), once the trainer has wrapped the policy.
        """
        checkpoint = Path(checkpoint)
        if load_adapter:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.trained_policy, load_file(checkpoint / "adapter_model.safetensors"))
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        self.restore_optimizer_scheduler_and_rng(checkpoint)
        self.kl_coef = json.loads((checkpoint / PPO_STATE).read_text(encoding="utf-8"))["kl_coef"]
        self.start_at_batch(state["global_step"])
