"""`GRPOTrainingConfig`: TRL's `GRPOConfig` with this package's defaults and `prompts_per_step`.

Imported by train_grpo.py alone: importing a TRL config costs seconds. Pickle (the Trainer's training_args.bin)
finds the class here, as rlhf.grpo_config.GRPOTrainingConfig.
"""

from dataclasses import dataclass, field

from config import (
    GPU_PROMPTS_PER_GENERATION,
    HeldOutArguments,
    RunDefaults,
    at_least,
    change,
    check_sampling,
    note,
)
from rlhf.processes import launched_processes, on_gpu
from rlhf.trl_compat import GRPOConfig


@dataclass
class GRPOTrainingConfig(HeldOutArguments, RunDefaults, GRPOConfig):
    """TRL's `GRPOConfig` with this package's defaults, plus `prompts_per_step` and `prompts_per_generation`.

    Batch semantics: TRL counts *completions*, not prompts. `per_device_train_batch_size` is how many
    completions go through one forward/backward pass on one device. One optimizer step sees
    `prompts_per_step * num_generations` completions; `gradient_accumulation_steps` is derived from that.
    """

    _argument_group_name = "Training (TRL's GRPOConfig and transformers' TrainingArguments)"

    output_dir: str = field(
        default="./grpo_training_output",
        metadata={"help": "Where checkpoints, TensorBoard logs, the run manifest and the final model go."},
    )
    prompts_per_step: int | None = field(
        default=None,
        metadata={
            "help": "Prompts per optimizer step (summed over devices). With num_generations=4 that is 16 completions "
            "per step; gradient_accumulation_steps is derived from it. Default: 4, or 0 where TRL's batch flags are "
            "given (--gradient_accumulation_steps, --generation_batch_size, --steps_per_generation): 0 uses them as "
            "they are, as `trl grpo` does."
        },
    )
    batch_size: int | None = field(
        default=None,
        metadata={
            "help": "A hand-written GRPO's batch: prompts per forward/backward pass on each device, each with its "
            "num_generations completions, gradient_accumulation_steps passes per optimizer step. Translated, saying "
            "so: --prompts_per_step = batch_size x gradient_accumulation_steps x processes, "
            "--per_device_train_batch_size = batch_size x num_generations (the manifest records those)."
        },
    )
    prompts_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Prompts whose completions are generated together, then trained on over prompts_per_generation / "
            "prompts_per_step optimizer steps (a multiple of --prompts_per_step). Default: 64 on a GPU, where "
            "generation is most of a step and batches well; --prompts_per_step on a CPU. Completions trained on at "
            "later steps come from an older policy: TRL weighs them by the ratio to the old log-probabilities, "
            "clipped at --epsilon."
        },
    )
    num_generations: int = field(
        default=4, metadata={"aliases": ["--num_return_sequences", "--num-return-sequences", "--group_size",
                                         "--group-size"],
                             "help": "Completions sampled per prompt, the GRPO group (--num_return_sequences and "
                             "--group_size work too)."}
    )
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    top_p: float = field(
        default=1.0,
        metadata={
            "help": "Nucleus sampling threshold of the rollouts. 1.0 (as TRL, OpenRLHF and verl train): the "
            "log-probabilities, importance ratio and KL are computed on the full distribution, so sampling from a "
            "truncated one would bias the gradient. Evaluation keeps 0.9."
        },
    )
    per_device_train_batch_size: int = field(
        default=16,
        metadata={
            "help": "Completions (not prompts) per forward/backward pass on one device. Lower it to save memory. "
            "Capped at one step's share per device (16 completions on 2 GPUs: 8 each)."
        },
    )
    gradient_accumulation_steps: int | None = field(
        default=None,
        metadata={"help": "Forward/backward passes per optimizer step. Default: derived from --prompts_per_step "
                          "(given, it is TRL's batch flag: see --prompts_per_step)."},
    )
    max_completion_length: int = field(
        default=256, metadata={"aliases": ["--max_new_tokens", "--max-new-tokens"],
                               "help": "Most tokens generated per completion (--max_new_tokens works too)."}
    )
    learning_rate: float = field(default=5e-6, metadata={"help": "Peak learning rate (AdamW)."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule."})
    num_train_epochs: float = field(
        default=3.0, metadata={"aliases": ["--num_epochs", "--num-epochs"],
                               "help": "Passes over the prompts (unless --max_steps; --num_epochs works too)."}
    )
    epsilon: float = field(
        default=0.2, metadata={"aliases": ["--clip_range", "--clip-range", "--cliprange"],
                               "help": "PPO-style clip range of the probability ratio (--clip_range works too)."}
    )
    beta: float = field(
        default=0.04,
        metadata={
            "aliases": ["--kl_coef", "--kl-coef"],
            "help": "KL coefficient against the frozen reference. Must be > 0 to keep the reference model and log "
            "`kl` (TRL's own default is 0.0). --kl_coef works too."
        },
    )
    target_kl: float | None = field(
        default=None,
        metadata={"help": "Adaptive KL (ours; TRL's GRPO guide describes it, no TRL release has it): --beta moves so "
                  "that `kl` (per token, as logged) stays near this value, logged as `beta` at every step. None keeps "
                  "--beta fixed."},
    )
    kl_horizon: int = field(
        default=10_000, metadata={"help": "Adaptive KL horizon in completions: larger adapts more slowly."}
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every N optimizer steps."})

    def __post_init__(self):
        check_sampling(self)
        if self.target_kl is not None and self.target_kl <= 0:
            raise ValueError(f"--target_kl must be > 0 (or unset for a fixed --beta), got {self.target_kl}.")
        if self.target_kl is not None and self.beta == 0:
            raise ValueError("--target_kl adapts --beta, which is 0 here (no reference model, no KL to measure); "
                             "give --beta > 0 (e.g. 0.04) or drop --target_kl.")
        if self.batch_size is not None:
            self._batch_from_batch_size()
        if self.prompts_per_step is None:  # TRL's batch flags given (a `trl grpo` YAML): they are used as they are
            trl_batch = (self.gradient_accumulation_steps, self.generation_batch_size, self.steps_per_generation)
            self.prompts_per_step = 4 if trl_batch == (None, None, None) else 0
            if self.gradient_accumulation_steps and self.per_device_train_batch_size:
                # said always: a flag that elsewhere multiplies prompts multiplies completions here
                completions = (self.per_device_train_batch_size * self.gradient_accumulation_steps
                               * launched_processes())
                note(self, "gradient_accumulation_steps", f"note: --gradient_accumulation_steps "
                     f"{self.gradient_accumulation_steps} sets TRL's batch, counted in completions: "
                     f"--per_device_train_batch_size {self.per_device_train_batch_size} x "
                     f"{self.gradient_accumulation_steps} = {completions} completions per optimizer step, "
                     f"{completions / self.num_generations:g} prompts x {self.num_generations} completions "
                     "(--prompts_per_step N counts prompts instead)", always=True)
        if self.prompts_per_step < 0:
            raise ValueError(f"--prompts_per_step must be >= 0, got {self.prompts_per_step}.")
        at_least(self, 2, "num_generations")  # GRPO's advantage compares completions of one prompt
        at_least(self, 1, "per_device_train_batch_size")
        if self.prompts_per_step:
            self._batch_from_prompts()
        elif self.gradient_accumulation_steps is None:
            self.gradient_accumulation_steps = 1  # TrainingArguments' default
        if self.beta < 0:
            raise ValueError(f"--beta must be >= 0, got {self.beta}.")
        super().__post_init__()

    def _batch_from_batch_size(self):
        """A hand-written GRPO's `--batch_size` (prompts per pass and device) as this package's prompts per step."""
        at_least(self, 1, "batch_size", "num_generations")
        if self.prompts_per_step is not None:
            raise ValueError(f"--batch_size {self.batch_size} and --prompts_per_step {self.prompts_per_step} both set "
                             "the prompts of a step; give one (--prompts_per_step counts prompts per optimizer step)")
        accumulation, processes = self.gradient_accumulation_steps or 1, launched_processes()
        self.prompts_per_step = self.batch_size * accumulation * processes
        self.per_device_train_batch_size = self.batch_size * self.num_generations
        passes = f", {accumulation} passes" if accumulation > 1 else ""
        devices = f" on each of {processes} processes" if processes > 1 else ""
        note(self, "batch_size", f"note: --batch_size {self.batch_size} -> --prompts_per_step {self.prompts_per_step} "
             f"--per_device_train_batch_size {self.per_device_train_batch_size} ({self.batch_size} prompts x "
             f"{self.num_generations} completions per pass{devices}{passes} per optimizer step; this package counts "
             "prompts per optimizer step)", always=True)
        self.batch_size = None  # recorded as what it became

    def _batch_from_prompts(self):
        """Translate prompts into TRL's completion-counted batch, before TRL derives its generation batch from it."""
        world_size = launched_processes()
        completions = self.prompts_per_step * self.num_generations
        if self.per_device_train_batch_size * world_size > completions and completions % world_size == 0:
            # More room per pass than one step holds (e.g. the default 16 on 2 GPUs): each device takes its share.
            change(self, "per_device_train_batch_size", completions // world_size,
                   "one optimizer step's share per process")
        per_pass = self.per_device_train_batch_size * world_size
        if completions % per_pass:
            raise ValueError(
                f"prompts_per_step x num_generations = {completions} completions per optimizer step is not a "
                f"multiple of per_device_train_batch_size x processes = {per_pass}; lower "
                f"--per_device_train_batch_size so that it divides evenly."
            )
        accumulation = completions // per_pass
        if self.gradient_accumulation_steps not in (None, 1, accumulation):
            raise ValueError(
                f"--gradient_accumulation_steps {self.gradient_accumulation_steps} conflicts with "
                f"--prompts_per_step {self.prompts_per_step} (which needs {accumulation}); pass "
                f"--prompts_per_step 0 to set TRL's batch flags yourself."
            )
        change(self, "gradient_accumulation_steps", accumulation, "derived from --prompts_per_step")
        if self.prompts_per_generation is None:
            self.prompts_per_generation = (max(GPU_PROMPTS_PER_GENERATION, self.prompts_per_step)
                                           if on_gpu(self.use_cpu) else self.prompts_per_step)
        if self.prompts_per_generation % self.prompts_per_step:
            raise ValueError(
                f"--prompts_per_generation {self.prompts_per_generation} is not a multiple of --prompts_per_step "
                f"{self.prompts_per_step}; each optimizer step takes prompts_per_step of the prompts generated."
            )
        # TRL derives steps_per_generation (forward/backward passes per generation) from this.
        change(self, "generation_batch_size", self.prompts_per_generation * self.num_generations,
               "derived from --prompts_per_generation x --num_generations; pass --prompts_per_step 0 to set it")
