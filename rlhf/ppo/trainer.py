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
(`_advantages`), PPO epochs of clipped losses (`_update`), logs and adaptive KL (`_log_rollout`). The maths are pure
functions in `rlhf/ppo/maths.py`. Callbacks, logging and the trainer state are transformers' public pieces
(`TrainerState`, `TrainerControl`, `CallbackHandler`), and a checkpoint holds the files transformers' `Trainer` writes
(the policy, `optimizer.pt`, `scheduler.pt`, `rng_state*.pth`, `trainer_state.json` last) besides the value model, the
KL coefficient and the order of the prompts; `train(resume_from_checkpoint=...)` goes on from one.
"""

import ctypes
import functools
import gc
import json
import math
import os
import textwrap
import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType, GradientAccumulationPlugin
from accelerate.utils.memory import clear_device_cache
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorWithPadding,
    DefaultFlowCallback,
    GenerationConfig,
    PrinterCallback,
    ProgressCallback,
    Trainer,
    TrainerControl,
    TrainerState,
    get_scheduler,
)
from transformers.integrations import get_reporting_integration_callbacks
from transformers.trainer_callback import CallbackHandler, ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints
from trl.models.utils import prepare_deepspeed, unwrap_model_for_generation
from trl.trainer.utils import disable_dropout_in_model

from rlhf.batches import rollout_chunk
from rlhf.errors import UserError
from rlhf.kl_control import adaptive_kl_coef, kl_horizon_note
from rlhf.lifecycle.checkpoints import last_checkpoint, load_pretrained_weights, load_rng_state, save_rng_state
from rlhf.models import stop_token_ids
from rlhf.ppo.maths import (
    batch_generation,
    clipped_policy_loss,
    clipped_value_loss,
    completion_lengths,
    entropy,
    first_true_indices,
    forward,
    gae,
    get_reward,
    kl_penalized_rewards,
    masked_whiten,
    peft_module_casting_to_bf16,
    rollout_without_signal,
    score_completions,
    selective_log_softmax,
    stop_mask,
    truncate_response,
)
from rlhf.rewards.reward_model import turn_end_ids

INVALID_LOGPROB = 1.0
# What each PPO step records (`PPOTrainer._update`), and the tag its mean is logged under, in TRL's order
STEP_STATS = {"approxkl": "policy/approxkl_avg", "pg_clipfrac": "policy/clipfrac_avg", "pg_loss": "loss/policy_avg",
              "vf_loss": "loss/value_avg", "vf_clipfrac": "val/clipfrac_avg", "entropy": "policy/entropy_avg",
              "ratio": "val/ratio"}
VALUE_MODEL_DIR = "value_model"  # in a checkpoint and the output folder: the value model
PPO_STATE = "ppo_state.json"  # in a checkpoint: the KL coefficient of the next rollout
DATA_ORDER_FILE = "ppo_data_order.pt"  # in a checkpoint: the random states of the order of the prompts
# The rest of a checkpoint's files, under the names transformers' Trainer gives them (what `lifecycle.checkpoints` and
# `lifecycle.run` look for, and what checkpoints of earlier versions of this package hold).
TRAINER_STATE_FILE = "trainer_state.json"  # written last: a checkpoint without it is incomplete
OPTIMIZER_FILE, SCHEDULER_FILE, SCALER_FILE = "optimizer.pt", "scheduler.pt", "scaler.pt"
TRAINING_ARGS_FILE = "training_args.bin"
# Weight decay applies to every trained weight but biases and norms, as transformers' Trainer groups them.
NO_DECAY = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
CITATION = textwrap.dedent("""\
    @article{mziegler2019fine-tuning,
        title        = {{Fine-Tuning Language Models from Human Preferences}},
        author       = {Daniel M. Ziegler and Nisan Stiennon and Jeffrey Wu and Tom B. Brown and Alec Radford and Dario Amodei and Paul F. Christiano and Geoffrey Irving},
        year         = 2019,
        eprint       = {arXiv:1909.08593}
    }""")  # noqa: E501


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


class PPOTrainer:
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
        self.policy_model = model
        if data_collator is None:
            data_collator = DataCollatorWithPadding(self.processing_class)

        # Completions end at the run's stop tokens, which the policy's generation config gets: every end id the model
        # declares with --stop_token eos (not the tokenizer's EOS alone); --stop_token_id alone with none
        self.stop_token_ids = stop_token_ids(processing_class, model, args.stop_token, args.stop_token_id)
        self.policy_model.generation_config.eos_token_id = list(self.stop_token_ids) or None
        self.turn_end = turn_end_ids(processing_class)  # a cut-off completion is scored with its turn closed

        # PEFT: the policy gets the adapter; the reference is the policy with it disabled
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
        self.train_dataset = train_dataset
        self.train_dataset_len = len(train_dataset)
        self.value_model = value_model
        self.data_collator = data_collator
        self.optimizer, self.lr_scheduler = optimizers

        #########
        # Batch sizes. A rollout (`batch_size` prompts over all processes, `local_batch_size` in each) is cut into
        # `num_mini_batches` mini-batches of `local_mini_batch_size` = per_device_train_batch_size x
        # gradient_accumulation_steps prompts per process: one optimizer step each, accumulated over its micro-batches.
        #########
        if args.total_episodes is None:  # allow the users to define episodes in terms of epochs.
            args.total_episodes = int(args.num_train_epochs * self.train_dataset_len)
        # accelerate accumulates over one mini-batch, and never syncs early at the end of the dataloader: one
        # dataloader batch is a whole rollout, whose every mini-batch takes one optimizer step, also the rollout that
        # ends a pass. A DeepSpeed engine takes the same count from it at `prepare()`.
        accumulation = GradientAccumulationPlugin(num_steps=args.gradient_accumulation_steps,
                                                  sync_with_dataloader=False)
        accelerator = Accelerator(gradient_accumulation_plugin=accumulation)
        self.accelerator = accelerator
        args.world_size = accelerator.num_processes
        args.local_mini_batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps
        args.local_batch_size = args.local_mini_batch_size * args.num_mini_batches
        args.batch_size = int(args.local_batch_size * args.world_size)
        if args.whiten_rewards and args.local_mini_batch_size < 8:
            raise ValueError(f"Per-rank minibatch size {args.local_mini_batch_size} is insufficient for whitening")
        if args.max_steps > 0:  # PPO's steps are rollouts (the parser sets total_episodes so too; a config built in
            args.total_episodes = args.max_steps * args.batch_size  # code may not have been through it)
        args.num_total_batches = math.ceil(args.total_episodes / args.batch_size)  # may train beyond total_episodes
        check_critic_warmup(args.critic_warmup, args.num_total_batches)
        self.local_seed = args.seed + accelerator.process_index * 100003  # Prime
        self.local_dataloader_batch_size = args.local_batch_size
        # Prompts per generate call and no-grad forward pass of a rollout. Decoding is launch-bound on a GPU: there,
        # the whole rollout where a quarter of its memory holds it (the same on every launch of the same GPU: a
        # resumed run generates alike).
        self.rollout_chunk = args.local_rollout_forward_batch_size
        if self.rollout_chunk is None:
            gpu = accelerator.device.type == "cuda"
            budget = torch.cuda.get_device_properties(accelerator.device).total_memory / 4 if gpu else None
            longest_prompt = max(map(len, train_dataset["input_ids"])) if gpu else 0
            self.rollout_chunk = rollout_chunk(args.local_batch_size, budget,
                                               self.policy_model.config.get_text_config().vocab_size, longest_prompt,
                                               args.response_length)
            if gpu and accelerator.is_main_process:
                print(f"PPO: {self.rollout_chunk} of each rollout's {args.local_batch_size} prompts per process are "
                      "generated at once (as a quarter of the GPU's memory holds; --local_rollout_forward_batch_size "
                      "sets it)", flush=True)

        #########
        # Models, optimizer (one over the policy and the value model), scheduler, callbacks
        #########
        for module in [self.policy_model, self.ref_model, self.value_model, self.reward_model]:
            if module is not None:
                disable_dropout_in_model(module)
        self.model = PolicyAndValueWrapper(self.policy_model, self.value_model)
        self.is_deepspeed_enabled = getattr(accelerator.state, "deepspeed_plugin", None) is not None
        self.is_fsdp_enabled = getattr(accelerator.state, "fsdp_plugin", None) is not None
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
            policy_rollouts = args.num_total_batches - args.critic_warmup
            self.lr_scheduler = get_scheduler(args.lr_scheduler_type, self.optimizer,
                                              num_warmup_steps=args.get_warmup_steps(policy_rollouts),
                                              num_training_steps=policy_rollouts,
                                              scheduler_specific_kwargs=args.lr_scheduler_kwargs)
        # transformers' callbacks: when to log and save (DefaultFlowCallback), the reporting integrations
        # (TensorBoard...), the caller's, then the progress bar (or one printed line per log)
        callbacks = [DefaultFlowCallback, *get_reporting_integration_callbacks(args.report_to), *(callbacks or []),
                     PrinterCallback if args.disable_tqdm else ProgressCallback]
        self.callback_handler = CallbackHandler(callbacks, self.model, processing_class, self.optimizer,
                                                self.lr_scheduler)
        self.control = TrainerControl()
        self.state = OnlineTrainerState(
            is_local_process_zero=accelerator.is_local_main_process,
            is_world_process_zero=accelerator.is_main_process,
            stateful_callbacks=[
                cb for cb in self.callback_handler.callbacks + [self.control] if isinstance(cb, ExportableState)
            ],
        )
        if self.args.should_save:
            os.makedirs(self.args.output_dir, exist_ok=True)

        #########
        # Dataloader: one batch per rollout, shuffled alike in every process
        #########
        dataloader = DataLoader(
            self.train_dataset,
            batch_size=self.local_dataloader_batch_size,
            shuffle=True,
            collate_fn=self.data_collator,
            drop_last=True,  # needed; otherwise the last batch will be of ragged shape
        )
        if len(dataloader) == 0:  # the rollout loop would wait for ever on a dataloader with no whole batch
            raise ValueError(f"{self.train_dataset_len} prompts are fewer than one rollout of "
                             f"{self.local_dataloader_batch_size} per process: give more prompts or a smaller batch")
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

        # Reward functions in the reward model's place are scored in place, and only their reward model (if any)
        # goes through DeepSpeed or to the device.
        scorer = self.reward_model if _is_sequence_classifier(self.reward_model) else self.reward_model.reward_model
        if self.is_deepspeed_enabled:
            scorer = prepare_deepspeed(scorer, accelerator) if scorer is not None else None
            if self.ref_model is not None:
                self.ref_model = prepare_deepspeed(self.ref_model, accelerator)
        else:
            if self.ref_model is not None:
                self.ref_model = self.ref_model.to(self.accelerator.device)
            scorer = scorer.to(self.accelerator.device) if scorer is not None else None
        if _is_sequence_classifier(self.reward_model):
            self.reward_model = scorer
        else:
            self.reward_model.reward_model = scorer

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

    def add_callback(self, callback):
        """Add a transformers `TrainerCallback` (an instance or a class), called after those already there."""
        self.callback_handler.add_callback(callback)

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
        args = self.args
        self.model.train()
        # trainer state initialization: a resumed run's counters continue from its checkpoint
        self.state.global_step = self._first_batch
        self.state.episode = self._first_batch * args.batch_size
        self._start_time, self._first_episode = time.time(), self.state.episode  # eps: this launch's own
        self.state.max_steps = args.num_total_batches
        self.state.num_train_epochs = args.total_episodes / self.train_dataset_len
        for name in ("logging_steps", "eval_steps", "save_steps"):  # absolute, where given as a ratio
            steps = getattr(args, name)
            if steps is not None:
                setattr(self.state, name, math.ceil(self.state.max_steps * steps) if steps < 1 else steps)
        if args.target_kl and self.accelerator.is_main_process:  # a controller too slow for the run is said
            # it adapts after each rollout the policy trains on, but the last
            line = kl_horizon_note("--kl_coef", args.target_kl, args.num_total_batches - args.critic_warmup - 1,
                                   args.batch_size, args.kl_horizon, "episodes", "rollouts")
            if line:
                print(line, flush=True)
        if args.critic_warmup and self.accelerator.is_main_process:
            print(f"note: --critic_warmup {args.critic_warmup}: the first {args.critic_warmup} of the run's "
                  f"{args.num_total_batches} rollouts train the value model alone, at --learning_rate; the policy "
                  f"trains in the other {args.num_total_batches - args.critic_warmup}, over which its learning-rate "
                  "schedule runs (objective/critic_warmup marks the warm-up)", flush=True)
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)

        def passes():  # one dataloader batch per rollout, pass after pass over the prompts
            while True:
                yield from self.dataloader

        batches = passes()
        for _ in range(self._first_batch, args.num_total_batches):
            self.state.episode += args.batch_size
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
    def _rollout(self, queries):
        """1-2. One completion per prompt of `queries` (left-padded), with the log-probability of each token under the
        policy that sampled it (the logits at the temperature) and under the reference, the value model's estimate
        at each position, and the score of the completion cut after its first stop token (the rest becomes padding).
        Computed in chunks of `rollout_chunk` prompts."""
        args, pad = self.args, self.processing_class.pad_token_id
        context_length = queries.shape[1]
        generation_kwargs = {"max_new_tokens": args.response_length, "temperature": args.temperature + 1e-7,
                             "top_k": 0.0, "top_p": 1.0, "do_sample": True}
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
        args, r, model = self.args, rollout, self.model
        shape = (args.num_ppo_epochs, args.num_mini_batches, args.gradient_accumulation_steps)
        stats = {name: torch.zeros(shape, device=self.accelerator.device) for name in STEP_STATS}
        skip_policy = ((self.advantages_zeroed or self.critic_warming)
                       and not (self.is_deepspeed_enabled or self.is_fsdp_enabled))
        skip_rollout = self.advantages_zeroed and not skip_policy
        start = r.context_length - 1
        for epoch in range(0 if skip_rollout else args.num_ppo_epochs):
            order = np.random.permutation(args.local_batch_size)
            for mini_batch, first in enumerate(range(0, args.local_batch_size, args.local_mini_batch_size)):
                mini_batch_inds = order[first : first + args.local_mini_batch_size]
                for micro_batch, offset in enumerate(range(0, args.local_mini_batch_size,
                                                           args.per_device_train_batch_size)):
                    with self.accelerator.accumulate(model):
                        i = mini_batch_inds[offset : offset + args.per_device_train_batch_size]
                        output, vpred_temp = forward(model, r.query_responses[i], self.processing_class.pad_token_id)
                        logits = output.logits[:, start:-1]
                        logits /= args.temperature + 1e-7
                        new_logprobs = selective_log_softmax(logits, r.responses[i])
                        with torch.no_grad():
                            step_entropy = entropy(logits).mean()
                        # The logits over the vocabulary are freed before the backward pass fills the memory with
                        # the weights' gradients (the graph keeps what it needs of them).
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
                                                ("ratio", ratio.mean())):
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
        self.optimizer.step()  # accelerate steps once per mini-batch (see __init__)
        self.optimizer.zero_grad()
        if on_cpu:
            trim_heap()

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
        metrics["val/ratio_var"] = _variance(gathered(stats["ratio"]))
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
            self.kl_coef = adaptive_kl_coef(self.kl_coef, metrics["objective/kl"], args.target_kl, args.batch_size,
                                            args.kl_horizon)

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
            print(f"PPO step {self.state.global_step + 1}: every completion of a rollout scored the same "
                  f"(objective/scores {metrics['objective/scores']:.3g}): no reward signal, so its advantages are 0 "
                  f"and {skipped} (said once; objective/advantages_zeroed marks them; "
                  "--skip_rollouts_without_signal false trains on them as TRL does)", flush=True)
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

    # ---- Saving ----

    def save_checkpoint(self):
        """`checkpoint-{global_step}` in `output_dir`: the order of the prompts, the value model and KL coefficient,
        the policy (with LoRA, its adapter), the optimizer, scheduler and random states, and `trainer_state.json`
        last (`lifecycle.checkpoints` trusts only a checkpoint that has it); then checkpoints beyond `save_total_limit`
        go, oldest first (never the newest nor the best). Call it in every process."""
        args = self.args
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        checkpoint.mkdir(parents=True, exist_ok=True)  # every process writes its own random states in it
        if args.should_save:  # the order is drawn alike in every process (see RecordedPasses)
            torch.save(self.dataloader.state(), checkpoint / DATA_ORDER_FILE)
        self.save_extra_checkpoint_files(checkpoint)
        self.create_model_card()
        self.save_model(checkpoint)
        if not args.save_only_model:
            self.save_optimizer_scheduler_and_rng(checkpoint)
        if args.should_save:
            for callback in [*self.callback_handler.callbacks, self.control]:  # their state, as transformers saves it
                if isinstance(callback, ExportableState):
                    self.state.stateful_callbacks[type(callback).__name__] = callback.state()
            self.state.save_to_json(str(checkpoint / TRAINER_STATE_FILE))
            rotate_checkpoints(args.output_dir, args.save_total_limit, self.state.best_model_checkpoint,
                               use_mtime=True)

    def save_extra_checkpoint_files(self, checkpoint):
        """The value model and the KL coefficient. In every process, before the policy and the trainer state."""
        self.save_value_model(checkpoint / VALUE_MODEL_DIR)  # in every process: ZeRO-3 / FSDP gather its weights
        if self.args.should_save:
            (checkpoint / PPO_STATE).write_text(json.dumps({"kl_coef": self.kl_coef}) + "\n")

    def save_model(self, output_dir=None):
        """The policy alone (with LoRA, its adapter), loadable with `from_pretrained`, with the tokenizer and the
        training arguments (`training_args.bin`). Call it in every process: the weights are taken out of DDP or the
        DeepSpeed engine (ZeRO-3 and FSDP gather their shards) and the main process saves the policy's part."""
        output_dir = str(output_dir or self.args.output_dir)
        weights = self.accelerator.get_state_dict(self.model)  # policy.* and value_model.*, whole
        if not self.args.should_save:
            return
        self.trained_policy.save_pretrained(output_dir, state_dict={
            name.removeprefix("policy."): tensor for name, tensor in weights.items() if name.startswith("policy.")})
        self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_FILE))

    def value_model_state_dict(self):
        """The value model's weights on the main process (None on the others). Call it in every process: under
        ZeRO-3 or FSDP they are gathered from all."""
        state_dict = self.accelerator.get_state_dict(self.model)  # policy.* and value_model.*, unsharded
        if not self.accelerator.is_main_process:
            return None
        prefix = "value_model."
        return {name.removeprefix(prefix): tensor for name, tensor in state_dict.items() if name.startswith(prefix)}

    def save_value_model(self, path):
        """Save the value model. Call it in every process: under ZeRO-3 or FSDP its weights are gathered from all."""
        weights = self.value_model_state_dict()
        if self.accelerator.is_main_process:
            self.trained_value_model.save_pretrained(path, state_dict=weights)

    def save_optimizer_scheduler_and_rng(self, checkpoint):
        """The optimizer, learning-rate scheduler (and fp16 loss scaler) states, and this process's random states.
        Call it in every process: DeepSpeed and FSDP save each process's shard of the optimizer state."""
        accelerator, save = self.accelerator, self.args.should_save
        if self.is_deepspeed_enabled:
            self.model.save_checkpoint(str(checkpoint))  # the engine's own checkpoint, global_step*/ (weights too)
        elif self.is_fsdp_enabled:
            from accelerate.utils import save_fsdp_model, save_fsdp_optimizer

            plugin = accelerator.state.fsdp_plugin
            save_fsdp_model(plugin, accelerator, self.model, str(checkpoint))
            save_fsdp_optimizer(plugin, accelerator, self.optimizer, self.model, str(checkpoint))
        elif save:
            torch.save(self.optimizer.state_dict(), checkpoint / OPTIMIZER_FILE)
        if save:
            torch.save(self.lr_scheduler.state_dict(), checkpoint / SCHEDULER_FILE)
            if accelerator.scaler is not None:
                torch.save(accelerator.scaler.state_dict(), checkpoint / SCALER_FILE)
        save_rng_state(checkpoint, accelerator.process_index, accelerator.num_processes)

    def create_model_card(self):
        """TRL's model card (README.md in the output folder), with the policy's base model and PPO's citation."""
        if not self.accelerator.is_main_process:
            return
        from trl.trainer.utils import generate_model_card

        hub_model_id = self.args.hub_model_id
        name_or_path = self.trained_policy.config.name_or_path
        card = generate_model_card(
            base_model=name_or_path if name_or_path and not os.path.isdir(name_or_path) else None,
            model_name=Path(self.args.output_dir).name if hub_model_id is None else hub_model_id.split("/")[-1],
            hub_model_id=None, dataset_name=None, tags=["trl", "ppo"], wandb_url=None, trackio_url=None,
            comet_url=None, trainer_name="PPO", trainer_citation=CITATION,
            paper_title="Fine-Tuning Language Models from Human Preferences", paper_id="1909.08593")
        card.save(os.path.join(self.args.output_dir, "README.md"))

    # ---- Resuming ----

    def resume(self, checkpoint):
        """Go on from `checkpoint` (True: the newest in `output_dir`) as `save_checkpoint` wrote it: the policy's (or
        its adapter's) and the value model's weights, the optimizer, scheduler and random states, the KL coefficient,
        the logs and best checkpoint so far, and the progress (`start_at_batch`). `train(resume_from_checkpoint=...)`
        calls it; checkpoints of earlier versions of this package hold the same files."""
        if checkpoint is True:
            checkpoint = last_checkpoint(self.args.output_dir)
            if checkpoint is None:
                raise UserError(f"--resume_from_checkpoint: {self.args.output_dir} holds no complete checkpoint")
        checkpoint = Path(checkpoint)
        state = json.loads((checkpoint / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
        if not self.is_deepspeed_enabled:  # DeepSpeed's own checkpoint holds the weights
            self.load_weights(checkpoint)
        # The run's logs, held-out evaluations and best checkpoint go on, as transformers' resume restores them.
        self.state.log_history = state.get("log_history", [])
        for name in ("best_metric", "best_model_checkpoint", "best_global_step"):
            setattr(self.state, name, state.get(name))
        self.restore_optimizer_scheduler_and_rng(checkpoint)
        self.kl_coef = json.loads((checkpoint / PPO_STATE).read_text(encoding="utf-8"))["kl_coef"]
        self.start_at_batch(state["global_step"])

    def load_weights(self, checkpoint):
        """The trained models' weights from `checkpoint`: the policy (with LoRA, its adapter) and the value model as
        `save_pretrained` wrote them (under FSDP, its own files of the two together)."""
        if self.is_fsdp_enabled:
            from accelerate.utils import load_fsdp_model

            load_fsdp_model(self.accelerator.state.fsdp_plugin, self.accelerator, self.model, str(checkpoint))
            return
        load_pretrained_weights(self.trained_policy, checkpoint, adapter=self.is_peft_model)
        load_pretrained_weights(self.trained_value_model, checkpoint / VALUE_MODEL_DIR)

    def restore_optimizer_scheduler_and_rng(self, checkpoint):
        """Load the optimizer, learning-rate scheduler (and loss scaler) and random states saved in `checkpoint`, and
        the random states of the data order. Under DeepSpeed, the engine loads its own checkpoint, weights included."""
        checkpoint, accelerator = Path(checkpoint), self.accelerator

        def load(name):
            # weights_only: plain tensors and numbers, nothing is unpickled beyond that. On the CPU: under torchrun on
            # CPUs the tensors are tagged "cpu:0", which torch.load cannot map back; the optimizer moves its state
            # to its parameters' device.
            return torch.load(checkpoint / name, map_location="cpu", weights_only=True)

        if self.is_deepspeed_enabled:
            # one shard of the optimizer state per process, in global_step*/ (the `latest` file names it)
            loaded, _ = self.model.load_checkpoint(str(checkpoint), load_optimizer_states=True,
                                                   load_lr_scheduler_states=True)
            if loaded is None:
                raise UserError(f"{checkpoint} holds no DeepSpeed checkpoint (global_step*/ and `latest`) to resume "
                                "from: resume a run saved under DeepSpeed with the same --config_file")
        elif self.is_fsdp_enabled:
            from accelerate.utils import load_fsdp_optimizer

            load_fsdp_optimizer(accelerator.state.fsdp_plugin, accelerator, self.optimizer, self.model,
                                str(checkpoint))
        else:
            self.optimizer.load_state_dict(load(OPTIMIZER_FILE))
        self.lr_scheduler.load_state_dict(load(SCHEDULER_FILE))
        if accelerator.scaler is not None and (checkpoint / SCALER_FILE).exists():
            accelerator.scaler.load_state_dict(load(SCALER_FILE))
        if not load_rng_state(checkpoint, accelerator.process_index, accelerator.num_processes) \
                and accelerator.is_main_process:
            print(f"note: {checkpoint} holds no random state of this launch's process count (its run had another): "
                  "the resumed run draws other random numbers than one uninterrupted run", flush=True)
        if (checkpoint / DATA_ORDER_FILE).exists():  # not in checkpoints of earlier versions of this package
            self.dataloader.load_state(load(DATA_ORDER_FILE))

    def start_at_batch(self, done):
        """Continue a run that stopped after `done` batches: train() runs only the batches left, its step and
        episode counters continuing from `done`, and the rest of the pass over the prompts it stopped in comes first,
        in the order that pass was drawn in. Call it after `restore_optimizer_scheduler_and_rng`."""
        self.dataloader.skip_first(done % len(self.dataloader))
        self._first_batch = done


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
    from transformers.trainer_optimizer import is_optimizer_factory
    from transformers.trainer_pt_utils import get_parameter_names

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


class RecordedPasses:
    """The train dataloader, keeping the random state that the order of the pass in flight was drawn from.

    `DataLoader(shuffle=True)` draws a pass's order when the pass begins: from its `sampler`'s generator, which
    accelerate gives it (seeded alike in every process) in a multi-process run, else one seed from torch's global
    generator. A run resumed inside a later pass must draw that pass again from the state it was drawn from: the
    checkpoint's random state is where that pass left it.
    """

    def __init__(self, dataloader, sampler):
        self.dataloader, self.sampler = dataloader, sampler
        self.pass_start = None  # the order generator's state when the pass in flight began
        self._first_pass = None  # the rest of the pass a resumed run stopped in

    def _generator_state(self, state=None):
        """The state of the generator that passes are drawn from; with `state`, set it first."""
        generator = self.sampler.generator
        if state is not None:
            (generator.set_state if generator is not None else torch.set_rng_state)(state)
        return generator.get_state() if generator is not None else torch.get_rng_state()

    def state(self):
        return {"pass_start": self.pass_start, "now": self._generator_state()}

    def load_state(self, state):
        """Put back `state()` as saved; then `skip_first` draws the pass in flight again."""
        self.pass_start = state["pass_start"]
        self._generator_state(state["now"])  # the sampler's generator is not among the checkpoint's random states

    def skip_first(self, skip):
        """Draw the pass in flight again from its saved state, and leave out its first `skip` batches."""
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


def mean_logs(logs):
    """One log of several rollouts' `logs`: the mean of each value, and the last of the counters and the learning
    rate (the value at the step logged)."""
    means = {}
    for key, last in logs[-1].items():
        values = [log[key] for log in logs if key in log]
        means[key] = last if key in ("eps", "lr", "episode") else sum(values) / len(values)
    return means


def _variance(values):
    """The variance of `values`, NaN for a single one (TRL's val/ratio_var made torch warn there)."""
    return values.var().item() if values.numel() > 1 else float("nan")


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


def _is_sequence_classifier(model):
    return not hasattr(getattr(model, "module", model), "score_completions")


def _is_peft_model(model):
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)
