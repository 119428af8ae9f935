"""What `rlhf.trl_compat` assumes about TRL and transformers, checked by behaviour on the installed release.

Each test names the fix or hook in `rlhf/trl_compat/` it covers, and fails with a message saying what to re-check.
Each fix of a TRL bug is tested both ways: the fixed trainer does what the arithmetic says, and TRL's own trainer
still does not (when that test fails after an upgrade, the fix may be obsolete). Everything runs on tiny models in
this process; where a behaviour needs DDP, the model is wrapped in DDP in a process group of one, as accelerate
wraps it in a multi-process run (the real 2-process runs are in `tests/test_distributed.py`).
"""

import importlib
import inspect
import json
import re
import sys
import warnings
from collections import Counter
from contextlib import contextmanager

import pytest

from conftest import error_line


@pytest.fixture
def hooks(tiny_models, tmp_path):
    """A tiny `PPOTrainerHooks` that records what its two hooks receive: 4 prompts, 2 rollouts of 2."""
    return tiny_hooks(tiny_models, tmp_path, per_device_train_batch_size=2)


def tiny_hooks(tiny_models, tmp_path, **config):
    """A tiny recording `PPOTrainerHooks` on 4 prompts: 1 PPO epoch, 4 episodes, `config` on top."""
    from rlhf.trl_compat import PPOTrainerHooks

    class Recording(PPOTrainerHooks):
        def __init__(self, *args, **kwargs):
            self.completions, self.checkpoints = [], []
            super().__init__(*args, **kwargs)

        def record_completions(self, completions, stop_token_id):
            self.completions.append((completions, stop_token_id))

        def save_extra_checkpoint_files(self, checkpoint):
            self.checkpoints.append((checkpoint, (checkpoint / "trainer_state.json").exists()))

    return tiny_ppo(tiny_models, tmp_path, Recording, **config)


def tiny_ppo(tiny_models, tmp_path, trainer_class, lora=False, **config):
    """A tiny PPO trainer of `trainer_class` on 4 prompts: 1 PPO epoch, 4 episodes, `config` on top. With `lora`, the
    policy gets a LoRA adapter and no reference model (the reference is the policy with its adapter off)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlhf.trl_compat import PPOConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    prompts = Dataset.from_dict({"input_ids": [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]})
    config = {"num_ppo_epochs": 1, "total_episodes": 4, **config}
    args = PPOConfig(output_dir=str(tmp_path / "out"), response_length=4, stop_token="eos", num_sample_generations=0,
                     bf16=False, gradient_checkpointing=False, report_to=[], seed=0, **config)
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return trainer_class(
        args=args, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
        ref_model=None if lora else AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
        reward_model=AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"]),
        value_model=AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"]),
        train_dataset=prompts, eval_dataset=prompts, peft_config=peft_config,
    )


def trl_ppo_trainer():
    """TRL's own PPOTrainer, none of our fixes."""
    from rlhf.trl_compat import PPOTrainer

    return PPOTrainer


@contextmanager
def under_ddp(trainer, tmp_path):
    """`trainer`'s model wrapped in DDP, as accelerate wraps it in a multi-process run, in a process group of one."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'ddp_store'}", rank=0, world_size=1)
    try:
        trainer.model = DistributedDataParallel(trainer.model)
        yield trainer
    finally:
        dist.destroy_process_group()


# ---- The pinned release ----


def test_the_installed_trl_is_the_pinned_release():
    import trl

    from rlhf.trl_compat import TRL_VERSION, check_trl_version

    check_trl_version()
    assert trl.__version__ == TRL_VERSION == "1.12.0", "the checks below describe TRL 1.12.0"


def test_another_trl_release_is_refused_with_the_fix(monkeypatch):
    import trl

    from rlhf.errors import UserError
    from rlhf.trl_compat import check_trl_version

    monkeypatch.setattr(trl, "__version__", "1.13.0")
    with pytest.raises(UserError) as error:
        check_trl_version()
    assert str(error.value) == "this package needs trl==1.12.0 (found 1.13.0): pip install -r requirements.txt"


def test_train_ppo_refuses_another_trl_release_in_one_line(run_cli, monkeypatch, tmp_path):
    import trl

    monkeypatch.setattr(trl, "__version__", "1.13.0")
    # Import the PPO layer afresh, as a new process would (monkeypatch puts the modules back afterwards).
    for module in ("rlhf.ppo", "rlhf.trl_compat.ppo", "rlhf.trl_compat.ppo_fixes"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    result = run_cli("train_ppo.py", "--output_dir", tmp_path / "out")
    refused = "error: this package needs trl==1.12.0 (found 1.13.0): pip install -r requirements.txt"
    assert error_line(result) == refused
    assert not (tmp_path / "out").exists()


# ---- Warnings silenced in rlhf.trl_compat._silence_known_warnings ----


def test_each_silenced_warning_is_one_a_tiny_ppo_run_still_gives(tiny_models, tmp_path, monkeypatch):
    import trl.experimental

    from rlhf.trl_compat import KNOWN_WARNINGS, _silence_known_warnings

    def run(silenced):
        """The warnings of importing trl.experimental and of a tiny PPO run (1 PPO epoch: ratio_var over one value)."""
        monkeypatch.delenv("TRL_EXPERIMENTAL_SILENCE", raising=False)
        with warnings.catch_warnings(record=True) as given:
            warnings.simplefilter("always")
            if silenced:
                _silence_known_warnings()
            importlib.reload(trl.experimental)
            tiny_hooks(tiny_models, tmp_path / str(silenced), per_device_train_batch_size=2).train()
        return [f"{warning.category.__name__}: {warning.message}" for warning in given]

    given, shown = run(silenced=False), run(silenced=True)
    hook = "rlhf.trl_compat.KNOWN_WARNINGS"
    for message, category, _ in [*KNOWN_WARNINGS, ("You are importing from 'trl.experimental'", Warning, "")]:
        pattern = re.compile(message)
        assert any(pattern.search(warning) for warning in given), (
            f"a tiny PPO run no longer warns {message!r}: drop that filter from {hook}")
        assert not any(pattern.search(warning) for warning in shown), f"{message!r} is not silenced: re-check {hook}"


# ---- The progress bar (close_progress_bar) ----


def test_the_progress_bar_is_kept_in_training_bar_and_close_progress_bar_closes_it(hooks):
    from transformers import ProgressCallback

    from rlhf.trl_compat import close_progress_bar

    progress = [callback for callback in hooks.callback_handler.callbacks if isinstance(callback, ProgressCallback)]
    assert len(progress) == 1, "no ProgressCallback in trainer.callback_handler.callbacks: re-check close_progress_bar"
    progress[0].on_train_begin(hooks.args, hooks.state, hooks.control)
    bar = getattr(progress[0], "training_bar", None)
    assert bar is not None, "ProgressCallback no longer keeps its bar in `training_bar`: re-check close_progress_bar"
    close_progress_bar(hooks)
    assert progress[0].training_bar is None and bar.disable  # tqdm's close() disables the bar


# ---- PPOTrainerHooks: generation (record_completions), the KL coefficient, the dataloader, the counters ----


def test_the_completions_trained_on_are_recorded_and_the_sample_table_is_not(hooks):
    hook = "PPOTrainerHooks.__init__ (recording_generate)"
    hooks.train()  # 2 rollouts of 2 prompts
    assert len(hooks.completions) == 2, f"TRL no longer generates through the policy's generate(): re-check {hook}"
    for completions, stop_token_id in hooks.completions:
        assert completions.shape[0] == 2 and 1 <= completions.shape[1] <= hooks.args.response_length, (
            f"what TRL's generate() returns after the prompt is not the completions: re-check {hook}")
        assert stop_token_id == hooks.processing_class.eos_token_id  # TRL's `self.stop_token_id`, stop_token="eos"
    hooks.generate_completions()  # TRL's sample table: not completions trained on
    assert len(hooks.completions) == 2


def test_a_kl_coefficient_set_after_a_batch_is_the_next_batchs_penalty(hooks):
    import torch
    from transformers import TrainerCallback

    hook = "PPOTrainerHooks.kl_coef"
    logged = []

    class SetCoefficient(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append(dict(logs))
            hooks.kl_coef = 0.5  # for the batches after this one

    hooks.add_callback(SetCoefficient())
    hooks.train()
    assert [logs["episode"] for logs in logged] == [2, 4]
    # TRL's penalty is -kl_coef x KL per token, and both are logged summed over the completion
    for logs, coefficient in zip(logged, (0.05, 0.5)):
        kl, penalty = torch.tensor(logs["objective/kl"]), torch.tensor(logs["objective/non_score_reward"])
        assert torch.isclose(penalty, -coefficient * kl, rtol=1e-3), (
            f"batch {logs['episode'] // 2} was not penalised with kl_coef {coefficient}: re-check {hook}")
    assert abs(logged[1]["objective/kl"]) > 1e-6  # a step away from the reference: the check above means something


def test_a_resumed_pass_over_the_prompts_is_drawn_again_in_its_order(hooks):
    import torch

    hook = "PPOTrainerHooks._RecordedPasses"  # end to end: tests/test_interruption.py, tests/test_distributed.py

    def firsts(batches):
        return [batch["input_ids"][:, 0].tolist() for batch in batches]

    loader = hooks.get_train_dataloader()  # 4 prompts, 2 batches of 2 per pass
    for _ in range(5):  # a few passes in: the pass in flight was drawn long after the first
        list(loader)
    in_flight = iter(loader)
    next(in_flight)  # one batch of the sixth pass trained on, then a checkpoint
    hooks._save_checkpoint(hooks.model, trial=None)
    rest, following = firsts(in_flight), firsts(loader)

    torch.manual_seed(1234)  # a new process, resumed from the checkpoint after 11 batches
    hooks.optimizer.step()  # no gradients: changes nothing, but the scheduler expects it first
    hooks.restore_optimizer_scheduler_and_rng(hooks.checkpoints[0][0])
    hooks.start_at_batch(11)
    assert firsts(loader) == rest, f"the resumed pass is not the rest of the one in flight: re-check {hook}"
    assert firsts(loader) == following, f"the pass after it is not the one an uninterrupted run draws: re-check {hook}"
    assert len(loader) == 2


def optimizer_steps_per_rollout(trainer):
    """Train `trainer` and count the optimizer steps each rollout took (TRL's global_step counts rollouts)."""
    steps = Counter()
    optimizer = trainer.optimizer.optimizer  # the torch optimizer: accelerate's wrapper skips steps it accumulates
    optimizer.register_step_post_hook(lambda *_: steps.update([trainer.state.global_step]))
    trainer.train()
    return [steps[rollout] for rollout in range(trainer.state.global_step)]


# (per_device_train_batch_size, gradient_accumulation_steps, num_mini_batches, num_ppo_epochs) on 4 prompts, 8
# episodes (2 passes over the prompts); what TRL 1.12's own PPOTrainer does instead, and why.
MINI_BATCH_CASES = {
    "2 mini-batches of 2 micro-batches": ((1, 2, 2, 1), (
        [1, 2, 1, 2], "rollouts of 2 prompts, one step over both mini-batches, 2 at the last rollout of a pass")),
    "one mini-batch, accumulation, rollout ending a pass": ((1, 2, 1, 1), (
        [1, 2, 1, 2], "the last rollout of each pass steps at every micro-batch")),
    "2 mini-batches, no accumulation, 2 PPO epochs": ((1, 1, 2, 2), (
        "`batch_size` must be a multiple of `num_mini_batches`", "refused: a rollout of 1 prompt")),
}


@pytest.mark.parametrize("case", MINI_BATCH_CASES)
def test_a_rollout_takes_one_optimizer_step_per_mini_batch_and_ppo_epoch(tiny_models, tmp_path, case):
    from rlhf.trl_compat import PatchedPPOTrainer

    (per_device, accumulation, mini_batches, epochs), _ = MINI_BATCH_CASES[case]
    trainer = tiny_ppo(tiny_models, tmp_path, PatchedPPOTrainer, per_device_train_batch_size=per_device,
                       gradient_accumulation_steps=accumulation, num_mini_batches=mini_batches,
                       num_ppo_epochs=epochs, total_episodes=8)
    rollout = per_device * accumulation * mini_batches  # prompts, in the one process
    assert trainer.args.batch_size == rollout, "re-check OneOptimizerStepPerMiniBatch"
    assert optimizer_steps_per_rollout(trainer) == [epochs * mini_batches] * (8 // rollout), (
        "re-check OneOptimizerStepPerMiniBatch in rlhf/trl_compat/ppo_fixes.py")


@pytest.mark.parametrize("case", MINI_BATCH_CASES)
def test_trl_alone_takes_other_numbers_of_optimizer_steps(tiny_models, tmp_path, case):
    (per_device, accumulation, mini_batches, epochs), (trl_does, why) = MINI_BATCH_CASES[case]
    config = {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
              "num_mini_batches": mini_batches, "num_ppo_epochs": epochs, "total_episodes": 8}
    try:
        outcome = optimizer_steps_per_rollout(tiny_ppo(tiny_models, tmp_path, trl_ppo_trainer(), **config))
    except ValueError as error:
        outcome = str(error)
    assert outcome == trl_does if isinstance(trl_does, list) else trl_does in str(outcome), (
        f"TRL's own PPOTrainer no longer does this ({why}): OneOptimizerStepPerMiniBatch may be obsolete")


def test_train_zeroes_its_counters_before_on_train_begin_and_runs_num_total_batches(hooks):
    hook = "PPOTrainerHooks.start_at_batch"
    total = hooks.args.num_total_batches
    assert total == 2  # 4 episodes, 2 per batch
    hooks.start_at_batch(total)  # as if resumed after the last batch: train() must run none and keep the counters
    hooks.train()
    assert hooks.completions == [], f"train() ran batches past args.num_total_batches: re-check {hook}"
    assert (hooks.state.global_step, hooks.state.episode, hooks.state.max_steps) == (2, 4, 2), (
        f"the counters restored at on_train_begin did not survive train(): re-check {hook}"
    )


# ---- PPOTrainerHooks: checkpoints (save_extra_checkpoint_files, saving under DDP, restoring) ----


def test_a_checkpoint_gets_the_extra_files_first_and_trainer_state_json_last(hooks):
    from transformers import Trainer

    hook = "PPOTrainerHooks._save_checkpoint"
    assert list(inspect.signature(Trainer._save_checkpoint).parameters) == ["self", "model", "trial"], (
        f"Trainer._save_checkpoint(model, trial) changed its signature: re-check {hook}"
    )
    hooks.state.global_step = 3
    hooks._save_checkpoint(hooks.model, trial=None)
    checkpoint = hooks.args.output_dir + "/checkpoint-3"
    assert [(str(path), state_written) for path, state_written in hooks.checkpoints] == [(checkpoint, False)]
    saved = {path.name for path in hooks.checkpoints[0][0].iterdir()}
    assert {"trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth", "config.json"} <= saved, saved
    architectures = json.loads((hooks.checkpoints[0][0] / "config.json").read_text())["architectures"]
    assert architectures == ["LlamaForCausalLM"], "the checkpoint's model is not the policy alone"


def test_the_value_model_is_the_wrappers_value_model(hooks):
    weights = hooks.value_model_state_dict()
    assert weights.keys() == hooks.trained_value_model.state_dict().keys(), (
        "TRL's PolicyAndValueWrapper no longer names its parts policy and value_model: re-check "
        "PPOTrainerHooks.trained_policy, trained_value_model and value_model_state_dict"
    )
    assert hooks.trained_policy is hooks.accelerator.unwrap_model(hooks.model).policy


def test_optimizer_scheduler_and_random_state_come_back_from_a_checkpoint(hooks):
    import torch
    from transformers import Trainer

    hook = "PPOTrainerHooks.restore_optimizer_scheduler_and_rng"
    assert list(inspect.signature(Trainer._load_rng_state).parameters) == ["self", "checkpoint"], (
        f"Trainer._load_rng_state(checkpoint) changed its signature: re-check {hook}"
    )
    hooks._save_checkpoint(hooks.model, trial=None)
    expected = torch.rand(4)  # the first draw after the random state was saved
    hooks.optimizer.step()  # no gradients: changes nothing, but the scheduler expects it first
    hooks.lr_scheduler.step()
    torch.manual_seed(1234)
    hooks.restore_optimizer_scheduler_and_rng(hooks.checkpoints[0][0])
    assert torch.equal(torch.rand(4), expected), f"the random state did not come back: re-check {hook}"
    assert hooks.lr_scheduler.last_epoch == 0, f"the scheduler did not come back: re-check {hook}"


# ---- The fixes of TRL's PPOTrainer under DDP (SavePolicyUnderDDP, LoraReferenceUnderDDP) ----


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_under_ddp_training_saves_loadable_checkpoints_and_policy(tiny_models, tmp_path, lora):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlhf.trl_compat import PatchedPPOTrainer

    trainer = tiny_ppo(tiny_models, tmp_path, PatchedPPOTrainer, lora=lora, per_device_train_batch_size=2,
                       save_steps=1)
    with under_ddp(trainer, tmp_path):
        trainer.train()  # 2 rollouts, a checkpoint after each
        trainer.save_model(str(tmp_path / "final"))
    hook = "LoraReferenceUnderDDP and SavePolicyUnderDDP in rlhf/trl_compat/ppo_fixes.py"
    out = tmp_path / "out"
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"], hook
    for folder in (out / "checkpoint-2", tmp_path / "final"):
        if lora:
            PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_models["policy"]), folder)
        else:
            assert AutoModelForCausalLM.from_pretrained(folder).config.architectures == ["LlamaForCausalLM"], hook


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_under_ddp_trl_alone_fails_at_its_first_checkpoint_or_lora_reference(tiny_models, tmp_path, lora):
    trainer = tiny_ppo(tiny_models, tmp_path, trl_ppo_trainer(), lora=lora, per_device_train_batch_size=2,
                       save_steps=1)
    # TRL reads .policy (the LoRA reference, at the first rollout) and .config (the model card, at the first
    # checkpoint) off the DDP wrapper; its save_model finds no .policy there and saves the whole wrapper.
    missing = "policy" if lora else "config"
    with under_ddp(trainer, tmp_path):
        with pytest.raises(AttributeError, match=f"'DistributedDataParallel' object has no attribute '{missing}'"):
            trainer.train()
        with pytest.raises(RuntimeError, match="Some tensors share memory"):
            trainer.save_model(str(tmp_path / "final"))


def test_a_process_other_than_the_first_saves_nothing_and_does_not_fail(tiny_models, hooks, tmp_path,
                                                                         monkeypatch):
    # transformers 5's Trainer._save reads is_distributed_loading_by_transformers there, which only its
    # Trainer.__init__ sets: TRL's PPOTrainer.__init__ does not call it.
    monkeypatch.setattr(type(hooks.args), "should_save", property(lambda args: False))
    hooks.save_model(str(tmp_path / "final"))
    assert not (tmp_path / "final").exists()
    assert "is_distributed_loading_by_transformers" not in vars(hooks), (
        "TRL's PPOTrainer now sets is_distributed_loading_by_transformers: drop it from SavePolicyUnderDDP")
    trl_alone = tiny_ppo(tiny_models, tmp_path / "trl", trl_ppo_trainer(), per_device_train_batch_size=2)
    with pytest.raises(AttributeError, match="is_distributed_loading_by_transformers"):
        trl_alone.save_model(str(tmp_path / "final"))


def test_grpo_and_ppo_draw_whole_batches_of_prompts_and_drop_the_rest_of_each_pass(tiny_models, tmp_path):
    from trl.trainer.utils import RepeatSampler

    hook = "rlhf.data.check_prompts_fill_batches"
    sampler = RepeatSampler(list(range(7)), mini_repeat_count=2, batch_size=3, repeat_count=2, shuffle=True, seed=0)
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == 2 * 3 * 2 * 2 and len(set(drawn)) == 6, (
        f"GRPO's RepeatSampler no longer keeps only whole generation batches of prompts: re-check {hook}")
    too_few = RepeatSampler(list(range(2)), mini_repeat_count=2, batch_size=3, repeat_count=1)
    assert list(too_few) == [], f"GRPO's RepeatSampler now draws from fewer prompts than one batch: re-check {hook}"
    trainer = tiny_hooks(tiny_models, tmp_path, per_device_train_batch_size=3)  # 4 prompts, rollouts of 3
    assert [len(batch["input_ids"]) for batch in trainer.get_train_dataloader()] == [3], (
        f"PPO's dataloader no longer drops the incomplete last rollout of a pass: re-check {hook}")


# ---- ScheduleFromResumedStep ----


def test_a_resumed_scheduler_keeps_the_new_schedule_and_the_first_step_gets_its_rate():
    import torch
    from transformers import TrainerControl, TrainerState, get_scheduler

    from rlhf.trl_compat import ScheduleFromResumedStep

    # What transformers does on resume, as TRL's trainers and ResumablePPOTrainer.resume do it: the scheduler is built
    # for this launch's length, then the checkpoint's optimizer and scheduler states are loaded over it. End to end
    # (the rates a continued run logs): tests/test_cli_flows.py.
    hook = "ScheduleFromResumedStep"

    def trained(total, steps):
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = get_scheduler("cosine", optimizer, num_warmup_steps=0, num_training_steps=total)
        for _ in range(steps):
            optimizer.step()
            scheduler.step()
        return optimizer, scheduler

    finished, finished_schedule = trained(total=2, steps=2)  # a run of 2 steps, at its end
    optimizer, scheduler = trained(total=6, steps=0)  # continued to 6: built anew, then the checkpoint loaded
    optimizer.load_state_dict(finished.state_dict())
    scheduler.load_state_dict(finished_schedule.state_dict())
    assert optimizer.param_groups[0]["lr"] == 0.0, f"the restored optimizer no longer holds the old rate: {hook}"
    ScheduleFromResumedStep().on_train_begin(None, TrainerState(), TrainerControl(), lr_scheduler=scheduler)
    _, uninterrupted = trained(total=6, steps=2)
    assert scheduler.last_epoch == 2, f"the scheduler is no longer at the checkpoint's step: re-check {hook}"
    assert optimizer.param_groups[0]["lr"] == scheduler.get_last_lr()[0] == uninterrupted.get_last_lr()[0] == 0.75


# ---- ResumableGRPOTrainer ----


def tiny_grpo_run(tiny_models, output_dir, trainer_class, resume_from_checkpoint=None):
    """A tiny GRPO run of 2 steps on one generation (2 prompts x 2 completions, 1 prompt a step), a checkpoint after
    each step. Returns the sizes of the generations scored (one reward call per generation) and the final weights."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf.trl_compat import GRPOConfig

    generations = []

    def reward(completions, **kwargs):
        generations.append(len(completions))
        return [float(sum(map(ord, completion)) % 7) for completion in completions]  # varied: advantages not 0

    args = GRPOConfig(output_dir=str(output_dir), per_device_train_batch_size=2, num_generations=2,
                      steps_per_generation=2, max_completion_length=4, max_steps=2, save_steps=1, beta=0.0,
                      learning_rate=1e-2, lr_scheduler_type="constant", use_cpu=True, bf16=False, seed=0,
                      report_to=[], disable_tqdm=True)
    trainer = trainer_class(model=AutoModelForCausalLM.from_pretrained(tiny_models["policy"]), reward_funcs=[reward],
                            args=args, train_dataset=Dataset.from_dict({"prompt": ["a b", "c d", "e f", "g h"]}),
                            processing_class=AutoTokenizer.from_pretrained(tiny_models["policy"]))
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    return generations, trainer.model.state_dict()


def test_grpo_resumed_inside_a_generation_trains_on_it_as_one_run_does_where_trl_alone_generates_again(
        tiny_models, tmp_path):
    import torch
    from trl import GRPOTrainer

    from rlhf.trl_compat import ResumableGRPOTrainer

    hook = "ResumableGRPOTrainer (_save_checkpoint, restore_generation)"
    generations, expected = tiny_grpo_run(tiny_models, tmp_path / "whole", ResumableGRPOTrainer)
    assert generations == [4], "the tiny run is not one generation for 2 steps"
    checkpoint = str(tmp_path / "whole" / "checkpoint-1")  # between the 2 steps of the one generation

    generations, weights = tiny_grpo_run(tiny_models, tmp_path / "resumed", ResumableGRPOTrainer, checkpoint)
    assert generations == [], f"the resumed run generated again instead of training on the saved one: {hook}"
    assert all(torch.equal(expected[name], weights[name]) for name in expected), (
        f"the resumed run did not train what one uninterrupted run trains: re-check {hook}")

    generations, weights = tiny_grpo_run(tiny_models, tmp_path / "trl", GRPOTrainer, checkpoint)
    assert generations == [4] and any(not torch.equal(expected[name], weights[name]) for name in expected), (
        f"TRL's own GRPOTrainer now resumes inside a generation: {hook} may be obsolete")


def test_each_pass_over_the_prompts_gets_the_order_of_that_pass_in_an_uninterrupted_run():
    from trl.trainer.utils import RepeatSampler

    from rlhf.trl_compat.grpo import EpochRepeatSampler

    # End to end, a run resumed in a later pass (where accelerate's set_epoch does not reach the sampler in a
    # multi-process run: _SamplerPass): tests/test_interruption.py, tests/test_distributed.py.
    hook = "EpochRepeatSampler"

    def sampler():
        return RepeatSampler(list(range(8)), mini_repeat_count=2, batch_size=4, repeat_count=2, seed=3)

    uninterrupted = sampler()
    passes = [list(uninterrupted) for _ in range(3)]
    assert passes[0] != passes[2]
    resumed = EpochRepeatSampler(sampler())  # a run resumed in pass 2
    resumed.set_epoch(2)
    assert list(resumed) == passes[2], f"pass 2 of a resumed run is not pass 2 of an uninterrupted one: {hook}"
    fresh = EpochRepeatSampler(sampler())
    orders = []
    for epoch in range(3):
        fresh.set_epoch(epoch)
        orders.append(list(fresh))
    assert orders == passes and len(fresh) == len(uninterrupted)


def test_rollouts_sample_from_the_nucleus_and_keep_the_whole_distributions_log_probabilities(hooks):
    import torch
    from transformers import GenerationConfig

    hook = "PPOTrainerHooks.__init__ (recording_generate)"
    policy, top_p = hooks.trained_policy, 0.3
    hooks.args.top_p = top_p  # our PPO config's field; TRL's has none and samples at 1.0
    # What TRL's train() passes to the policy's generate()
    config = GenerationConfig(max_new_tokens=4, temperature=0.7 + 1e-7, top_k=0, top_p=1.0, do_sample=True)
    queries = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]])
    kwargs = {"input_ids": queries, "attention_mask": torch.ones_like(queries), "return_dict_in_generate": True,
              "output_scores": True}

    torch.manual_seed(0)
    output = policy.generate(generation_config=config, **kwargs)
    completions = output.sequences[:, queries.shape[1]:]
    with torch.no_grad():
        logits = policy(output.sequences).logits[:, queries.shape[1] - 1:-1] / config.temperature
    # TRL's rollout log-probabilities are those its training forward computes: the whole distribution
    assert torch.allclose(torch.stack(output.scores, 1), logits, atol=1e-4), f"re-check {hook}"
    # and each token was drawn from the nucleus: the tokens more likely than it hold less than top_p
    probs = logits.softmax(-1)
    drawn = probs.gather(-1, completions.unsqueeze(-1))
    above = (probs * (probs > drawn)).sum(-1)
    ended = (completions == hooks.processing_class.eos_token_id).cumsum(1) - (
        completions == hooks.processing_class.eos_token_id).long()  # padding after the first EOS
    assert (above[ended == 0] < top_p).all(), f"a token outside the nucleus: top_p was not applied, re-check {hook}"
    assert (ended == 0).sum() >= 8

    # transformers' own scores at top_p: all but the nucleus at -inf, which is why the hook replaces them
    torch.manual_seed(0)
    plain = type(policy).generate(policy, generation_config=GenerationConfig(**{**config.to_dict(), "top_p": top_p}),
                                  **kwargs)
    assert torch.isinf(torch.stack(plain.scores, 1)).any()


def test_a_nucleus_rollout_starts_at_kl_0_from_the_reference(hooks):
    from transformers import TrainerCallback

    logged = []

    class Logs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append(dict(logs))

    hooks.args.top_p = 0.3
    hooks.add_callback(Logs())
    hooks.train()
    # The policy is the reference at the first rollout: TRL's KL there is 0 when the rollout's log-probabilities are
    # the whole distribution's (if they were the nucleus's: log 1/(its mass), up to log 1/0.3 = 1.2, per token)
    assert abs(logged[0]["objective/kl"]) < 1e-3 and abs(logged[1]["objective/kl"]) > 1e-6
    assert len(hooks.completions) == 2


class _Scores:
    """Scores in a reward model's place (the `score_completions` route of `_get_reward`): all 0, or all different."""

    reward_model = None

    def __init__(self, equal):
        self.equal = equal

    def score_completions(self, query_responses, context_length):
        import torch

        n = len(query_responses)
        return torch.zeros(n) if self.equal else torch.arange(n, dtype=torch.float32)

    def eval(self):  # TRL's __init__ calls it on the reward model
        return self

    def to(self, *args, **kwargs):  # and moves it to the device
        return self


@pytest.mark.parametrize("equal, skip", [(True, True), (True, False), (False, True)])
def test_a_rollout_without_signal_gets_advantages_of_0_and_moves_only_the_value_model(hooks, equal, skip):
    import torch

    where = "_masked_whiten in rlhf/trl_compat/ppo.py (TRL's train() calls masked_whiten with `scores` in its frame)"
    hooks.reward_model = _Scores(equal)
    hooks.args.skip_rollouts_without_signal = skip  # our PPO config's field; TRL's has none
    policy = {name: p.detach().clone() for name, p in hooks.trained_policy.named_parameters()}
    value = {name: p.detach().clone() for name, p in hooks.trained_value_model.named_parameters()}
    hooks.train()
    policy_moved = any(not torch.equal(p, policy[name]) for name, p in hooks.trained_policy.named_parameters())
    value_moved = any(not torch.equal(p, value[name]) for name, p in hooks.trained_value_model.named_parameters())
    zeroed = equal and skip
    assert hooks.advantages_zeroed == zeroed, f"re-check {where}"
    assert policy_moved != zeroed, f"re-check {where}"  # TRL whitens equal scores' advantages to unit size
    assert value_moved  # the returns the value model learns are computed before the advantages are whitened
