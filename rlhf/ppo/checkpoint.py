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
"""A PPO run's checkpoints: what `PPOTrainer.save_checkpoint` writes (the files transformers' `Trainer` writes: the
policy, `optimizer.pt`, `scheduler.pt`, `rng_state*.pth`, `trainer_state.json` last; besides them the value model, the
KL coefficient and the order of the prompts), and `resume`, which goes on from one. `Checkpointing` is a base of
`PPOTrainer`; `RecordedPasses` is its dataloader, which keeps the random state each pass over the prompts was drawn
from.
"""

import json
import os
import textwrap
from pathlib import Path

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rlhf.errors import UserError
from rlhf.lifecycle.checkpoints import last_checkpoint, load_pretrained_weights, load_rng_state, save_rng_state
from rlhf.trl_compat import ExportableState, rotate_checkpoints

VALUE_MODEL_DIR = "value_model"  # in a checkpoint and the output folder: the value model
PPO_STATE = "ppo_state.json"  # in a checkpoint: the KL coefficient of the next rollout
DATA_ORDER_FILE = "ppo_data_order.pt"  # in a checkpoint: the random states of the order of the prompts
# The rest of a checkpoint's files, under the names transformers' Trainer gives them (what `lifecycle.checkpoints` and
# `lifecycle.run` look for, and what checkpoints of earlier versions of this package hold).
TRAINER_STATE_FILE = "trainer_state.json"  # written last: a checkpoint without it is incomplete
OPTIMIZER_FILE, SCHEDULER_FILE, SCALER_FILE = "optimizer.pt", "scheduler.pt", "scaler.pt"
TRAINING_ARGS_FILE = "training_args.bin"
CITATION = textwrap.dedent("""\
    @article{mziegler2019fine-tuning,
        title        = {{Fine-Tuning Language Models from Human Preferences}},
        author       = {Daniel M. Ziegler and Nisan Stiennon and Jeffrey Wu and Tom B. Brown and Alec Radford and Dario Amodei and Paul F. Christiano and Geoffrey Irving},
        year         = 2019,
        eprint       = {arXiv:1909.08593}
    }""")  # noqa: E501


class Checkpointing:
    """Saving and resuming, as methods of `PPOTrainer` (its base): they read `args`, `state`, the prepared `model`,
    `optimizer`, `lr_scheduler`, `dataloader` and `accelerator`, and `kl_coef`."""

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
        from rlhf.trl_compat import generate_model_card

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

