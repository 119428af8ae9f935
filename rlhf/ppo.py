"""What PPO needs beyond TRL 1.12's `trl.experimental.ppo.PPOTrainer`: reward functions, adaptive KL, resume, a
saved value model.

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
  no completion length, which is where length hacking shows;
- `objective/advantages_zeroed`: the share of processes whose rollout had no reward signal (every completion scored
  the same) and was trained on with advantages of 0 (`--skip_rollouts_without_signal`), said once on the console;
- `PPORewards`: GRPO's `--reward_funcs` (the verifier, a user's function, the reward model) and `--reward_weights`
  in the reward model's place, each function logged as `rewards/<name>/mean` and `std`, as GRPO logs it.
"""

import contextlib
import json
from pathlib import Path

import torch

from rlhf.errors import UserError
from rlhf.trl_compat import PPOTrainerHooks, reward_model_scores

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


def value_model_source(training_args, policy_path):
    """Where the value model starts: --value_model_path, else the reward model when it scores (its head already
    reads these completions), else the policy (a new one-output head on its body)."""
    if training_args.value_model_path:
        return training_args.value_model_path
    return training_args.reward_model_name_or_path if "reward_model" in training_args.reward_funcs else policy_path


def load_ppo_models(model_args, training_args, tokenizer, resume_from=None):
    """The policy, its frozen reference (None with LoRA: the policy with its adapter off), the frozen reward model
    (None when --reward_funcs has no reward_model) and the value model, for `tokenizer`'s pad token. Resuming, full
    weights come from the checkpoint `resume_from` (a LoRA adapter is loaded by `ResumablePPOTrainer.resume`). Call it
    after `run.record()`: the policy starts from `trainable_model_path`, which merges an adapter into the output
    folder."""
    from transformers import AutoModelForCausalLM

    from rlhf.models import (
        load_kwargs,
        load_sequence_classifier,
        reward_model_dtype,
        trainable_model_path,
        trained_model_kwargs,
    )
    from rlhf.processes import is_main_process, on_gpu
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
    reward_model = None
    if "reward_model" in training_args.reward_funcs:
        gpu = on_gpu(training_args.use_cpu)
        scorer_dtype = reward_model_dtype(training_args.reward_model_dtype, model_args.dtype, gpu)
        reward_model, _ = load_reward_model(reward_path, scorer_dtype, trust)
        reward_model.config.pad_token_id = pad  # it reads the policy's ids (check_same_tokenizer)
    value_source = Path(resume_from) / VALUE_MODEL_DIR if resume_from else value_model_source(training_args, start)
    if not resume_from and not training_args.value_model_path and value_source == start and is_main_process():
        # transformers reports the new head as MISSING weights: say why
        print(f"value model: the policy {model_args.model_name_or_path} with a new one-output head (no reward model "
              "scores; --value_model_path starts it elsewhere)", flush=True)
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


class PPORewards(torch.nn.Module):
    """GRPO's reward functions, summed with their weights, in the place of PPO's reward model.

    TRL's PPO scores a rollout's token ids with a sequence classifier (`rlhf.trl_compat.ppo`, `_get_reward`). Here the
    completions are decoded as GRPO decodes them (special tokens dropped, one assistant message each) and passed with
    their prompt conversation and every other column of their dataset row (e.g. `ground_truth`) to each function, in
    TRL's reward-function signature; `reward_model` scores the policy's token ids as TRL does.

    `funcs`: from `rlhf.reward_funcs.load_reward_funcs`, one per name (the reward model itself for `reward_model`);
    `prompts`: the prompt dataset (`build_prompt_dataset`), `token_ids`: its rows as PPO's input ids, in its order.
    """

    def __init__(self, names, funcs, weights, tokenizer, prompts, token_ids):
        super().__init__()
        self.names, self.funcs, self.weights = list(names), list(funcs), list(weights or [1.0] * len(names))
        self.reward_model = funcs[self.names.index("reward_model")] if "reward_model" in self.names else None
        self.tokenizer = tokenizer
        self.rows = prompts.to_list()
        self.row_of = {tuple(ids): i for i, ids in enumerate(token_ids)}  # a batch's prompt ids -> its dataset row
        self.recorded = {name: [] for name in self.names}  # each function's scores since the last log
        self.recording = True  # off while the policy generates aside (TRL's sample table)
        self.trainer_state = None  # set by the trainer: a callable giving its state (reward functions get it)

    def score_completions(self, query_responses, context_length):
        """The weighted sum of the functions' scores of each sequence (prompt left-padded, then the completion,
        padded after its stop token)."""
        pad = self.tokenizer.pad_token_id
        total = torch.zeros(len(query_responses), device=query_responses.device)
        inputs = None
        for name, func, weight in zip(self.names, self.funcs, self.weights):
            if name == "reward_model":
                values = reward_model_scores(self.reward_model, query_responses, pad, context_length).float()
            else:
                inputs = inputs or self._function_inputs(query_responses, context_length)
                values = torch.tensor(func(**inputs), dtype=torch.float32, device=total.device)
            if self.recording:
                self.recorded[name].append(values)
            total += weight * values
        return total

    def _function_inputs(self, query_responses, context_length):
        """What a reward function receives for these sequences: prompts, completions and the rows' other columns."""
        pad = self.tokenizer.pad_token_id
        rows = []
        for ids in query_responses[:, :context_length].tolist():
            start = next((i for i, token in enumerate(ids) if token != pad), len(ids))  # after the left padding
            rows.append(self.rows[self.row_of[tuple(ids[start:])]])
        texts = self.tokenizer.batch_decode(query_responses[:, context_length:], skip_special_tokens=True)
        columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
        state = self.trainer_state() if self.trainer_state else None
        return {"prompts": [row["prompt"] for row in rows],
                "completions": [[{"role": "assistant", "content": text}] for text in texts],
                "trainer_state": state, **columns}

    def recorded_metrics(self, gather):
        """`rewards/<name>/mean` and `std` of the scores since the last call, over all processes (`gather`)."""
        metrics = {}
        for name, values in self.recorded.items():
            if values:
                scores = gather(torch.cat(values))
                metrics[f"rewards/{name}/mean"] = scores.mean().item()
                metrics[f"rewards/{name}/std"] = scores.std().item() if len(scores) > 1 else 0.0
            self.recorded[name] = []
        return metrics


class ResumablePPOTrainer(PPOTrainerHooks):
    """TRL's PPOTrainer with adaptive KL, completion lengths in the logs, resume, and a saved value model.

    Reads `target_kl` and `kl_horizon` from its `args` (config.PPOTrainingConfig).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lengths, self._clipped = [], []  # of the completions generated since the last log
        self._said_zeroed = False  # the console line on a rollout without signal comes once
        self.rewards = kwargs.get("reward_model") if isinstance(kwargs.get("reward_model"), PPORewards) else None
        if self.rewards is not None:
            self.rewards.trainer_state = lambda: self.state

    def record_completions(self, completions, stop_token_id):
        lengths, clipped = completion_lengths(completions, stop_token_id)
        self._lengths.append(lengths)
        self._clipped.append(clipped)

    def log(self, logs, *args, **kwargs):
        """Add the KL coefficient and completion lengths to a training step's metrics; then adapt the coefficient."""
        if "objective/kl" in logs:  # a training step's metrics, logged by every process
            logs["objective/kl_coef"] = self.kl_coef  # the coefficient this batch was trained with
            logs["objective/advantages_zeroed"] = self._advantages_zeroed_share(logs)
            if self._lengths:
                logs.update(self._completion_metrics())
            if self.rewards is not None:
                logs.update(self.rewards.recorded_metrics(self.accelerator.gather_for_metrics))
            if self.args.target_kl:  # objective/kl is the mean over all processes: each adapts the same way
                self.kl_coef = adaptive_kl_coef(self.kl_coef, logs["objective/kl"], self.args.target_kl,
                                                self.args.batch_size, self.args.kl_horizon)
        super().log(logs, *args, **kwargs)

    def _advantages_zeroed_share(self, logs):
        """The share of processes whose last rollout had no signal (call it in every process); said once."""
        zeroed = torch.tensor([float(self.advantages_zeroed)], device=self.accelerator.device)
        share = self.accelerator.gather_for_metrics(zeroed).mean().item()
        if share and not self._said_zeroed and self.accelerator.is_main_process:
            self._said_zeroed = True
            print(f"PPO step {self.state.global_step}: every completion of a rollout scored the same "
                  f"(objective/scores {logs['objective/scores']:.3g}): no reward signal, so its advantages are 0 and "
                  "the policy takes no step from it (said once; objective/advantages_zeroed counts them; "
                  "--skip_rollouts_without_signal false trains on them as TRL does)", flush=True)
        return share

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

    @contextlib.contextmanager
    def generating_aside(self):
        recording = self.rewards is not None and self.rewards.recording
        if self.rewards is not None:
            self.rewards.recording = False
        try:
            with super().generating_aside():
                yield
        finally:
            if self.rewards is not None:
                self.rewards.recording = recording

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
