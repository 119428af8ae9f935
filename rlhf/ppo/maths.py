# Copyright 2020-2026 The HuggingFace Team. All rights reserved.
# Changed in 2026 by the rlhf-trl-scripts authors from TRL 1.12.0 (the files the docstring names).
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""PPO's maths and the models' passes, as functions: what `rlhf.ppo.trainer.PPOTrainer` computes a rollout with.

Copied from TRL 1.12.0 (huggingface/trl, Apache-2.0) with the trainer: `trl/experimental/ppo/ppo_trainer.py`
(`generate`, `batch_generation`, `truncate_response`, `forward`, `masked_mean/whiten`), `trl/experimental/utils.py`
(`get_reward`, `first_true_indices`, `peft_module_casting_to_bf16`) and `trl/trainer/utils.py`
(`selective_log_softmax`, as 1.12 has it), and TRL's inline maths as functions: KL-shaped rewards, GAE, the clipped
losses, entropy, each unit-tested on values worked out by hand (tests/test_ppo.py).
"""

import copy

import torch

from rlhf.trl_compat import pad

# ---- The maths, as pure functions ----


def selective_log_softmax(logits, index):
    """log_softmax(logits)[index] per position, without keeping the whole log-softmax of a float32 batch."""
    if logits.dtype in [torch.float32, torch.float64]:
        selected_logits = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
        # loop to reduce peak mem consumption
        logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        return selected_logits - logsumexp_values  # log_softmax(x_i) = x_i - logsumexp(x)
    per_token_logps = []  # logsumexp approach is unstable with bfloat16, fall back to slightly less efficient approach
    for row_logits, row_labels in zip(logits, index, strict=True):  # loop to reduce peak mem consumption
        row_logps = torch.nn.functional.log_softmax(row_logits, dim=-1)
        per_token_logps.append(row_logps.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1))
    return torch.stack(per_token_logps)


def first_true_indices(bools, dtype=torch.long):
    """The position of the first True in each row of `bools`, the row's length where there is none."""
    row_len = bools.size(-1)
    zero_or_index = row_len * (~bools).type(dtype) + torch.arange(row_len, dtype=dtype, device=bools.device)
    return torch.min(zero_or_index, dim=-1).values


def stop_mask(tokens, stop_token_ids):
    """Where `tokens` holds one of `stop_token_ids` (a run may stop at several ids; with none, nowhere)."""
    return torch.isin(tokens, torch.tensor(list(stop_token_ids), dtype=tokens.dtype, device=tokens.device))


def truncate_response(stop_token_ids, pad_token_id, responses):
    """Each response with every token after its first stop token (any of `stop_token_ids`) replaced by
    `pad_token_id`."""
    trunc_idxs = first_true_indices(stop_mask(responses, stop_token_ids)).unsqueeze(-1)
    new_size = [1] * (len(responses.size()) - 1) + [responses.shape[1]]
    idxs = torch.arange(responses.shape[1], device=responses.device).view(*new_size)
    return torch.masked_fill(responses, idxs > trunc_idxs, pad_token_id)


def close_turns(query_responses, context_length, stop_token_ids, turn_end, pad_token_id):
    """`query_responses` (completions padded after their first stop token) with `turn_end`, the chat template's end of
    an assistant turn (`rlhf.rewards.reward_model.turn_end_ids`), written after each completion that has no stop token
    (cut off at the length limit): a reward model then reads its score at the end of the turn, as GRPO's scorer and
    the evaluation read it, not at a token in mid-sentence. Ended completions are left as they are."""
    completions = query_responses[:, context_length:]
    cut_off = ~stop_mask(completions, stop_token_ids).any(dim=1)
    if not turn_end or not cut_off.any():
        return query_responses
    closed = torch.cat((query_responses, torch.full((len(query_responses), len(turn_end)), pad_token_id,
                                                    dtype=query_responses.dtype, device=query_responses.device)), 1)
    rows = cut_off.nonzero().squeeze(1)
    ends = context_length + first_true_indices(completions == pad_token_id)[rows]  # after each completion's last token
    for offset, token in enumerate(turn_end):
        closed[rows, ends + offset] = token
    return closed


def masked_mean(values, mask, axis=None):
    if axis is not None:
        return (values * mask).sum(axis=axis) / mask.sum(axis=axis)
    return (values * mask).sum() / mask.sum()


def masked_whiten(values, mask, shift_mean=True, total=None):
    """`values` scaled to mean 0 and variance 1 over `mask` (with `shift_mean=False`, the mean is kept).

    The mean and the (unbiased) variance are those of the whole rollout, every process's positions together:
    `total` sums a tensor over all processes (`accelerator.reduce(..., "sum")`); each process whitens its own slice
    with them. TRL whitened each process's slice alone, so a slice that scored flat blew value-model noise and the KL
    term up to unit size. Without `total` (one process) the operations are TRL's `masked_mean`/`masked_var`, in the
    same order: the same bits.
    """
    total = total or (lambda tensor: tensor)
    count = total(mask.sum())
    mean = total((values * mask).sum()) / count
    variance = total(((values - mean) ** 2 * mask).sum()) / count
    if count <= 1:
        raise ValueError(f"cannot whiten over {int(count)} position(s); the rollout needs more completion tokens")
    variance = variance * (count / (count - 1))  # Bessel's correction, as masked_var
    whitened = (values - mean) * torch.rsqrt(variance + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened


def kl_penalized_rewards(scores, logprobs, ref_logprobs, sequence_lengths, kl_coef, kl_estimator="k1"):
    """Per-token rewards of a rollout: -kl_coef x KL(policy || reference) at every token, plus each completion's score
    at its last token. Returns (rewards, kl, the KL part alone).

    The KL is estimated from the sampled token, with r = p_ref / p: k1 = -log r = log p - log p_ref (unbiased), k3 =
    (r - 1) - log r (unbiased, lower variance, never negative; http://joschu.net/blog/kl-approx.html). The score goes
    one position after the completion's last token (where the value model reads the sequence that includes it), or at
    the last position when the completion fills the whole length.
    """
    if kl_estimator not in ("k1", "k3"):
        raise ValueError(f"kl_estimator must be k1 or k3, got {kl_estimator!r}")
    logr = ref_logprobs - logprobs
    kl = -logr if kl_estimator == "k1" else (logr.exp() - 1) - logr
    non_score_reward = -kl_coef * kl
    rewards = non_score_reward.clone()
    rows = torch.arange(rewards.size(0), device=rewards.device)
    after_last = sequence_lengths + 1
    ends = torch.where(after_last < rewards.size(1), after_last, sequence_lengths)
    rewards[rows, ends] += scores
    return rewards, kl, non_score_reward


def gae(rewards, values, gamma, lam, value_lam=None):
    """Generalized advantage estimation (Schulman et al. 2016), from the last token back:
    delta_t = r_t + gamma V_{t+1} - V_t,  A_t = delta_t + gamma lam A_{t+1}  (V and A are 0 past the end).
    Returns (advantages, returns = A + V, what the value model learns).

    With `value_lam` (decoupled GAE, VC-PPO / VAPO: arXiv 2503.01491, 2504.05118), the returns are A' + V with A'
    GAE's at `value_lam`: at 1.0 (and gamma 1) the sum of the rewards still to come, a target that does not lean on
    the value model's own estimates; the policy's advantages keep `lam`."""
    advantages = _gae_advantages(rewards, values, gamma, lam)
    if value_lam is None or value_lam == lam:
        return advantages, advantages + values
    return advantages, _gae_advantages(rewards, values, gamma, value_lam) + values


def _gae_advantages(rewards, values, gamma, lam):
    lastgaelam = 0
    advantages_reversed = []
    length = rewards.shape[1]
    for t in reversed(range(length)):
        nextvalues = values[:, t + 1] if t < length - 1 else 0.0
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam = delta + gamma * lam * lastgaelam
        advantages_reversed.append(lastgaelam)
    return torch.stack(advantages_reversed[::-1], axis=1)


def clipped_value_loss(predicted, old_values, returns, cliprange_value, mask):
    """The value model's loss: half the squared error to the returns, the prediction also clipped to within
    `cliprange_value` of the rollout's value and the larger of the two errors kept (PPO2's value clipping), averaged
    over `mask`. Returns (loss, the share of positions where the clipped error was the larger)."""
    clipped = torch.clamp(predicted, old_values - cliprange_value, old_values + cliprange_value)
    unclipped_loss = torch.square(predicted - returns)
    clipped_loss = torch.square(clipped - returns)
    loss = 0.5 * masked_mean(torch.max(unclipped_loss, clipped_loss), mask)
    return loss, masked_mean((clipped_loss > unclipped_loss).float(), mask)


def clipped_policy_loss(logprobs, old_logprobs, advantages, cliprange, mask):
    """PPO's clipped surrogate (Schulman et al. 2017): -A x ratio, the ratio pi / pi_old also clipped to 1 +-
    `cliprange` and the larger of the two losses kept (the pessimistic bound), averaged over `mask`.
    Returns (loss, the mean ratio, the share of positions clipped, approximate KL 0.5 x E[(log ratio)^2]), each over
    `mask` (a padding position's ratio is 1 and its log ratio 0: counted, they pulled both toward no change); all but
    the loss detached."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.max(unclipped, clipped), mask)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), mask)
        approxkl = 0.5 * masked_mean(log_ratio**2, mask)
        mean_ratio = masked_mean(ratio, mask)
    return loss, mean_ratio, clipfrac, approxkl


def entropy(logits):
    """The entropy of the softmax of `logits` at each position: logsumexp(z) - sum(softmax(z) z). One sequence at a
    time: the whole batch's softmax and product were two more copies of its logits over the vocabulary."""
    softmax = torch.nn.functional.softmax
    return torch.stack([torch.logsumexp(z, dim=-1) - torch.sum(softmax(z, dim=-1) * z, dim=-1) for z in logits])


def rollout_without_signal(scores):
    """Whether every completion of a rollout (`scores`: all of them, over all processes) scored the same, so that
    their advantages carry no reward signal. A rollout of one completion has nothing to compare: never."""
    return len(scores) > 1 and bool((scores == scores[0]).all())


def completion_lengths(completions, stop_token_ids):
    """Per completion: its tokens up to and including the first stop token (any of `stop_token_ids`), and whether it
    has none (clipped).

    A clipped completion ran to --max_completion_length and counts whole. Without stop tokens, all are clipped.
    """
    stops = stop_mask(completions, stop_token_ids)
    clipped = ~stops.any(dim=1)
    first_stop = stops.int().argmax(dim=1)  # the first True (0 where there is none)
    return torch.where(clipped, completions.shape[1], first_stop + 1), clipped


# ---- The models' forward passes ----


def forward(model, query_responses, pad_token_id):
    """`model`'s outputs (with hidden states) on left-padded sequences, positions counted from the first real token."""
    attention_mask = query_responses != pad_token_id
    position_ids = attention_mask.cumsum(1) - attention_mask.long()
    input_ids = torch.masked_fill(query_responses, ~attention_mask, 0)
    return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, return_dict=True,
                 output_hidden_states=True)


def get_reward(model, query_responses, pad_token_id, context_length):
    """A sequence classifier's output at every position, at each sequence's last token that is not padding (its
    score), and that position."""
    attention_mask = query_responses != pad_token_id
    position_ids = attention_mask.cumsum(1) - attention_mask.long()  # exclusive cumsum
    lm_backbone = getattr(model, model.base_model_prefix)
    input_ids = torch.masked_fill(query_responses, ~attention_mask, 0)
    output = lm_backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         return_dict=True, output_hidden_states=True,
                         use_cache=False)  # otherwise mistral-based RM would error out
    reward_logits = model.score(output.hidden_states[-1])
    sequence_lengths = first_true_indices(query_responses[:, context_length:] == pad_token_id) - 1 + context_length
    scores = reward_logits[torch.arange(reward_logits.size(0), device=reward_logits.device), sequence_lengths]
    return reward_logits, scores.squeeze(-1), sequence_lengths


def score_completions(reward_model, query_responses, pad_token_id, context_length, stop_token_ids, turn_end):
    """The reward of each sequence: a sequence classifier's score (`get_reward`) with each cut-off completion's turn
    closed (`close_turns`), or, for reward functions in the reward model's place (`rlhf.ppo.models.PPORewards`), their
    weighted sum."""
    scorer = getattr(reward_model, "module", reward_model)  # a DeepSpeed engine wraps the reward model
    if hasattr(scorer, "score_completions"):
        return scorer.score_completions(query_responses, context_length)
    closed = close_turns(query_responses, context_length, stop_token_ids, turn_end, pad_token_id)
    return get_reward(reward_model, closed, pad_token_id, context_length)[1]


def generate(lm_backbone, queries, pad_token_id, generation_config, top_p=1.0):
    """Sample completions of left-padded `queries`: the sequences, and the logits over the temperature that each token
    was sampled from.

    The logits returned are the model's own over the temperature, as the training forward computes them, whatever
    processed them for sampling: below `top_p` 1.0 tokens are sampled from the nucleus (the processed scores TRL used
    hold -inf outside it: the first ratio and KL would be off by up to log(1/top_p) per token before any step), and a
    processor a generation config adds would shift them likewise.
    """
    context_length = queries.shape[1]
    attention_mask = queries != pad_token_id
    input_ids = torch.masked_fill(queries, ~attention_mask, 0)
    # What to return is set on the config, since transformers deprecates passing both a config and kwargs.
    config = copy.deepcopy(generation_config)
    config.return_dict_in_generate, config.output_scores, config.output_logits = True, False, True
    if top_p < 1.0:
        config.top_p = top_p
    output = lm_backbone.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    logits = torch.stack([step / config.temperature for step in output.logits], 1)
    return torch.cat((queries, output.sequences[:, context_length:]), dim=1), logits


@torch.no_grad()
def batch_generation(model, queries, local_rollout_forward_batch_size, pad_token_id, generation_config, top_p=1.0):
    """`generate` in chunks of `local_rollout_forward_batch_size` queries, right-padded to one length."""
    query_responses, logitss = [], []
    batch_size = queries.shape[0]
    for i in range(0, batch_size, local_rollout_forward_batch_size):
        query = queries[i : i + local_rollout_forward_batch_size]
        query_response, logits = generate(model, query, pad_token_id, generation_config, top_p)
        query_responses.append(query_response)
        logitss.append(logits)
    padded_query_responses = pad(query_responses, padding_value=pad_token_id, padding_side="right")
    padded_logitss = pad(logitss, padding_value=0, padding_side="right")
    padded_query_responses = padded_query_responses.view(-1, padded_query_responses.shape[-1])[:batch_size]
    padded_logitss = padded_logitss.view(-1, *padded_logitss.shape[2:])[:batch_size]
    return padded_query_responses, padded_logitss


def peft_module_casting_to_bf16(model):
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.LayerNorm) or "norm" in name:
            module = module.to(torch.float32)
        elif any(x in name for x in ["lm_head", "embed_tokens", "wte", "wpe"]):
            if hasattr(module, "weight") and module.weight.dtype == torch.float32:
                module = module.to(torch.bfloat16)
