"""What train_ppo.py needs around the trainer (`rlhf.ppo.trainer.PPOTrainer`): the tokenizer check, the models
loaded, and `PPORewards`: GRPO's `--reward_funcs` (the verifier, a user's function, the reward model) and
`--reward_weights` in the reward model's place, each function logged as `rewards/<name>/mean` and `std`, as GRPO logs
it.
"""

import torch

from rlhf.errors import UserError
from rlhf.ppo.maths import close_turns, get_reward
from rlhf.rewards.reward_model import turn_end_ids


def check_same_tokenizer(tokenizer, path, what, flag, trust_remote_code=False):
    """Refuse a reward or value model whose tokenizer differs from the policy's: PPO feeds it the policy's ids."""
    from rlhf.rewards.reward_model import scorer_tokenizer

    other = scorer_tokenizer(path, trust_remote_code, what, template=False)
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


def has_trained_head(path, trust_remote_code=False):
    """Whether a value model loaded from `path` keeps a trained one-output head (a reward model's, or a LoRA adapter of
    one), rather than getting a new head on a causal LM's body."""
    from rlhf.models import adapter_config, model_config

    adapter = adapter_config(path)
    if adapter is not None:
        return adapter.get("task_type") == "SEQ_CLS"
    config = model_config(path, trust_remote_code, "value model")
    architectures = (config.architectures or []) if config is not None else []
    return any(name.endswith("ForSequenceClassification") for name in architectures)


def load_ppo_models(model_args, training_args, tokenizer, resuming=False):
    """The policy, its frozen reference (None with LoRA: the policy with its adapter off), the frozen reward model
    (None when --reward_funcs has no reward_model) and the value model, for `tokenizer`'s pad token, as a run starts
    (`resuming`: the trained weights then come from the checkpoint, in `PPOTrainer.train`). Call it after
    `run.record()`: the policy starts from `trainable_model_path`, which merges an adapter into the output folder."""
    from transformers import AutoModelForCausalLM

    from rlhf.models import (
        load_kwargs,
        load_sequence_classifier,
        reward_model_dtype,
        trainable_model_path,
        trained_model_kwargs,
    )
    from rlhf.processes import is_main_process, on_gpu
    from rlhf.rewards.reward_model import load_reward_model

    trust = training_args.trust_remote_code
    reward_path = training_args.reward_model_name_or_path
    start = trainable_model_path(model_args.model_name_or_path, training_args.output_dir, trust)
    pad = tokenizer.pad_token_id  # every model is built with it: see load_kwargs
    policy = AutoModelForCausalLM.from_pretrained(start, **trained_model_kwargs(model_args, trust, pad))
    ref_policy = None if model_args.use_peft else AutoModelForCausalLM.from_pretrained(
        start, **load_kwargs(model_args.dtype, trust, pad_token_id=pad))
    reward_model = None
    if "reward_model" in training_args.reward_funcs:
        gpu = on_gpu(training_args.use_cpu)
        scorer_dtype = reward_model_dtype(training_args.reward_model_dtype, model_args.dtype, gpu)
        reward_model, _ = load_reward_model(reward_path, scorer_dtype, trust, template=False)  # it reads token ids
        reward_model.config.pad_token_id = pad  # it reads the policy's ids (check_same_tokenizer)
    value_source = value_model_source(training_args, start)
    if not resuming and not training_args.value_model_path and value_source == start and is_main_process():
        # transformers reports the new head as MISSING weights: say why
        head = "at 0" if training_args.value_head_init == "zero" else "(random)"
        print(f"value model: the policy {model_args.model_name_or_path} with a new one-output head {head} (no reward "
              "model scores; --value_model_path starts it elsewhere)", flush=True)
    elif not resuming and training_args.value_head_init == "zero" and has_trained_head(value_source, trust):
        if is_main_process():  # a trained head is never set to 0 without a word
            print(f"note: --value_head_init zero sets the trained head of the value model's start {value_source} to 0 "
                  "(its body is kept); without the flag the value model starts from that head as trained", flush=True)
    value_model = load_sequence_classifier(value_source, model_args.dtype, trust, pad)
    if not resuming and training_args.value_head_init == "zero":
        torch.nn.init.zeros_(value_model.score.weight)  # every value 0 until the value model learns
        if value_model.score.bias is not None:
            torch.nn.init.zeros_(value_model.score.bias)
    # Finished completions are filled with pad, not EOS, so that val/num_eos_tokens counts completions that ended.
    policy.generation_config.pad_token_id = tokenizer.pad_token_id
    return policy, ref_policy, reward_model, value_model


class PPORewards(torch.nn.Module):
    """GRPO's reward functions, summed with their weights, in the place of PPO's reward model.

    PPO scores a rollout's token ids with a sequence classifier (`rlhf.ppo.maths.score_completions`). Here the
    completions are decoded as GRPO decodes them (special tokens dropped, one assistant message each) and passed with
    their prompt conversation and every other column of their dataset row (e.g. `ground_truth`) to each function, in
    TRL's reward-function signature; `reward_model` scores the policy's token ids as TRL does.

    `funcs`: from `rlhf.rewards.functions.load_reward_funcs`, one a name (the reward model itself for `reward_model`);
    `prompts`: the prompt dataset (`build_prompt_dataset`), `token_ids`: its rows as PPO's input ids, in its order;
    `stop_token_ids`: the run's (`rlhf.models.stop_token_ids`).
    """

    def __init__(self, names, funcs, weights, tokenizer, prompts, token_ids, stop_token_ids):
        super().__init__()
        from rlhf.rewards.functions import logged_name

        self.names = [logged_name(name) for name in names]  # as GRPO logs them: rewards/<name>/mean
        self.funcs, self.weights = list(funcs), list(weights or [1.0] * len(names))
        self.reward_model = funcs[self.names.index("reward_model")] if "reward_model" in self.names else None
        self.tokenizer = tokenizer
        self.stop_token_ids = set(stop_token_ids)
        self.turn_end = turn_end_ids(tokenizer)  # the reward model reads a cut-off completion's score after them
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
                closed = close_turns(query_responses, context_length, self.stop_token_ids, self.turn_end, pad)
                values = get_reward(self.reward_model, closed, pad, context_length)[1].float()
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
        # as TRL's GRPO passes them: each completion's ids up to and including its first stop token (all of them if
        # it has none)
        ids = []
        for row in query_responses[:, context_length:].tolist():
            end = next((i for i, token in enumerate(row) if token in self.stop_token_ids), len(row) - 1)
            ids.append(row[: end + 1])
        return {"prompts": [row["prompt"] for row in rows],
                "completions": [[{"role": "assistant", "content": text}] for text in texts],
                "completion_ids": ids, "trainer_state": state, **columns}

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
