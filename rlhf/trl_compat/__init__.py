"""Everything this package assumes about TRL's and transformers' internals, in one place.

PPO's trainer is not here: it is the package's own code (`rlhf/ppo/`, copied from TRL 1.12, which TRL 1.13 removed);
the TRL helpers it still uses are (`_WHERE`).
Moving GRPO and the reward model to another TRL release should be a change to this package alone (CONTRIBUTING.md,
"Moving TRL", says which test checks what). Three kinds of thing live here:

Import shims (`_WHERE`): each TRL name the package uses, and each of transformers' internals (outside its documented
API), with the module it lives in under the releases of `TRL_VERSIONS` (and the transformers named there), loaded on
first use (PEP 562) so that scripts that only parse flags (plotting, --help) start in a second; with
`check_trl_version()`, which refuses a TRL outside those releases in one line, and the filters for notices every run
would print (warnings; DeepSpeed's log of its guess of the CPU).

Fixes of TRL or transformers behaviour, each named for what it fixes and citing what goes wrong without it:
- `rlhf/trl_compat/grpo.py`: `ResumableGeneration` (a mixin for TRL's online trainers, GRPO's and RLOO's) and
  `ResumableGRPOTrainer`, TRL's GRPO trainer resumed where it stopped, also inside a generation block and in a later
  pass over the prompts (TRL 1.12 generates again and draws the first pass's order); on a CPU, its LM head's
  vocabulary tile (`cpu_vocabulary_tile`: TRL's kept GBs of temporaries in its CPU backward);
- `rlhf/trl_compat/dynamic_sampling.py`: `DynamicSampling`, DAPO's dynamic sampling in TRL's GRPOTrainer (TRL has none,
  huggingface/trl#3708): more prompts generated until a generation holds groups whose rewards differ;
- `rlhf/trl_compat/callbacks.py`: `ScheduleFromResumedStep`, a resumed or continued run's first step at its own
  schedule's rate (transformers gives it the old schedule's rate, 0 at the end of a finished cosine run), and
  `NoStepPastTheEnd`, no step past a resumed run's end (transformers trains one before it asks);
- `close_progress_bar(trainer)` (here): transformers closes its progress bar only when training ends normally.

`tests/test_trl_compat.py` checks each by behaviour on tiny models, and each fix against TRL's own behaviour
without it; `loading_whole` is also used by PPO.
"""

import contextlib
import importlib
import logging
import warnings

from rlhf.errors import UserError

# The TRL releases this package runs GRPO and the reward model on: those the suite passed with (1.16.0, the newest;
# PPO is the package's own and needs none of TRL's trainers).
TRL_VERSIONS = ">=1.16.0,<1.17"


def check_trl_version():
    """Refuse a TRL outside `TRL_VERSIONS`: the fixes here rely on its private details (see the tests)."""
    import trl
    from packaging.specifiers import SpecifierSet

    if trl.__version__ not in SpecifierSet(TRL_VERSIONS):
        raise UserError(
            f"this package needs trl{TRL_VERSIONS} (found {trl.__version__}): pip install -r requirements.txt"
        )


# Notices that every run would print and that say nothing about this run: (message, category, module) as
# `warnings.filterwarnings` takes them. A test checks that a tiny PPO run still gives each.
KNOWN_WARNINGS = [
    # TRL still uses the `gradient_checkpointing` names, which transformers 5 renamed `activation_checkpointing`
    # (as does PPO's PolicyAndValueWrapper, copied from TRL, and TRL's unwrap_model_for_generation); both names work.
    (r"`\w*gradient_checkpointing\w*` is deprecated", FutureWarning, ""),
]


def skip_deepspeeds_shared_memory_kernel():
    """Keep DeepSpeed on CPU processes (DS_ACCELERATOR=cpu) from compiling its shared-memory all-reduce. Its torch
    backend builds that C++ kernel as it starts (`deepspeed.comm.torch.TorchBackend`, deepspeed 0.19.8) for
    `inference_all_reduce`, which training never calls: a first launch on a machine spent 35-65 s of 2 cores in the
    compiler, and one without a C++ compiler and OpenMP fails. Marked not compatible in DeepSpeed's own table of ops
    (edits to it persist, `deepspeed.ops.__compatible_ops__`), the kernel is not built: DeepSpeed's fallback, the
    process group's all-reduce, is what training uses anyway."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _silence_known_warnings():
    """Silence `KNOWN_WARNINGS`, each where it arises, and DeepSpeed's guess of the CPU (`DeepSpeedGuessesCPU`)."""
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    deepspeed = logging.getLogger("DeepSpeed")  # deepspeed.utils.logger, the same object once it is imported
    if not any(isinstance(f, DeepSpeedGuessesCPU) for f in deepspeed.filters):
        deepspeed.addFilter(DeepSpeedGuessesCPU())


class DeepSpeedGuessesCPU(logging.Filter):
    """Drops DeepSpeed's "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect
    it." in a run that does not train with DeepSpeed. Where deepspeed is installed, accelerate imports it in every run
    (`accelerate.utils.other.extract_model_from_parallel`, to check whether a model is its engine), and DeepSpeed
    logs that line on import on any machine without a CUDA GPU: it says nothing about a run that does not use it.
    Under DeepSpeed (`accelerate launch` with a DeepSpeed config) the line stays."""

    def filter(self, record):
        import os

        # How accelerate's launcher asks for DeepSpeed, read as `rlhf.processes.launched_engine` reads it (that module
        # imports this one)
        deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
        return deepspeed or not record.getMessage().startswith("Setting accelerator to CPU.")


_silence_known_warnings()

from trl import TrlParser  # noqa: E402 (after the filters: importing TRL can warn)

# Where each name lives: TRL's, transformers' (where not in its documented API) or our fix of it. Every module of the
# package takes these names from here; `test_every_name_the_package_takes_from_a_library_is_where_we_say` loads each.
_WHERE = {
    # TRL's trainers and configs (TRL 1.16.0)
    "GRPOConfig": "trl",
    "GRPOTrainer": "trl",
    "ModelConfig": "trl",
    "RewardConfig": "trl",
    "RewardTrainer": "trl",
    "ScriptArguments": "trl",
    "get_peft_config": "trl",
    "get_quantization_config": "trl",
    # TRL's helpers that every TRL trainer uses, for the package's PPO (rlhf/ppo; TRL 1.12.0 to 1.16.0)
    "disable_dropout_in_model": "trl.trainer.utils",
    "generate_model_card": "trl.trainer.utils",
    "pad": "trl.trainer.utils",
    "prepare_deepspeed": "trl.models.utils",
    "unwrap_model_for_generation": "trl.models.utils",
    # transformers' internals, outside its documented API (transformers 5.23.0): PPO's checkpoints and optimizer,
    # the random states of a checkpoint, the --report_to integrations
    "ExportableState": "transformers.trainer_callback",
    "get_parameter_names": "transformers.trainer_pt_utils",
    "integration_utils": "transformers.integrations.integration_utils",  # the module
    "is_optimizer_factory": "transformers.trainer_optimizer",
    "rotate_checkpoints": "transformers.trainer_utils",
    "safe_globals": "transformers.trainer_pt_utils",
    "set_rng_state_for_device": "transformers.trainer_pt_utils",
    # Our callbacks on transformers' Trainer (a module of their own: transformers' trainer modules take seconds to
    # import, which a script's parsing does not wait for)
    "NoStepPastTheEnd": "rlhf.trl_compat.callbacks",
    "ProgressBar": "rlhf.trl_compat.callbacks",
    "ScheduleFromResumedStep": "rlhf.trl_compat.callbacks",
    "show_progress_bar": "rlhf.trl_compat.callbacks",
    # Our fixes of TRL
    "ResumableGRPOTrainer": "rlhf.trl_compat.grpo",
    "ResumableGeneration": "rlhf.trl_compat.grpo",
    "add_reward_func": "rlhf.trl_compat.grpo",
}

__all__ = ["TRL_VERSIONS", "ReachedTheEnd", "TrlParser", "check_trl_version", "close_progress_bar", "say",
           "skip_deepspeeds_shared_memory_kernel", *_WHERE]


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(_WHERE[name])
    except ImportError:
        check_trl_version()  # another release, where a name moved: say which release is needed
        raise
    return module if _WHERE[name].rpartition(".")[2] == name else getattr(module, name)


def close_progress_bar(trainer):
    """Close the Trainer's progress bar now, so that it does not redraw itself after our last line.

    transformers' `ProgressCallback` keeps its tqdm bar in `training_bar` (not a documented attribute) and closes it
    in `on_train_end`, which a run stopped by an exception never reaches. Calling `on_train_end` ourselves is no
    better: it fails when no bar was opened yet.
    """
    for callback in trainer.callback_handler.callbacks:
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
            callback.training_bar = None


def say(line):
    """Print a line while a run trains: through tqdm, which clears the progress bar's line first and draws the bar
    again under it (a plain print would land at the end of the bar's line)."""
    import sys

    from tqdm import tqdm

    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


class ReachedTheEnd(Exception):
    """A resumed run whose checkpoint is already at its last step: nothing is left to train."""


@contextlib.contextmanager
def loading_whole():
    """Models loaded inside load whole in each process, also under DeepSpeed ZeRO-3.

    With ZeRO-3's `zero3_init_flag` (configs/accelerate/deepspeed_zero3.yaml), transformers' `from_pretrained`
    partitions every model as it loads (`deepspeed.zero.Init` while `transformers.integrations.deepspeed.
    is_deepspeed_zero3_enabled()`), which only a DeepSpeed engine can run. A frozen model that no engine wraps (GRPO's
    reward model scorer, `rlhf.rewards.reward_model.reward_model_scorer`) then fails at its first forward
    (`RuntimeError: 'weight' must be 2-D`), and an empty one on the meta device (`rlhf.checks.check_lora_targets`) as
    it is built (`NotImplementedError: Cannot copy out of meta tensor`). Inside this block, transformers' DeepSpeed
    config is unset.
    """
    from transformers.integrations import deepspeed

    kept = deepspeed._hf_deepspeed_config_weak_ref  # transformers 5.23: the one reference to the config in force
    config = kept() if kept is not None else None
    deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if config is not None:
            deepspeed.set_hf_deepspeed_config(config)  # put back through transformers' own setter


# ---- Where the package hooks into transformers' Trainer, accelerate and the interpreter beyond their public API ----


def accelerate_state():
    """accelerate's `PartialState` once something (the training arguments) has set it up; None before. Never creates
    it: a new one would start the process group. accelerate (1.15.0) has no public way to ask whether it is set up:
    its shared state (`PartialState._shared_state`) is empty until then. Light on purpose: it answers in scripts
    that never load accelerate (`rlhf.processes`)."""
    import sys

    state = sys.modules.get("accelerate.state")
    if state is None or not state.PartialState._shared_state:
        return None
    return state.PartialState()


def parser_actions(parser):
    """The actions of an argparse parser, in the order they were added: `ArgumentParser._actions` (Python 3.11-3.13),
    which argparse reads itself and offers no public accessor for."""
    return parser._actions


def add_callback_before_reporters(trainer, callback):
    """Put `callback` right before the Trainer's reporting integrations (TensorBoard...), which stay where they are,
    and return those: keys its `on_log` adds to a log then reach them. `Trainer.add_callback` appends after them; this
    inserts into `trainer.callback_handler.callbacks`, the list the Trainer calls in order."""
    from transformers.integrations import get_reporting_integration_callbacks

    reporters = tuple(get_reporting_integration_callbacks(trainer.args.report_to))
    callbacks = trainer.callback_handler.callbacks
    first = next((i for i, each in enumerate(callbacks) if isinstance(each, reporters)), len(callbacks))
    callbacks.insert(first, callback)
    return [each for each in callbacks if isinstance(each, reporters)]


def log_to_reporters(trainer, args, state, logs):
    """Hand `logs` to the Trainer's reporting integrations alone (TensorBoard...): metrics measured inside a callback
    (held-out evaluation), where `Trainer.log` would call every callback's `on_log` again, this one's included."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    reporters = tuple(INTEGRATION_TO_CALLBACK.values())
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, reporters):
            callback.on_log(args, state, trainer.control, logs=dict(logs))


def exit_now(code):
    """End a process of a multi-process run with `code`, after the exit handlers but without interpreter shutdown.

    Shutdown aborted finished runs on 2 CPU cores ("terminate called without an active exception", SIGABRT, after
    the model was saved; 1 of 172 two-process GRPO runs, 2 of 95 runs of a 20-line DDP script whose rank 0 ends 2 s
    later, 0 of 40 of that script ending as here), destroyed process group or not: DDP and DeepSpeed keep the gloo
    process group alive, a gloo worker thread that drops its last collective must take the GIL to release a Python
    object it holds, and a thread that asks for the GIL during shutdown is ended through a C++ destructor that cannot
    unwind (core dump: `ProcessGroupGloo::runLoop` > `~AsyncAllreduceWork` > `~ThreadLocalState` >
    `gil_scoped_acquire` > `pthread_exit`; pytorch#179291). Nothing is left for shutdown to do: the exit handlers
    run here, the streams are flushed, and the process ends.
    """
    import atexit
    import logging
    import os
    import sys

    atexit._run_exitfuncs()  # the interpreter's own exit handlers, run now: it will not shut down
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
