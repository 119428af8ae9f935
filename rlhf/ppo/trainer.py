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
"""PPO, a trainer of its own on accelerate: a policy and a value model trained on their own rollouts.

One rollout, top to bottom, is `train()`: generate and score (`_rollout`), KL-penalised rewards, GAE and whitening
(`_advantages`), PPO epochs of clipped losses (`_update`), logs and adaptive KL (`_log_rollout`). The rollout's steps
are in `rlhf/ppo/rollout.py`, their maths pure functions in `rlhf/ppo/maths.py`, checkpoints and resume in
`rlhf/ppo/checkpoint.py`. Callbacks, logging and the trainer state are transformers' public pieces (`TrainerState`,
`TrainerControl`, `CallbackHandler`); `train(resume_from_checkpoint=...)` goes on from a checkpoint.
"""

import gc
import math
import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType, GradientAccumulationPlugin
from accelerate.utils.memory import clear_device_cache
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorWithPadding,
    DefaultFlowCallback,
    PrinterCallback,
    ProgressCallback,
    Trainer,
    TrainerControl,
    TrainerState,
    get_scheduler,
)
from transformers.integrations import get_reporting_integration_callbacks
from transformers.trainer_callback import CallbackHandler

from rlhf.batches import ppo_sizes, rollout_chunk
from rlhf.errors import UserError
from rlhf.kl_control import adaptive_kl_coef, kl_horizon_note
from rlhf.models import stop_token_ids
from rlhf.ppo.checkpoint import VALUE_MODEL_DIR, Checkpointing, RecordedPasses
from rlhf.ppo.maths import completion_lengths, peft_module_casting_to_bf16
from rlhf.ppo.rollout import STEP_STATS, RolloutSteps
from rlhf.rewards.reward_model import turn_end_ids
from rlhf.trl_compat import (
    ExportableState,
    disable_dropout_in_model,
    is_optimizer_factory,
    prepare_deepspeed,
    say,
)

__all__ = ["VALUE_MODEL_DIR", "PPOTrainer", "check_critic_warmup"]

# Weight decay applies to every trained weight but biases and norms, as transformers' Trainer groups them.
NO_DECAY = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


@dataclass
class OnlineTrainerState(TrainerState):
    """transformers' `TrainerState` with an `episode` counter (prompts trained on so far)."""

    episode: int = 0


class PolicyAndValueWrapper(nn.Module):
    """The policy and the value model in one module, so that one `accelerator.prepare` (one DDP wrapper or DeepSpeed
    engine, one optimizer) holds both (the layout of MOSS-RLHF's PPO, as TRL's)."""

    def __init__(self, policy, value_model) -> None:
        super().__init__()
        self.policy = policy
        self.value_model = value_model
        self.critic_backbone = getattr(value_model, value_model.base_model_prefix)
        self.is_gradient_checkpointing = policy.is_gradient_checkpointing

    def gradient_checkpointing_enable(self, **kwargs):
        """Both trained models recompute their activations in the backward pass."""
        self.policy.gradient_checkpointing_enable(**kwargs)
        self.value_model.gradient_checkpointing_enable(**kwargs)
        self.is_gradient_checkpointing = True

    def gradient_checkpointing_disable(self):
        self.policy.gradient_checkpointing_disable()
        self.value_model.gradient_checkpointing_disable()
        self.is_gradient_checkpointing = False

    def forward(self, **kwargs):
        output = self.critic_backbone(**kwargs)
        logits = self.value_model.score(output.hidden_states[-1])
        return self.policy(**kwargs), logits



class PPOTrainer(RolloutSteps, Checkpointing):
    """Proximal Policy Optimization (Schulman et al. 2017) as in Ziegler et al. 2019: a policy and a value model
    trained together on rollouts scored by a frozen reward model (or reward functions), with a KL penalty toward a
    frozen reference. `args` is a `config.PPOTrainingConfig` (any object with its fields: the package imports nothing
    from the top level). With a LoRA `peft_config`, `ref_model` is None and the reference is the policy with its
    adapter off.

    Used as transformers' trainers are: `add_callback`, `train(resume_from_checkpoint=...)`, `save_model`, `state`.
    """

    def __init__(self, args, processing_class, model, ref_model, reward_model, train_dataset, value_model,
                 data_collator=None, optimizers=(None, None), callbacks=None, peft_config=None):
        if ref_model is model:
            raise ValueError("`model` and `ref_model` cannot be the same object: pass a copy, or None with LoRA.")
        self.args = args
        self.processing_class = processing_class
        self.train_dataset = train_dataset
        self.train_dataset_len = len(train_dataset)
        self.data_collator = DataCollatorWithPadding(processing_class) if data_collator is None else data_collator
        self.optimizer, self.lr_scheduler = optimizers
        # In this order: the LoRA adapter's weights are drawn first, the data order from args.seed at prepare()
        self._set_models(model, ref_model, reward_model, value_model, peft_config)
        self._set_accelerator()
        self._set_optimizers()
        self._set_callbacks(callbacks)
        self._prepare()
        self._place_scorers()

        self.kl_coef = args.kl_coef  # the KL penalty coefficient of the next rollout (adapts with target_kl)
        self.critic_warming = False  # whether the rollout in flight is one of the critic's warm-up (value model only)
        self.without_signal = False  # whether every completion of the last rollout scored the same
        self.advantages_zeroed = False  # whether the last rollout's advantages were set to 0 for it
        self._said_zeroed = False  # the console line on a rollout without signal comes once
        self._lengths, self._clipped = [], []  # of the completions generated since the last rollout
        self._unlogged = []  # the metrics of each rollout since the last log
        self._first_batch = 0  # batches already trained, when resuming (start_at_batch)
        if hasattr(self.reward_model, "trainer_state"):
            self.reward_model.trainer_state = lambda: self.state

    def _set_models(self, model, ref_model, reward_model, value_model, peft_config):
        """The policy (with LoRA, its adapter; the reference is then the policy with it disabled), where its
        completions end, and the other models as given."""
        args, processing_class = self.args, self.processing_class
        self.policy_model = model
        # Completions end at the run's stop tokens, which the policy's generation config gets: every end id the model
        # declares with --stop_token eos (not the tokenizer's EOS alone); --stop_token_id alone with none
        self.stop_token_ids = stop_token_ids(processing_class, model, args.stop_token, args.stop_token_id)
        self.policy_model.generation_config.eos_token_id = list(self.stop_token_ids) or None
        self.turn_end = turn_end_ids(processing_class)  # a cut-off completion is scored with its turn closed
        if peft_config is not None:
            from peft import PeftModel, get_peft_model

            if isinstance(self.policy_model, PeftModel):
                raise ValueError("You passed a `PeftModel` together with a `peft_config`: merge and unload the "
                                 "adapter, save that base model, and pass it with the new `peft_config`.")
            self.policy_model = get_peft_model(self.policy_model, peft_config)
            if args.bf16 and getattr(self.policy_model, "is_loaded_in_4bit", False):
                peft_module_casting_to_bf16(self.policy_model)
        self.is_peft_model = peft_config is not None or _is_peft_model(self.policy_model)
        if ref_model is None and not self.is_peft_model:
            raise ValueError("No reference model, and the policy has no adapter to disable: pass `ref_model`.")
        self.ref_model = ref_model
        self.reward_model = reward_model
        self.value_model = value_model

    def _set_accelerator(self):
        """The accelerator, the run's sizes (`rlhf.batches.ppo_sizes`: rollouts, mini-batches, length) and the prompts
        generated at once. A rollout (`sizes.batch_size` prompts over all processes, `local_batch_size` in each) is
        cut into `num_mini_batches` mini-batches of `local_mini_batch_size` = per_device_train_batch_size x
        gradient_accumulation_steps prompts per process: one optimizer step each, accumulated over its
        micro-batches."""
        args = self.args
        # accelerate accumulates over one mini-batch, and never syncs early at the end of the dataloader: one
        # dataloader batch is a whole rollout, whose every mini-batch takes one optimizer step, also the rollout that
        # ends a pass. A DeepSpeed engine takes the same count from it at `prepare()`.
        accumulation = GradientAccumulationPlugin(num_steps=args.gradient_accumulation_steps,
                                                  sync_with_dataloader=False)
        self.accelerator = accelerator = Accelerator(gradient_accumulation_plugin=accumulation)
        self.sizes = sizes = ppo_sizes(args, accelerator.num_processes, self.train_dataset_len)
        if args.whiten_rewards and sizes.local_mini_batch_size < 8:
            raise ValueError(f"Per-rank minibatch size {sizes.local_mini_batch_size} is insufficient for whitening")
        check_critic_warmup(args.critic_warmup, sizes.num_total_batches)
        self.local_seed = args.seed + accelerator.process_index * 100003  # Prime
        # Prompts per generate call and no-grad forward pass of a rollout. Decoding is launch-bound on a GPU: there,
        # the whole rollout where a quarter of its memory holds it (the same on every launch of the same GPU: a
        # resumed run generates alike).
        self.rollout_chunk = args.local_rollout_forward_batch_size
        if self.rollout_chunk is None:
            gpu = accelerator.device.type == "cuda"
            budget = torch.cuda.get_device_properties(accelerator.device).total_memory / 4 if gpu else None
            longest_prompt = max(map(len, self.train_dataset["input_ids"])) if gpu else 0
            self.rollout_chunk = rollout_chunk(sizes.local_batch_size, budget,
                                               self.policy_model.config.get_text_config().vocab_size, longest_prompt,
                                               args.response_length)
            if gpu and accelerator.is_main_process:
                print(f"PPO: {self.rollout_chunk} of each rollout's {sizes.local_batch_size} prompts per process are "
                      "generated at once (as a quarter of the GPU's memory holds; --local_rollout_forward_batch_size "
                      "sets it)", flush=True)

    def _set_optimizers(self):
        """The policy and the value model in one module (`PolicyAndValueWrapper`), the optimizer over both and the
        learning-rate schedule, unless given."""
        args = self.args
        for module in [self.policy_model, self.ref_model, self.value_model, self.reward_model]:
            if module is not None:
                disable_dropout_in_model(module)
        self.model = PolicyAndValueWrapper(self.policy_model, self.value_model)
        self.is_deepspeed_enabled = getattr(self.accelerator.state, "deepspeed_plugin", None) is not None
        self.is_fsdp_enabled = getattr(self.accelerator.state, "fsdp_plugin", None) is not None
        if args.critic_warmup and (self.is_deepspeed_enabled or self.is_fsdp_enabled):
            raise UserError(CRITIC_WARMUP_ENGINES)
        # Generation turns gradient checkpointing off and back on (trl's unwrap_model_for_generation), where it would
        # only slow decoding down.
        self.gradient_checkpointing_kwargs = args.gradient_checkpointing_kwargs or {"use_reentrant": False}
        if args.gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=self.gradient_checkpointing_kwargs)
        self.model.config = self.policy_model.config  # TensorBoard's callback records it with the run
        if self.optimizer is None:
            self.optimizer = create_optimizer(self.model, args)
        if self.lr_scheduler is None:  # it steps once per rollout the policy trains on (in train()), not per
            # optimizer step: over the rollouts after the critic's warm-up
            policy_rollouts = self.sizes.num_total_batches - args.critic_warmup
            self.lr_scheduler = get_scheduler(args.lr_scheduler_type, self.optimizer,
                                              num_warmup_steps=args.get_warmup_steps(policy_rollouts),
                                              num_training_steps=policy_rollouts,
                                              scheduler_specific_kwargs=args.lr_scheduler_kwargs)

    def _set_callbacks(self, callbacks):
        """transformers' callbacks: when to log and save (DefaultFlowCallback), the reporting integrations
        (TensorBoard...), the caller's, then the progress bar (or one printed line per log); the trainer state."""
        args = self.args
        callbacks = [DefaultFlowCallback, *get_reporting_integration_callbacks(args.report_to), *(callbacks or []),
                     PrinterCallback if args.disable_tqdm else ProgressCallback]
        self.callback_handler = CallbackHandler(callbacks, self.model, self.processing_class, self.optimizer,
                                                self.lr_scheduler)
        self.control = TrainerControl()
        self.state = OnlineTrainerState(
            is_local_process_zero=self.accelerator.is_local_main_process,
            is_world_process_zero=self.accelerator.is_main_process,
            stateful_callbacks=[
                cb for cb in self.callback_handler.callbacks + [self.control] if isinstance(cb, ExportableState)
            ],
        )
        if args.should_save:
            os.makedirs(args.output_dir, exist_ok=True)

    def _prepare(self):
        """The dataloader (one batch per rollout, shuffled alike in every process), and the model, optimizer and
        dataloader through `accelerator.prepare` (DDP, DeepSpeed or FSDP)."""
        args, accelerator = self.args, self.accelerator
        dataloader = DataLoader(
            self.train_dataset,
            batch_size=self.sizes.local_batch_size,
            shuffle=True,
            collate_fn=self.data_collator,
            drop_last=True,  # needed; otherwise the last batch will be of ragged shape
        )
        if len(dataloader) == 0:  # the rollout loop would wait for ever on a dataloader with no whole batch
            raise ValueError(f"{self.train_dataset_len} prompts are fewer than one rollout of "
                             f"{self.sizes.local_batch_size} per process: give more prompts or a smaller batch")
        # sync random states for DataLoader(shuffle=True) before `accelerator.prepare`
        # see https://gist.github.com/vwxyzjn/2581bff1e48e185e0b85b6dfe1def79c
        torch.manual_seed(args.seed)
        sampler = dataloader.sampler  # in a multi-process run, accelerate gives it a generator seeded alike in each
        self.model, self.optimizer, dataloader = accelerator.prepare(self.model, self.optimizer, dataloader)
        torch.manual_seed(self.local_seed)  # reset the local seed again
        self.dataloader = RecordedPasses(dataloader, sampler)  # a resumed run draws its pass again
        # One process stepping at every micro-batch (no accumulation, no loss scaler) steps the value model, then the
        # policy (`_update`), so that their gradients never take memory together. The same numbers: the two models
        # share no weight, AdamW steps each weight on its own gradient, and nothing clips their norm together. DDP,
        # DeepSpeed and FSDP reduce or step both at once.
        self.step_apart = (args.gradient_accumulation_steps == 1 and accelerator.scaler is None
                           and accelerator.distributed_type == DistributedType.NO)

    def _place_scorers(self):
        """The reference and the reward model on the device (under DeepSpeed, in its inference engine). Reward
        functions in the reward model's place are scored in place, and only their reward model (if any) moves."""
        scorer = self.reward_model if _is_sequence_classifier(self.reward_model) else self.reward_model.reward_model
        if self.is_deepspeed_enabled:
            scorer = prepare_deepspeed(scorer, self.accelerator) if scorer is not None else None
            if self.ref_model is not None:
                self.ref_model = prepare_deepspeed(self.ref_model, self.accelerator)
        else:
            if self.ref_model is not None:
                self.ref_model = self.ref_model.to(self.accelerator.device)
            scorer = scorer.to(self.accelerator.device) if scorer is not None else None
        if _is_sequence_classifier(self.reward_model):
            self.reward_model = scorer
        else:
            self.reward_model.reward_model = scorer

    def add_callback(self, callback):
        """Add a transformers `TrainerCallback` (an instance or a class), called after those already there."""
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback):
        """Remove a callback (an instance, or the first of a class) and return it, or None: transformers' API."""
        return self.callback_handler.pop_callback(callback)

    def log(self, logs):
        """Log `logs` (with the epoch) at the current step: into `state.log_history` and every callback's `on_log`
        (TensorBoard, the progress bar, the health checks)."""
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.control = self.callback_handler.on_log(self.args, self.state, self.control, logs)

    # ---- The models ----

    @property
    def trained_policy(self):
        """The policy being trained (a PEFT model with LoRA), out of DDP and the policy-and-value wrapper."""
        return self.accelerator.unwrap_model(self.model).policy

    @property
    def trained_value_model(self):
        return self.accelerator.unwrap_model(self.model).value_model

    @contextmanager
    def null_ref_context(self):
        """With LoRA, the reference: the policy with its adapter disabled (out of DDP's wrapper, which hides
        `.policy`)."""
        policy = self.trained_policy
        with policy.disable_adapter() if self.is_peft_model else nullcontext():
            yield policy

    # ---- Training ----

    def train(self, resume_from_checkpoint=None):
        """Rollouts until `num_total_batches`: generate and score (`_rollout`), rewards and advantages
        (`_advantages`), PPO epochs (`_update`), logs and adaptive KL (`_log_rollout`), then transformers' callbacks
        (checkpoints, the health check, the held-out evaluation).

        With `resume_from_checkpoint` (a checkpoint folder, or True for the newest in `output_dir`), as with
        transformers' trainers, the run goes on from where that checkpoint left it (`resume`)."""
        if resume_from_checkpoint:
            self.resume(resume_from_checkpoint)
        args, sizes = self.args, self.sizes
        self.model.train()
        # trainer state initialization: a resumed run's counters continue from its checkpoint
        self.state.global_step = self._first_batch
        self.state.episode = self._first_batch * sizes.batch_size
        self._start_time, self._first_episode = time.time(), self.state.episode  # eps: this launch's own
        self.state.max_steps = sizes.num_total_batches
        self.state.num_train_epochs = sizes.total_episodes / self.train_dataset_len
        for name in ("logging_steps", "eval_steps", "save_steps"):  # absolute, where given as a ratio
            steps = getattr(args, name)
            if steps is not None:
                setattr(self.state, name, math.ceil(self.state.max_steps * steps) if steps < 1 else steps)
        if self.accelerator.is_main_process:
            self._say_the_plan()
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)

        def passes():  # one dataloader batch per rollout, pass after pass over the prompts
            while True:
                yield from self.dataloader

        batches = passes()
        for _ in range(self._first_batch, sizes.num_total_batches):
            self.state.episode += sizes.batch_size
            if args.critic_warmup:
                self._enter_phase(self.state.global_step < args.critic_warmup)
            rollout = self._rollout(next(batches)["input_ids"].to(self.accelerator.device))
            self._advantages(rollout)
            stats = self._update(rollout)
            self._log_rollout(rollout, stats)
            # The learning-rate schedule counts the policy's steps: a rollout without signal or of the critic's
            # warm-up does not spend it, so the policy's real steps run at the rates of a run without such rollouts
            # (the value model, stepped at the rate held, still learns from it).
            if not (self.advantages_zeroed or self.critic_warming):
                self.lr_scheduler.step()
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            if self.control.should_save:
                self.save_checkpoint()
                self.control = self.callback_handler.on_save(self.args, self.state, self.control)
            del rollout, stats
            clear_device_cache()
            gc.collect()

        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        if self.control.should_save:
            self.save_checkpoint()
            self.control = self.callback_handler.on_save(self.args, self.state, self.control)

    def _say_the_plan(self):
        """The lines a run's start says: an adaptive KL controller too slow for the run, the critic's warm-up."""
        args, rollouts = self.args, self.sizes.num_total_batches
        if args.target_kl:  # it adapts after each rollout the policy trains on, but the last
            line = kl_horizon_note("--kl_coef", args.target_kl, rollouts - args.critic_warmup - 1,
                                   self.sizes.batch_size, args.kl_horizon, "episodes", "rollouts")
            if line:
                say(line)
        if args.critic_warmup:
            say(f"note: --critic_warmup {args.critic_warmup}: the first {args.critic_warmup} of the run's "
                  f"{rollouts} rollouts train the value model alone, at --learning_rate; the policy "
                  f"trains in the other {rollouts - args.critic_warmup}, over which its learning-rate "
                  "schedule runs (objective/critic_warmup marks the warm-up)")

    def _enter_phase(self, warming):
        """Before a rollout: whether it is one of the critic's warm-up, and the learning rates it trains at. In the
        warm-up the value model learns at the schedule's peak rates (a schedule that warms up would start it at 0)
        and the policy takes no step (`_update`); from the first rollout after it, the schedule's own rates. Set
        before every rollout, so that a resumed run trains at the rates an uninterrupted one does."""
        self.critic_warming = warming
        rates = self.lr_scheduler.base_lrs if warming else self.lr_scheduler.get_last_lr()
        for group, rate in zip(self.optimizer.param_groups, rates, strict=True):
            group["lr"] = rate

    @torch.no_grad()
    def _log_rollout(self, rollout, stats):
        """TRL's metrics of the rollout and its PPO epochs (over every process) and `_run_metrics`; then 7, adaptive
        KL: the next rollout's coefficient follows target_kl (objective/kl is the mean over all processes: each adapts
        the same way)."""
        args, r = self.args, rollout
        # `gather`, not `gather_for_metrics`: rollouts draw whole batches (drop_last), so there is no padding to drop,
        # and at each pass's last batch `gather_for_metrics` logged "The used dataset had no length" per call.
        gathered = self.accelerator.gather
        mean_kl = r.kl.sum(1).mean()
        # Mask padding positions, filled with INVALID_LOGPROB, else they'd drag the entropy negative
        mean_entropy = ((-r.logprobs) * (~r.padding_mask).float()).sum(1).mean()
        mean_non_score_reward = r.non_score_reward.sum(1).mean()
        metrics = {"eps": int((self.state.episode - self._first_episode) / (time.time() - self._start_time))}
        metrics["objective/kl"] = gathered(mean_kl).mean().item()
        metrics["objective/entropy"] = gathered(mean_entropy).mean().item()
        metrics["objective/non_score_reward"] = gathered(mean_non_score_reward).mean().item()
        metrics["objective/rlhf_reward"] = gathered(mean_non_score_reward + r.scores.mean()).mean().item()
        metrics["objective/scores"] = gathered(r.scores.mean()).mean().item()
        for name, tag in STEP_STATS.items():
            metrics[tag] = gathered(stats[name]).mean().item()
        ratios = gathered(stats["ratio"])  # one per micro-batch, PPO epoch and process
        if ratios.numel() > 1:  # the variance of a single ratio is undefined (NaN): not logged then
            metrics["val/ratio_var"] = ratios.var().item()
        # the completions that ended at a stop token (TRL counted the EOS tokens: one per ended completion)
        metrics["val/num_eos_tokens"] = gathered(r.ended.sum()).sum().item()  # every process's
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]  # the rate this rollout trained at (the warm-up's too)
        metrics["episode"] = self.state.episode
        metrics.update(self._run_metrics(metrics))  # every process takes part (gathers)
        self.state.epoch = self.state.episode / self.train_dataset_len  # used by self.log
        self.state.global_step += 1
        # logged every --logging_steps rollouts, the mean of each value over them (as GRPO logs)
        self._unlogged.append(metrics)
        step = self.state.global_step
        if (step % self.state.logging_steps == 0 or step >= self.state.max_steps
                or (step == 1 and args.logging_first_step)):
            self.log(mean_logs(self._unlogged))
            self._unlogged = []
        if args.target_kl and not self.critic_warming:  # a policy held still says nothing of the coefficient
            self.kl_coef = adaptive_kl_coef(self.kl_coef, metrics["objective/kl"], args.target_kl,
                                            self.sizes.batch_size, args.kl_horizon)

    # ---- What is logged beyond TRL's metrics ----

    def record_completions(self, completions, stop_token_ids):
        """Each rollout's completions (token ids after the prompt, padded after the stop token), for their lengths."""
        lengths, clipped = completion_lengths(completions, stop_token_ids)
        self._lengths.append(lengths)
        self._clipped.append(clipped)

    def _run_metrics(self, metrics):
        """The KL coefficient, the rollout without signal, the completion lengths (under GRPO's names: where length
        hacking shows) and each reward function, over all processes (call it in each)."""
        gathered = self.accelerator.gather  # (as in _log_rollout)
        logged = {"objective/kl_coef": self.kl_coef}  # the coefficient this rollout was trained with
        # decided alike in every process; the first is what rlhf.lifecycle.health's no_learning_signal alarm reads
        logged["objective/rollout_without_signal"] = float(self.without_signal)
        logged["objective/advantages_zeroed"] = float(self.advantages_zeroed)
        if self.args.critic_warmup:
            logged["objective/critic_warmup"] = float(self.critic_warming)  # 1: the value model alone trained
        if self.advantages_zeroed and not self._said_zeroed and self.accelerator.is_main_process:
            self._said_zeroed = True
            skipped = ("the policy takes no step from it and its learning-rate schedule does not move (the value "
                       "model still learns)"
                       if not (self.is_deepspeed_enabled or self.is_fsdp_enabled)
                       else "it is not trained on (under DeepSpeed or FSDP the value model skips it too)")
            say(f"PPO step {self.state.global_step + 1}: every completion of a rollout scored the same "
                  f"(objective/scores {metrics['objective/scores']:.3g}): no reward signal, so its advantages are 0 "
                  f"and {skipped} (said once; objective/advantages_zeroed marks them; "
                  "--skip_rollouts_without_signal false trains on them as TRL does)")
        if self._lengths:
            lengths = gathered(torch.cat(self._lengths)).float()
            clipped = gathered(torch.cat(self._clipped)).float()
            self._lengths, self._clipped = [], []
            logged.update({
                "completions/mean_length": lengths.mean().item(),
                "completions/min_length": lengths.min().item(),
                "completions/max_length": lengths.max().item(),
                "completions/clipped_ratio": clipped.mean().item(),
            })
        if hasattr(self.reward_model, "recorded_metrics"):
            logged.update(self.reward_model.recorded_metrics(gathered))
        return logged

    @contextmanager
    def generating_aside(self):
        """Within it, what reward functions score is not logged as training (the held-out evaluation, which keeps
        training's random state as it was itself: rlhf.evaluation.heldout)."""
        recording = getattr(self.reward_model, "recording", None)
        if recording is not None:
            self.reward_model.recording = False
        try:
            yield
        finally:
            if recording is not None:
                self.reward_model.recording = recording


CRITIC_WARMUP_ENGINES = ("--critic_warmup is not supported under DeepSpeed or FSDP: their optimizers hold the "
                         "policy's and the value model's weights flattened together, so the policy's AdamW state "
                         "cannot be held still while the value model learns; run it on one process or with DDP "
                         "(torchrun / accelerate launch --multi_gpu), or drop --critic_warmup")


def check_critic_warmup(critic_warmup, rollouts):
    """Refuse a critic warm-up that leaves the policy no rollout to train on (one line, exit code 2)."""
    if critic_warmup >= rollouts:
        raise UserError(f"--critic_warmup {critic_warmup} leaves the policy no rollout of the run's {rollouts} to "
                        f"train on (warm-up rollouts count toward the run's length: --max_steps, --total_episodes "
                        f"or --num_train_epochs): give at most {rollouts - 1}, or train longer")


def create_optimizer(model, args):
    """The optimizer `--optim` names (transformers' `Trainer.get_optimizer_cls_and_kwargs`: its learning rate, betas,
    epsilon and `--optim_args`) over `model`'s trained weights, with `--weight_decay` on all but biases and norms.
    Refused in one line: an optimizer that needs transformers' own training step or the model itself."""
    from rlhf.trl_compat import get_parameter_names

    optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    if is_optimizer_factory(optimizer_cls) or {"params", "model", "optimizer_dict"} & kwargs.keys():
        raise UserError(f"--optim {args.optim} builds its optimizer from the model inside transformers' Trainer, "
                        "which train_ppo.py does not use; choose an optimizer that steps on gradients alone, e.g. "
                        "--optim adamw_torch (the default), adafactor or sgd")
    decay = set(get_parameter_names(model, [nn.LayerNorm], NO_DECAY))
    trained = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    groups = [{"params": [p for name, p in trained if name in decay], "weight_decay": args.weight_decay},
              {"params": [p for name, p in trained if name not in decay], "weight_decay": 0.0}]
    return optimizer_cls(groups, **kwargs)


def mean_logs(logs):
    """One log of several rollouts' `logs`: the mean of each value, and the last of the counters and the learning
    rate (the value at the step logged)."""
    means = {}
    for key, last in logs[-1].items():
        values = [log[key] for log in logs if key in log]
        means[key] = last if key in ("eps", "lr", "episode") else sum(values) / len(values)
    return means


def _is_sequence_classifier(model):
    return not hasattr(getattr(model, "module", model), "score_completions")


def _is_peft_model(model):
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)
