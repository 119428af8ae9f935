# Copyright 2020-2026 The HuggingFace Team. All rights reserved.
# Changed in 2026 by the rlhf-trl-scripts authors from TRL 1.12.0's trl/experimental/ppo/ppo_trainer.py.
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
"""One PPO rollout's work, the steps `PPOTrainer.train()` calls in turn: generate and score (`_rollout`), KL-penalised
rewards, GAE and whitening (`_advantages`), PPO epochs of clipped losses (`_update`). The maths are pure functions in
`rlhf/ppo/maths.py`; `RolloutSteps` is a base of `PPOTrainer` and reads the trainer's models, sizes and flags.
"""

import ctypes
import functools
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch
from accelerate.utils.memory import clear_device_cache
from transformers import GenerationConfig

from rlhf.models import flags_sampling
from rlhf.ppo.maths import (
    batch_generation,
    clipped_policy_loss,
    clipped_value_loss,
    entropy,
    first_true_indices,
    forward,
    gae,
    get_reward,
    kl_penalized_rewards,
    masked_mean,
    masked_whiten,
    rollout_without_signal,
    score_completions,
    selective_log_softmax,
    stop_mask,
    truncate_response,
)
from rlhf.trl_compat import unwrap_model_for_generation

INVALID_LOGPROB = 1.0
# What each PPO step records (`PPOTrainer._update`), and the tag its mean is logged under, in TRL's order
STEP_STATS = {"approxkl": "policy/approxkl_avg", "pg_clipfrac": "policy/clipfrac_avg", "pg_loss": "loss/policy_avg",
              "vf_loss": "loss/value_avg", "vf_clipfrac": "val/clipfrac_avg", "entropy": "policy/entropy_avg",
              "ratio": "val/ratio"}


class RolloutSteps:
    """The steps of one rollout, as methods of `PPOTrainer` (its base): they read `args`, `sizes`, the prepared
    `model`, `ref_model`, `reward_model`, `accelerator` and `optimizer`."""

    @torch.no_grad()
    def _rollout(self, queries):
        """1-2. One completion per prompt of `queries` (left-padded), with the log-probability of each token under the
        policy that sampled it (the logits at the temperature) and under the reference, the value model's estimate
        at each position, and the score of the completion cut after its first stop token (the rest becomes padding).
        Computed in chunks of `rollout_chunk` prompts."""
        args, pad = self.args, self.processing_class.pad_token_id
        context_length = queries.shape[1]
        # the flags decide (the policy's own generation_config.json sampling fields off); the nucleus in `generate`
        generation_kwargs = {"max_new_tokens": args.response_length,
                             **flags_sampling(self.policy_model.generation_config,
                                              temperature=args.temperature + 1e-7, top_k=0.0, top_p=1.0)}
        with unwrap_model_for_generation(
            self.model, self.accelerator, gather_deepspeed3_params=args.ds3_gather_for_generation,
            generation_kwargs=generation_kwargs,  # overrides model.generation_config (transformers#42762)
            gradient_checkpointing_kwargs=self.gradient_checkpointing_kwargs,  # what it turns back on after
        ) as unwrapped_model:
            query_responses, logitss = batch_generation(unwrapped_model.policy, queries, self.rollout_chunk, pad,
                                                        GenerationConfig(**generation_kwargs), top_p=args.top_p)
        del unwrapped_model
        self.record_completions(query_responses[:, context_length:], self.stop_token_ids)

        parts = defaultdict(list)
        chunk = self.rollout_chunk
        value_model = self.accelerator.unwrap_model(self.model).value_model
        for i in range(0, queries.shape[0], chunk):
            query, query_response = queries[i : i + chunk], query_responses[i : i + chunk]
            response = query_response[:, context_length:]
            parts["logprobs"].append(selective_log_softmax(logitss[i : i + chunk], response))
            if self.ref_model is None:
                with self.null_ref_context() as reference:
                    ref_output = forward(reference, query_response, pad)
            else:
                ref_output = forward(self.ref_model, query_response, pad)
            ref_logits = ref_output.logits[:, context_length - 1 : -1]
            ref_logits /= args.temperature + 1e-7
            parts["ref_logprobs"].append(selective_log_softmax(ref_logits, response))
            del ref_output, ref_logits
            ended = truncate_response(self.stop_token_ids, pad, response)  # none: nothing is cut
            parts["sequence_lengths"].append(first_true_indices(ended == pad) - 1)
            full_value, _, _ = get_reward(value_model, query_response, pad, context_length)
            parts["values"].append(full_value[:, context_length - 1 : -1].squeeze(-1))
            parts["scores"].append(score_completions(self.reward_model, torch.cat((query, ended), 1), pad,
                                                     context_length, self.stop_token_ids, self.turn_end))
            parts["responses"].append(response)
            parts["ended_responses"].append(ended)
        del logitss
        rollout = SimpleNamespace(query_responses=query_responses, context_length=context_length,
                                  **{name: torch.cat(tensors, 0) for name, tensors in parts.items()})
        del parts, full_value
        # The cache is emptied twice per rollout (each call costs a GPU synchronisation): here, once the generation's
        # logits over the vocabulary are freed, before the update needs the room, and after the rollout (train()).
        clear_device_cache()
        return rollout

    @torch.no_grad()
    def _advantages(self, rollout):
        """3-5. The rollout's per-token rewards (the KL penalty, the score), its advantages by GAE, whitened over the
        whole rollout, and the returns the value model learns; set on `rollout`."""
        args, r = self.args, rollout
        # whitening's sums over every process: statistics that shape the gradient are the whole rollout's
        total = (lambda t: self.accelerator.reduce(t, "sum")) if self.accelerator.num_processes > 1 else None
        # A completion cut off before any of the run's stop tokens scores `missing_eos_penalty` lower.
        r.ended = stop_mask(r.ended_responses, self.stop_token_ids).any(dim=-1)
        if args.missing_eos_penalty is not None:
            r.scores[~r.ended] -= args.missing_eos_penalty
        # Positions after a completion's last token are padding: `padding_mask` masks log-probabilities,
        # `padding_mask_p1` (one position later) the values. See
        # https://excalidraw.com/#json=LWnzG4w2k5DjF_EOL_xPt,e2w3a-hFJ_gX5vOfeyXGTw
        positions = torch.arange(r.responses.shape[1], device=r.responses.device).repeat(r.responses.shape[0], 1)
        r.padding_mask = positions > r.sequence_lengths.unsqueeze(1)
        r.padding_mask_p1 = positions > (r.sequence_lengths + 1).unsqueeze(1)
        r.logprobs = torch.masked_fill(r.logprobs, r.padding_mask, INVALID_LOGPROB)
        r.ref_logprobs = torch.masked_fill(r.ref_logprobs, r.padding_mask, INVALID_LOGPROB)
        r.values = torch.masked_fill(r.values, r.padding_mask_p1, 0)
        # 3. Rewards: a KL penalty at every token plus the completion's score at its last token.
        rewards, r.kl, r.non_score_reward = kl_penalized_rewards(r.scores, r.logprobs, r.ref_logprobs,
                                                                 r.sequence_lengths, self.kl_coef, args.kl_estimator)
        if args.whiten_rewards:
            rewards = masked_whiten(rewards, mask=~r.padding_mask_p1, shift_mean=False, total=total)
            rewards = torch.masked_fill(rewards, r.padding_mask_p1, 0)
        # 4. Advantages by GAE; the value model learns the returns A + V.
        advantages, r.returns = gae(rewards, r.values, args.gamma, args.lam, args.value_lam)
        # 5. Whitening: the advantages of the rollout (every process's) scaled to mean 0 and variance 1, with
        # whiten_advantages (unwhitened, one right answer in 16 pushes itself up, not the 15 others down).
        if args.whiten_advantages:
            advantages = masked_whiten(advantages, ~r.padding_mask, total=total)
        # Whitened, a rollout whose completions all scored the same (a verifier that none passed) would still
        # get advantages of unit size: GAE's noise (the value model's errors, the KL penalty and, with lam < 1, a
        # push against the last token, EOS), a full PPO step. With skip_rollouts_without_signal they are 0 (GRPO's
        # zero advantage for a group that all scored the same) and the policy is not stepped at all (`_update`); the
        # returns, which the value model learns, stay. Judged on the whole rollout, every process's completions
        # together; a rollout of one completion is never judged flat.
        self.without_signal = rollout_without_signal(self.accelerator.gather(r.scores))
        self.advantages_zeroed = args.skip_rollouts_without_signal and self.without_signal
        if self.advantages_zeroed or self.critic_warming:  # the critic's warm-up: the value model alone learns
            advantages.zero_()
        r.advantages = torch.masked_fill(advantages, r.padding_mask, 0)

    def _update(self, rollout):
        """6. PPO epochs: passes over the rollout in a fresh random order, one optimizer step per mini-batch (its
        micro-batches accumulated). Returns each step's statistics, {name: tensor (epoch, mini-batch, micro-batch)}.

        A rollout without signal, and one of the critic's warm-up, steps the value model alone. Its policy gradients
        are 0, and AdamW would still move the policy by its momentum (and weight decay) and count the step in its
        state: they are dropped before each step, which AdamW then skips for those weights (their state untouched).
        Under DeepSpeed and FSDP, whose optimizers hold the weights flattened together, a rollout without signal is
        not trained on at all (its statistics 0), and the warm-up is refused (`CRITIC_WARMUP_ENGINES`)."""
        args, sizes, r, model = self.args, self.sizes, rollout, self.model
        shape = (args.num_ppo_epochs, args.num_mini_batches, args.gradient_accumulation_steps)
        stats = {name: torch.zeros(shape, device=self.accelerator.device) for name in STEP_STATS}
        skip_policy = ((self.advantages_zeroed or self.critic_warming)
                       and not (self.is_deepspeed_enabled or self.is_fsdp_enabled))
        skip_rollout = self.advantages_zeroed and not skip_policy
        start = r.context_length - 1
        for epoch in range(0 if skip_rollout else args.num_ppo_epochs):
            order = np.random.permutation(sizes.local_batch_size)
            for mini_batch, first in enumerate(range(0, sizes.local_batch_size, sizes.local_mini_batch_size)):
                mini_batch_inds = order[first : first + sizes.local_mini_batch_size]
                for micro_batch, offset in enumerate(range(0, sizes.local_mini_batch_size,
                                                           args.per_device_train_batch_size)):
                    with self.accelerator.accumulate(model):
                        i = mini_batch_inds[offset : offset + args.per_device_train_batch_size]
                        output, vpred_temp = forward(model, r.query_responses[i], self.processing_class.pad_token_id)
                        logits = output.logits[:, start:-1]
                        logits /= args.temperature + 1e-7
                        new_logprobs = selective_log_softmax(logits, r.responses[i])
                        with torch.no_grad():  # over the completion's tokens, not the padding after its end
                            step_entropy = masked_mean(entropy(logits), ~r.padding_mask[i])
                        # Our references to the logits over the vocabulary go, not always the memory: in float32
                        # (the default) selective_log_softmax's logsumexp keeps the logits for the backward pass; in
                        # bfloat16 its log_softmax keeps its own output instead, and the logits are freed here.
                        del output, logits
                        new_logprobs = torch.masked_fill(new_logprobs, r.padding_mask[i], INVALID_LOGPROB)
                        vpred = vpred_temp[:, start:-1].squeeze(-1)
                        vpred = torch.masked_fill(vpred, r.padding_mask_p1[i], 0)
                        vf_loss, vf_clipfrac = clipped_value_loss(vpred, r.values[i], r.returns[i],
                                                                  args.cliprange_value, ~r.padding_mask_p1[i])
                        pg_loss, ratio, pg_clipfrac, approxkl = clipped_policy_loss(
                            new_logprobs, r.logprobs[i], r.advantages[i], args.cliprange, ~r.padding_mask[i])
                        if self.step_apart:  # the value model's gradients freed before the policy's exist
                            self.accelerator.backward(args.vf_coef * vf_loss)
                            self._optimizer_step(skip_policy)
                            self.accelerator.backward(pg_loss)
                        else:
                            self.accelerator.backward(pg_loss + args.vf_coef * vf_loss)
                        self._optimizer_step(skip_policy)
                        with torch.no_grad():
                            at = epoch, mini_batch, micro_batch
                            for name, value in (("approxkl", approxkl), ("pg_clipfrac", pg_clipfrac),
                                                ("pg_loss", pg_loss), ("vf_loss", vf_loss),
                                                ("vf_clipfrac", vf_clipfrac), ("entropy", step_entropy),
                                                ("ratio", ratio)):
                                stats[name][at] = value
                del vpred_temp, new_logprobs, vpred, vf_loss, pg_loss, ratio, step_entropy
        return stats

    def _optimizer_step(self, skip_policy):
        """An optimizer step on the gradients there are (a rollout without signal drops the policy's first). On a
        CPU, the pages the backward pass and the step free go back to the OS (`trim_heap`) before the step, the
        update's peak, and after it, before the next backward pass."""
        on_cpu = self.accelerator.device.type == "cpu"
        if skip_policy:
            for parameter in self.trained_policy.parameters():
                parameter.grad = None
        if on_cpu:
            trim_heap()
        self.optimizer.step()  # accelerate steps once per mini-batch (see PPOTrainer)
        self.optimizer.zero_grad()
        if on_cpu:
            trim_heap()


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none (macOS, Windows, musl)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # TypeError: Windows, where CDLL needs a name
        return None


def trim_heap():
    """Give the C heap's free pages back to the OS (glibc's `malloc_trim`; nothing elsewhere).

    torch frees a CPU tensor below glibc's mmap threshold (up to 32 MB) into the heap, which keeps its pages: the
    gradients freed by one optimizer step stayed in the process while the next backward pass took fresh pages."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

