"""What `rlhf.trl_compat` assumes about TRL and transformers, checked by behaviour on the installed release.

Each test names the fix or hook in `rlhf/trl_compat/` it covers, and fails with a message saying what to re-check.
Each fix of a TRL bug is tested both ways: the fixed trainer does what the arithmetic says, and TRL's own trainer
still does not (when that test fails after an upgrade, the fix may be obsolete). Everything runs on tiny models in
this process. PPO is the package's own code: its tests are in `tests/test_ppo_trainer.py`.
"""

import importlib.util
import inspect
import os
import re
import subprocess
import sys
import warnings

import pytest

from conftest import ROOT, error_line

# ---- The pinned release ----


def test_the_installed_trl_is_one_of_the_releases_the_package_runs_on():
    import trl
    from packaging.specifiers import SpecifierSet

    from rlhf.trl_compat import TRL_VERSIONS, check_trl_version

    check_trl_version()
    assert trl.__version__ in SpecifierSet(TRL_VERSIONS) and TRL_VERSIONS == ">=1.16.0,<1.17", (
        "the checks below describe TRL 1.16")
    requirement = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("trl"))
    assert requirement == f"trl{TRL_VERSIONS}", "requirements.txt and the version check accept other releases"


@pytest.mark.parametrize("version", ["1.12.0", "1.15.0", "1.17.0"])
def test_another_trl_release_is_refused_with_the_fix(monkeypatch, version):
    import trl

    from rlhf.errors import UserError
    from rlhf.trl_compat import check_trl_version

    monkeypatch.setattr(trl, "__version__", version)
    with pytest.raises(UserError) as error:
        check_trl_version()
    assert str(error.value) == (f"this package needs trl>=1.16.0,<1.17 (found {version}): "
                                "pip install -r requirements.txt")


def test_a_script_refuses_another_trl_release_in_one_line_before_it_creates_anything(run_cli, monkeypatch,
                                                                                      tmp_path):
    import trl

    monkeypatch.setattr(trl, "__version__", "1.12.0")
    for script in ("train_ppo.py", "train_grpo.py"):
        result = run_cli(script, "--output_dir", tmp_path / "out")
        refused = "error: this package needs trl>=1.16.0,<1.17 (found 1.12.0): pip install -r requirements.txt"
        assert error_line(result) == refused
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_each_silenced_warning_is_one_a_tiny_ppo_run_still_gives(tiny_models, tmp_path):
    from rlhf.trl_compat import KNOWN_WARNINGS, _silence_known_warnings
    from test_ppo_trainer import tiny_hooks

    def run(silenced):
        """The warnings of a tiny PPO run."""
        with warnings.catch_warnings(record=True) as given:
            warnings.simplefilter("always")
            if silenced:
                _silence_known_warnings()
            tiny_hooks(tiny_models, tmp_path / str(silenced), per_device_train_batch_size=2).train()
        return [f"{warning.category.__name__}: {warning.message}" for warning in given]

    given, shown = run(silenced=False), run(silenced=True)
    hook = "rlhf.trl_compat.KNOWN_WARNINGS"
    for message, _, _ in KNOWN_WARNINGS:
        pattern = re.compile(message)
        assert any(pattern.search(warning) for warning in given), (
            f"a tiny PPO run no longer warns {message!r}: drop that filter from {hook}")
        assert not any(pattern.search(warning) for warning in shown), f"{message!r} is not silenced: re-check {hook}"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_deepspeeds_guess_of_the_cpu_is_dropped_unless_deepspeed_trains():
    """`DeepSpeedGuessesCPU`: DeepSpeed still logs the line when imported without a GPU (else drop the filter), the
    package's filter drops it, and keeps it where accelerate launched DeepSpeed. A new process each: DeepSpeed picks
    its accelerator once per process."""
    def imported(code, **env):
        environment = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                env={**environment, "CUDA_VISIBLE_DEVICES": "", **env})
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout + result.stderr

    line = "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."
    assert line in imported("import deepspeed"), "DeepSpeed no longer says it: drop trl_compat.DeepSpeedGuessesCPU"
    assert line not in imported("import rlhf.trl_compat, deepspeed")
    assert line in imported("import rlhf.trl_compat, deepspeed", ACCELERATE_USE_DEEPSPEED="true")


# ---- The progress bar (close_progress_bar) ----


def test_the_progress_bar_is_kept_in_training_bar_and_close_progress_bar_closes_it(tiny_models, tmp_path):
    from transformers import ProgressCallback

    from rlhf.trl_compat import close_progress_bar
    from test_ppo_trainer import tiny_hooks

    hooks = tiny_hooks(tiny_models, tmp_path, per_device_train_batch_size=2)

    progress = [callback for callback in hooks.callback_handler.callbacks if isinstance(callback, ProgressCallback)]
    assert len(progress) == 1, "no ProgressCallback in trainer.callback_handler.callbacks: re-check close_progress_bar"
    progress[0].on_train_begin(hooks.args, hooks.state, hooks.control)
    bar = getattr(progress[0], "training_bar", None)
    assert bar is not None, "ProgressCallback no longer keeps its bar in `training_bar`: re-check close_progress_bar"
    close_progress_bar(hooks)
    assert progress[0].training_bar is None and bar.disable  # tqdm's close() disables the bar


def test_grpo_and_ppo_draw_whole_batches_of_prompts_and_drop_the_rest_of_each_pass(tiny_models, tmp_path):
    from trl.trainer.utils import RepeatSampler

    from test_ppo_trainer import tiny_hooks

    hook = "rlhf.data.check_prompts_fill_batches"
    sampler = RepeatSampler(list(range(7)), mini_repeat_count=2, batch_size=3, repeat_count=2, shuffle=True, seed=0)
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == 2 * 3 * 2 * 2 and len(set(drawn)) == 6, (
        f"GRPO's RepeatSampler no longer keeps only whole generation batches of prompts: re-check {hook}")
    too_few = RepeatSampler(list(range(2)), mini_repeat_count=2, batch_size=3, repeat_count=1)
    assert list(too_few) == [], f"GRPO's RepeatSampler now draws from fewer prompts than one batch: re-check {hook}"
    trainer = tiny_hooks(tiny_models, tmp_path, per_device_train_batch_size=3)  # 4 prompts, rollouts of 3
    assert [len(batch["input_ids"]) for batch in trainer.dataloader] == [3], (
        f"PPO's dataloader no longer drops the incomplete last rollout of a pass: re-check {hook}")


# ---- ScheduleFromResumedStep ----


def test_a_resumed_scheduler_keeps_the_new_schedule_and_the_first_step_gets_its_rate():
    import torch
    from transformers import TrainerControl, TrainerState, get_scheduler

    from rlhf.trl_compat import ScheduleFromResumedStep

    # What transformers does on resume, as TRL's trainers and PPOTrainer.resume do it: the scheduler is built
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


# ---- NoStepPastTheEnd ----


def tiny_trainer(output_dir, max_steps):
    """transformers' `Trainer` on one weight pulled toward 1, a checkpoint after each step."""
    import torch
    from transformers import Trainer, TrainingArguments

    class OneWeight(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return {"loss": ((self.weight - x) ** 2).mean()}

    args = TrainingArguments(output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=2,
                             save_steps=1, learning_rate=0.1, lr_scheduler_type="constant", use_cpu=True, report_to=[],
                             disable_tqdm=True)
    return Trainer(model=OneWeight(), args=args, train_dataset=[{"x": torch.ones(1)}] * 16)


@pytest.mark.slow
def test_a_run_resumed_at_its_last_step_trains_no_step_past_it_where_transformers_alone_trains_one(tmp_path):
    import torch

    from rlhf.trl_compat import NoStepPastTheEnd, ReachedTheEnd

    hook = "NoStepPastTheEnd"
    whole = tiny_trainer(tmp_path / "whole", max_steps=3)
    whole.train()
    checkpoint = str(tmp_path / "whole" / "checkpoint-3")  # the run's last step, as an interruption there leaves it

    resumed = tiny_trainer(tmp_path / "resumed", max_steps=3)
    resumed.callback_handler.callbacks.insert(0, NoStepPastTheEnd())
    with pytest.raises(ReachedTheEnd):
        resumed.train(resume_from_checkpoint=checkpoint)
    assert resumed.state.global_step == 3, f"the resumed run's state is not the checkpoint's: re-check {hook}"
    assert torch.equal(resumed.model.weight, whole.model.weight), f"the checkpoint's weights did not load: {hook}"

    alone = tiny_trainer(tmp_path / "alone", max_steps=3)
    alone.train(resume_from_checkpoint=checkpoint)
    assert alone.state.global_step == 4 and not torch.equal(alone.model.weight, whole.model.weight), (
        f"transformers no longer trains a step past max_steps on resume: {hook} may be obsolete")


# ---- ResumableGRPOTrainer ----


def tiny_grpo_run(tiny_models, output_dir, trainer_class, resume_from_checkpoint=None):
    """A tiny GRPO run of 2 steps on one generation (2 prompts x 2 completions, 1 prompt a step), a checkpoint after
    each step. Returns the sizes of the generations scored (one reward call per generation) and the final weights."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import RLOOConfig, RLOOTrainer

    from rlhf.trl_compat import GRPOConfig

    generations = []

    def reward(completions, **kwargs):
        generations.append(len(completions))
        return [float(sum(map(ord, completion)) % 7) for completion in completions]  # varied: advantages not 0

    config = RLOOConfig if issubclass(trainer_class, RLOOTrainer) else GRPOConfig
    args = config(output_dir=str(output_dir), per_device_train_batch_size=2, num_generations=2,
                      steps_per_generation=2, max_completion_length=4, max_steps=2, save_steps=1, beta=0.0,
                      learning_rate=1e-2, lr_scheduler_type="constant", use_cpu=True, bf16=False, seed=0,
                      report_to=[], disable_tqdm=True)
    trainer = trainer_class(model=AutoModelForCausalLM.from_pretrained(tiny_models["policy"]), reward_funcs=[reward],
                            args=args, train_dataset=Dataset.from_dict({"prompt": ["a b", "c d", "e f", "g h"]}),
                            processing_class=AutoTokenizer.from_pretrained(tiny_models["policy"]))
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    return generations, trainer.model.state_dict()


@pytest.mark.slow
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


def test_grpo_trains_with_the_cpu_vocabulary_tile_and_puts_trls_back(tiny_models, tmp_path):
    from transformers import TrainerCallback
    from trl.trainer import utils

    from rlhf.trl_compat.grpo import CPU_VOCABULARY_TILE, ResumableGRPOTrainer

    trls = utils._CHUNKED_LOGPROB_CHUNK_SIZE  # TRL 1.16's name: this fails where TRL moved it
    assert trls > CPU_VOCABULARY_TILE
    seen = []

    class Tile(TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            seen.append(utils._CHUNKED_LOGPROB_CHUNK_SIZE)

    class Recorded(ResumableGRPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(Tile())

    tiny_grpo_run(tiny_models, tmp_path / "run", Recorded)
    assert seen == [CPU_VOCABULARY_TILE] * 2  # in each step of training on the CPU
    assert utils._CHUNKED_LOGPROB_CHUNK_SIZE == trls  # TRL's own once training ends


@pytest.mark.slow
def test_the_resumable_generation_is_a_piece_trls_rloo_trainer_shares(tiny_models, tmp_path):
    """TRL 1.16's RLOOTrainer generates and buffers as GRPO's does: `ResumableGeneration` resumes it exactly too."""
    import torch
    from trl import RLOOTrainer

    from rlhf.trl_compat import ResumableGeneration

    class ResumableRLOOTrainer(ResumableGeneration, RLOOTrainer):
        pass

    generations, expected = tiny_grpo_run(tiny_models, tmp_path / "whole", ResumableRLOOTrainer)
    assert generations == [4], "the tiny RLOO run is not one generation for 2 steps"
    checkpoint = str(tmp_path / "whole" / "checkpoint-1")
    generations, weights = tiny_grpo_run(tiny_models, tmp_path / "resumed", ResumableRLOOTrainer, checkpoint)
    assert generations == [], "the resumed RLOO run generated again instead of training on the saved one"
    assert all(torch.equal(expected[name], weights[name]) for name in expected)
    generations, weights = tiny_grpo_run(tiny_models, tmp_path / "trl", RLOOTrainer, checkpoint)
    assert generations == [4] and any(not torch.equal(expected[name], weights[name]) for name in expected), (
        "TRL's own RLOOTrainer now resumes inside a generation: ResumableGeneration may be obsolete for it")


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




def test_the_load_warning_that_resume_quiets_for_tied_weights_is_still_transformers():
    """`ResumableGRPOTrainer._issue_warnings_after_load` drops the tied LM head from transformers' "missing keys"
    warning; the continued run of tests/test_cli_grpo.py shows it quiet. This pins where transformers calls it."""

    from transformers import AutoModelForCausalLM, LlamaConfig, Trainer

    from rlhf.trl_compat.grpo import ResumableGRPOTrainer, tied_weight_names

    assert "_issue_warnings_after_load(load_result)" in inspect.getsource(Trainer._load_from_checkpoint)
    assert "load_result.missing_keys" in inspect.getsource(Trainer._issue_warnings_after_load)
    assert ResumableGRPOTrainer._issue_warnings_after_load is not Trainer._issue_warnings_after_load

    config = LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    assert tied_weight_names(AutoModelForCausalLM.from_config(config)) == []  # untied: every key counts
    config.tie_word_embeddings = True
    assert tied_weight_names(AutoModelForCausalLM.from_config(config)) == ["lm_head.weight"]


def test_the_private_names_the_compat_layer_reads_are_still_there():
    """Each fails when its library moves it: accelerate's shared state, argparse's action list, transformers' one
    reference to the DeepSpeed config in force (read, then put back through its public setter)."""
    import argparse

    from accelerate.state import PartialState
    from transformers.integrations import deepspeed

    from rlhf.trl_compat import loading_whole, parser_actions

    assert isinstance(PartialState._shared_state, dict)
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed")
    assert [action.dest for action in parser_actions(parser)] == ["help", "seed"]
    assert hasattr(deepspeed, "_hf_deepspeed_config_weak_ref") and callable(deepspeed.set_hf_deepspeed_config)

    class Config:  # what transformers keeps a weak reference to
        config = {"zero_optimization": {"stage": 3}}

        def is_zero3(self):
            return True

    config = Config()
    deepspeed.set_hf_deepspeed_config(config)
    try:
        with loading_whole():
            assert not deepspeed.is_deepspeed_zero3_enabled()
        assert deepspeed.is_deepspeed_zero3_enabled()  # put back as it was
    finally:
        deepspeed.unset_hf_deepspeed_config()


@pytest.mark.slow
def test_dynamic_sampling_reads_trls_gathered_rewards_scored_batch_and_zero_std_metric(tiny_models, tmp_path):
    """`DynamicSampling` relies on TRL 1.16's GRPOTrainer: `_calculate_rewards` returning every process's rewards,
    `_generate_and_score_completions` returning the tensors `take_rows` knows how to pad, one `frac_reward_zero_std`
    per call. Half the prompts get one reward: TRL alone trains on their groups, dynamic sampling never does."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from rlhf.trl_compat import GRPOConfig, ResumableGRPOTrainer
    from rlhf.trl_compat.dynamic_sampling import ONE_PER_ROW, PADDING

    def reward(prompts, completions, **kwargs):
        return [0.0 if prompt in ("a b", "e f") else float(sum(map(ord, completion)) % 7)
                for prompt, completion in zip(prompts, completions)]

    def run(trainer_class, output_dir, dynamic):
        args = GRPOConfig(output_dir=str(output_dir), per_device_train_batch_size=2, num_generations=2,
                          steps_per_generation=2, max_completion_length=4, max_steps=4, save_strategy="no",
                          logging_steps=1,
                          beta=0.0, learning_rate=1e-2, use_cpu=True, bf16=False, seed=0, report_to=[],
                          disable_tqdm=True)
        args.use_dynamic_sampling, args.dynamic_sampling_max_gen_batches, args.dynamic_sampling_tolerance = (
            dynamic, 10, 1e-6)  # this package's fields (config.GRPOTrainingConfig), not TRL's
        trainer = trainer_class(model=AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
                                reward_funcs=[reward], args=args, processing_class=AutoTokenizer.from_pretrained(
                                    tiny_models["policy"]),
                                train_dataset=Dataset.from_dict({"prompt": ["a b", "c d", "e f", "g h"] * 2}))
        trainer.train()
        return trainer, [log["frac_reward_zero_std"] for log in trainer.state.log_history
                         if "frac_reward_zero_std" in log]

    scored = []

    class Scored(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            scored.append((set(output), tuple(self._calculate_rewards_shape)))
            return output

        def _calculate_rewards(self, *args):
            rewards = super()._calculate_rewards(*args)
            self._calculate_rewards_shape = rewards.shape  # every completion of the generation, one column a function
            return rewards

    _, trls = run(Scored, tmp_path / "trl", False)
    assert any(share > 0 for share in trls), "TRL alone trained on no group of one reward: the test shows nothing"
    for keys, shape in scored:
        assert keys <= {*PADDING, *ONE_PER_ROW, "num_items_in_batch"}, (
            f"TRL's scored batch has tensors dynamic sampling cannot regroup: {keys}")
        assert shape == (4, 1), f"TRL's _calculate_rewards no longer returns every completion's rewards: {shape}"

    trainer, dynamic = run(ResumableGRPOTrainer, tmp_path / "dynamic", True)
    assert dynamic == [0.0, 0.0], "frac_reward_zero_std (one log a generation) of the groups trained on: re-check " \
        "DynamicSampling"
    assert all(abs(advantage) > 0.1 for batch in trainer._buffered_inputs for advantage in batch["advantages"])
    rounds = [log["dynamic_sampling/rounds"] for log in trainer.state.log_history if "dynamic_sampling/rounds" in log]
    assert len(rounds) == 2 and max(rounds) > 1


def test_dynamic_sampling_leaves_out_the_penalty_under_the_name_the_rewards_give_it():
    from rlhf.rewards.functions import MISSING_EOS_PENALTY
    from rlhf.trl_compat import dynamic_sampling

    assert dynamic_sampling.MISSING_EOS_PENALTY == MISSING_EOS_PENALTY


def test_every_name_the_package_takes_from_a_library_is_where_we_say():
    """Each name of `_WHERE` (TRL's, transformers' internals, our fixes) loads from the module named, under the
    releases pinned: after an upgrade, the name that moved is named here."""
    import rlhf.trl_compat as compat

    missing = []
    for name, module in compat._WHERE.items():
        try:
            getattr(compat, name)
        except (AttributeError, ImportError) as error:
            missing.append(f"{name} from {module}: {error}")
    assert missing == [], f"moved in this TRL / transformers release: {missing}"
