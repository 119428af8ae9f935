"""What `rlhf.trl_compat` assumes about TRL's and transformers' private internals, checked on the installed release.

Each test names one assumption. When one fails after an upgrade, the message says which hook in
`rlhf/trl_compat/` relies on it: re-check that hook against the new source before anything else. Behaviour is
checked where that is cheap (a tiny PPOTrainer, built and never trained); the rest against the library source.
"""

import inspect
import json
import re
import sys

import pytest

from conftest import error_line


def assert_source(function, *snippets, assumption, hook):
    """Fail, naming `assumption` and `hook`, unless the source of `function` holds `snippets` in this order."""
    source = inspect.getsource(function)
    position = 0
    for snippet in snippets:
        found = source.find(snippet, position)
        assert found >= 0, (
            f"TRL/transformers no longer does this: {assumption} ({function.__module__}.{function.__qualname__} has "
            f"no {snippet!r} where expected). Re-check {hook} in rlhf/trl_compat/ against the installed source."
        )
        position = found + len(snippet)


@pytest.fixture
def hooks(tiny_models, tmp_path):
    """A tiny `PPOTrainerHooks` that records what its two hooks receive (built, never trained)."""
    return tiny_hooks(tiny_models, tmp_path, per_device_train_batch_size=2)


def tiny_hooks(tiny_models, tmp_path, **config):
    """A tiny recording `PPOTrainerHooks` on 4 prompts: 1 PPO epoch, 4 episodes, `config` on top."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlhf.trl_compat import PPOConfig, PPOTrainerHooks

    class Recording(PPOTrainerHooks):
        def __init__(self, *args, **kwargs):
            self.completions, self.checkpoints = [], []
            super().__init__(*args, **kwargs)

        def record_completions(self, completions, stop_token_id):
            self.completions.append((completions, stop_token_id))

        def save_extra_checkpoint_files(self, checkpoint):
            self.checkpoints.append((checkpoint, (checkpoint / "trainer_state.json").exists()))

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    prompts = Dataset.from_dict({"input_ids": [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]})
    args = PPOConfig(output_dir=str(tmp_path / "out"), num_ppo_epochs=1, total_episodes=4, response_length=4,
                     stop_token="eos", num_sample_generations=0, bf16=False, gradient_checkpointing=False,
                     report_to=[], seed=0, **config)
    return Recording(
        args=args, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
        ref_model=AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
        reward_model=AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"]),
        value_model=AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"]),
        train_dataset=prompts, eval_dataset=prompts,
    )


def trainer_classes():
    from transformers import Trainer

    from rlhf.trl_compat import PPOTrainer

    return Trainer, PPOTrainer


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
    for module in ("rlhf.ppo", "rlhf.trl_compat.ppo"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    result = run_cli("train_ppo.py", "--output_dir", tmp_path / "out")
    assert error_line(result) == "error: this package needs trl==1.12.0 (found 1.13.0): pip install -r requirements.txt"
    assert not (tmp_path / "out").exists()


# ---- Warnings silenced in rlhf.trl_compat._silence_known_warnings ----


def test_the_silenced_warnings_are_still_the_ones_the_libraries_give():
    import transformers.training_args
    import trl.experimental

    Trainer, PPOTrainer = trainer_classes()
    hook = "_silence_known_warnings"
    assert re.search(r"`\w*gradient_checkpointing\w*` is deprecated", inspect.getsource(transformers.training_args)), (
        f"transformers no longer warns that `gradient_checkpointing` is deprecated: drop that filter in {hook}"
    )
    assert "TRL_EXPERIMENTAL_SILENCE" in inspect.getsource(trl.experimental), (
        f"trl.experimental no longer reads TRL_EXPERIMENTAL_SILENCE: re-check {hook}"
    )
    assert_source(PPOTrainer.train, "metrics[\"val/ratio_var\"]", ".var()",
                  assumption="PPO logs val/ratio_var with torch's var() (which warns on one minibatch)", hook=hook)


# ---- The progress bar (close_progress_bar) ----


def test_the_progress_bar_is_kept_in_training_bar_and_close_progress_bar_closes_it(hooks):
    from transformers import ProgressCallback

    from rlhf.trl_compat import close_progress_bar

    Trainer, _ = trainer_classes()
    assert_source(Trainer.__init__, "self.callback_handler = CallbackHandler(",
                  assumption="a Trainer keeps its callbacks in callback_handler.callbacks", hook="close_progress_bar")
    progress = [callback for callback in hooks.callback_handler.callbacks if isinstance(callback, ProgressCallback)]
    assert len(progress) == 1, "no ProgressCallback in trainer.callback_handler.callbacks: re-check close_progress_bar"
    progress[0].on_train_begin(hooks.args, hooks.state, hooks.control)
    bar = getattr(progress[0], "training_bar", None)
    assert bar is not None, "ProgressCallback no longer keeps its bar in `training_bar`: re-check close_progress_bar"
    close_progress_bar(hooks)
    assert progress[0].training_bar is None and bar.disable  # tqdm's close() disables the bar


# ---- PPOTrainerHooks: generation (record_completions) ----


def test_training_generates_through_the_policys_own_generate(hooks):
    import torch
    from transformers import GenerationConfig
    from trl.experimental.ppo.ppo_trainer import batch_generation

    _, PPOTrainer = trainer_classes()
    for function in (PPOTrainer.train, PPOTrainer.generate_completions):
        assert_source(function, "unwrap_model_for_generation(", "self.model", "batch_generation(",
                      "unwrapped_model.policy", assumption="PPO generates with batch_generation(<policy>)",
                      hook="PPOTrainerHooks.__init__ (recording_generate)")
    # What train() does: batch_generation on the unwrapped policy, which calls its generate(input_ids=...).
    queries = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    config = GenerationConfig(max_new_tokens=3, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    policy = hooks.accelerator.unwrap_model(hooks.model).policy
    query_responses, _ = batch_generation(policy, queries, 2, hooks.processing_class.pad_token_id, config)
    assert len(hooks.completions) == 1, "TRL's batch_generation no longer calls policy.generate: recording_generate"
    completions, stop_token_id = hooks.completions[0]
    assert torch.equal(completions, query_responses[:, queries.shape[1]:])
    assert stop_token_id == hooks.processing_class.eos_token_id  # TRL's `self.stop_token_id`, from stop_token="eos"

    hooks.generate_completions()  # TRL's sample table: not completions trained on
    assert len(hooks.completions) == 1


# ---- PPOTrainerHooks: the KL coefficient, the dataloader, the counters ----


def test_train_reads_the_kl_coefficient_from_args_for_each_batch(hooks):
    _, PPOTrainer = trainer_classes()
    assert_source(PPOTrainer.train, "args = self.args", "for update in range(", "-args.kl_coef * kl",
                  assumption="train() reads args.kl_coef (self.args) inside its loop, for each batch",
                  hook="PPOTrainerHooks.kl_coef")
    hooks.kl_coef = 0.25
    assert hooks.args.kl_coef == 0.25


def test_a_resumed_pass_over_the_prompts_is_drawn_again_in_its_order(hooks):
    import torch

    _, PPOTrainer = trainer_classes()
    hook = "PPOTrainerHooks._RecordedPasses"
    assert_source(PPOTrainer.train, "dataloader = self.dataloader", "yield from dataloader",
                  "for update in range(", "next(iter_dataloader)",
                  assumption="train() iterates self.dataloader (as it is when train() starts) pass after pass",
                  hook=hook)
    assert_source(PPOTrainer.__init__, "shuffle=True", assumption="the train DataLoader shuffles each pass", hook=hook)

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


def test_a_rollout_of_several_mini_batches_takes_one_optimizer_step_per_mini_batch(tiny_models, tmp_path):
    _, PPOTrainer = trainer_classes()
    hook = "PPOTrainerHooks.__init__"
    assumption = ("a rollout is per_device_train_batch_size x gradient_accumulation_steps prompts, cut into "
                  "num_mini_batches mini-batches of micro-batches, with accelerate accumulating over "
                  "gradient_accumulation_steps of them")
    assert_source(PPOTrainer.__init__, "Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)",
                  "args.local_batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps",
                  "args.local_mini_batch_size = exact_div(", assumption=assumption, hook=hook)
    assert_source(PPOTrainer.train, "(args.num_ppo_epochs, args.num_mini_batches, args.gradient_accumulation_steps)",
                  "range(0, args.local_batch_size, args.local_mini_batch_size)",
                  "range(0, args.local_mini_batch_size, args.per_device_train_batch_size)",
                  "with accelerator.accumulate(model)", "optimizer.step()", assumption=assumption, hook=hook)
    # 2 mini-batches of 2 micro-batches of 1 prompt: a rollout of 4 prompts, 2 optimizer steps per PPO epoch. The
    # rollout takes all 4 prompts, so it also ends a pass over the dataloader, where accelerate would step each time.
    trainer = tiny_hooks(tiny_models, tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=2,
                         num_mini_batches=2)
    args = trainer.args
    assert (args.batch_size, args.local_mini_batch_size, args.num_total_batches) == (4, 2, 1), f"re-check {hook}"
    assert args.gradient_accumulation_steps == trainer.accelerator.gradient_accumulation_steps == 2
    steps = []
    trainer.optimizer.optimizer.register_step_post_hook(lambda *_: steps.append(trainer.state.global_step))
    trainer.train()
    assert steps == [0, 0], f"expected 2 optimizer steps in the one rollout, got {len(steps)}: re-check {hook}"
    assert sum(len(completions) for completions, _ in trainer.completions) == 4


def test_train_zeroes_its_counters_before_on_train_begin_and_runs_num_total_batches(hooks):
    _, PPOTrainer = trainer_classes()
    hook = "PPOTrainerHooks.start_at_batch"
    assert_source(PPOTrainer.train, "self.state.global_step = 0", "self.state.episode = 0",
                  "self.state.max_steps = args.num_total_batches", "on_train_begin(",
                  "for update in range(1, args.num_total_batches + 1)", "self.state.episode += 1 * args.batch_size",
                  "self.state.global_step += 1",
                  assumption="train() zeroes the counters before on_train_begin, then runs num_total_batches batches",
                  hook=hook)
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
    Trainer, PPOTrainer = trainer_classes()
    hook = "PPOTrainerHooks._save_checkpoint"
    assert list(inspect.signature(Trainer._save_checkpoint).parameters) == ["self", "model", "trial"], (
        f"Trainer._save_checkpoint(model, trial) changed its signature: re-check {hook}"
    )
    assert_source(PPOTrainer.train, "if self.control.should_save:", "self._save_checkpoint(model, trial=None)",
                  "on_save(", assumption="train() saves through self._save_checkpoint, then calls on_save", hook=hook)
    assert_source(Trainer._save_checkpoint, "checkpoint_folder = f\"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}\"",
                  "self.save_model(", "self._save_optimizer_and_scheduler(", "self._save_rng_state(",
                  "self.state.save_to_json(os.path.join(output_dir, TRAINER_STATE_NAME))",
                  assumption="_save_checkpoint writes checkpoint-<step>/ with trainer_state.json last", hook=hook)
    hooks.state.global_step = 3
    hooks._save_checkpoint(hooks.model, trial=None)
    checkpoint = hooks.args.output_dir + "/checkpoint-3"
    assert [(str(path), state_written) for path, state_written in hooks.checkpoints] == [(checkpoint, False)]
    saved = {path.name for path in hooks.checkpoints[0][0].iterdir()}
    assert {"trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth", "config.json"} <= saved, saved
    architectures = json.loads((hooks.checkpoints[0][0] / "config.json").read_text())["architectures"]
    assert architectures == ["LlamaForCausalLM"], "the checkpoint's model is not the policy alone"


def test_saving_reads_policy_off_the_model_which_ddp_hides(hooks, tmp_path):
    from safetensors.torch import load_file

    Trainer, PPOTrainer = trainer_classes()
    assert_source(PPOTrainer.save_model, "if hasattr(self.model, \"policy\"):", "self.model = self.model.policy",
                  assumption="PPOTrainer.save_model saves self.model.policy, found with hasattr (DDP hides it: "
                  "trl issue #2375)", hook="PPOTrainerHooks._without_ddp_wrapper")
    assert "is_distributed_loading_by_transformers" not in vars(hooks), (
        "TRL's PPOTrainer now sets is_distributed_loading_by_transformers: drop the class attribute in PPOTrainerHooks"
    )
    assert_source(Trainer._save, "self.is_distributed_loading_by_transformers",
                  assumption="Trainer._save reads is_distributed_loading_by_transformers",
                  hook="PPOTrainerHooks.is_distributed_loading_by_transformers")
    hooks.save_model(str(tmp_path / "final"))
    assert json.loads((tmp_path / "final" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not any(name.startswith(("value_model.", "policy.")) for name in load_file(tmp_path / "final" /
                                                                                      "model.safetensors"))


def test_the_value_model_is_the_wrappers_value_model(hooks):
    weights = hooks.value_model_state_dict()
    assert weights.keys() == hooks.trained_value_model.state_dict().keys(), (
        "TRL's PolicyAndValueWrapper no longer names its parts policy and value_model: re-check "
        "PPOTrainerHooks.trained_policy, trained_value_model and value_model_state_dict"
    )
    assert hooks.trained_policy is hooks.accelerator.unwrap_model(hooks.model).policy


def test_optimizer_scheduler_and_random_state_come_back_from_a_checkpoint(hooks):
    import torch

    Trainer, _ = trainer_classes()
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


def test_the_lora_reference_forward_reads_policy_off_the_model_which_ddp_hides():
    _, PPOTrainer = trainer_classes()
    assert_source(PPOTrainer.null_ref_context, "self.model.policy",
                  assumption="PPOTrainer.null_ref_context reads self.model.policy (DDP hides it)",
                  hook="PPOTrainerHooks._fix_lora_reference_under_ddp")
    assert_source(PPOTrainer.train, "with self.null_ref_context():", "forward(model.policy,",
                  assumption="PPOTrainer.train runs the LoRA reference forward on model.policy, model = self.model",
                  hook="PPOTrainerHooks._fix_lora_reference_under_ddp")


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

    Trainer, _ = trainer_classes()
    hook = "ScheduleFromResumedStep"
    assert_source(Trainer._prepare_for_training, "self.create_scheduler(num_training_steps=max_steps)",
                  "self._load_optimizer_and_scheduler(resume_from_checkpoint)",
                  assumption="the scheduler is built for this launch's length, then the checkpoint's state loaded",
                  hook=hook)
    assert_source(Trainer._inner_training_loop, "self._prepare_for_training(", "on_train_begin(",
                  assumption="the optimizer and scheduler are restored before on_train_begin", hook=hook)

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


def test_grpo_buffers_a_generation_by_a_pass_counter_that_it_never_saves():
    from trl import GRPOTrainer

    hook = "ResumableGRPOTrainer (_save_checkpoint, restore_generation)"
    assert_source(GRPOTrainer.__init__, "self._step = 0", "self._buffered_inputs = None",
                  assumption="GRPOTrainer counts passes in _step and buffers a generation in _buffered_inputs",
                  hook=hook)
    assert_source(GRPOTrainer.training_step, "self._step += 1", assumption="each pass adds 1 to _step", hook=hook)
    assert_source(GRPOTrainer._prepare_inputs, "if self._step % generate_every == 0 or self._buffered_inputs is None",
                  "self._buffered_inputs = ",
                  "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]",
                  assumption="a pass generates when _step is a multiple of the block, else trains on a buffered slice",
                  hook=hook)
    assert_source(GRPOTrainer._save_checkpoint, "super()._save_checkpoint(model, trial)",
                  assumption="GRPOTrainer saves through Trainer._save_checkpoint (trainer_state.json last)", hook=hook)
    for name in ("self._step", "self._buffered_inputs"):
        assert name not in inspect.getsource(GRPOTrainer._save_checkpoint), (
            f"GRPOTrainer now saves {name} itself: drop that part of {hook}")


def test_each_pass_over_the_prompts_gets_the_order_of_that_pass_in_an_uninterrupted_run():
    from transformers import Trainer
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    from rlhf.trl_compat.grpo import EpochRepeatSampler

    hook = "EpochRepeatSampler"
    assert_source(GRPOTrainer._get_train_sampler, "return RepeatSampler(", "seed=self.args.seed",
                  assumption="GRPO's train sampler is a RepeatSampler seeded with args.seed", hook=hook)
    assert_source(RepeatSampler.__iter__, "torch.randperm(self.num_samples, generator=self.generator)",
                  assumption="RepeatSampler draws one permutation per pass from its generator", hook=hook)
    assert_source(Trainer._run_epoch, "train_dataloader.set_epoch(epoch)", "iter(train_dataloader)",
                  "self.state.epoch = epoch + (step + 1) / steps_in_epoch",
                  assumption="each pass calls set_epoch(epoch) before drawing batches; state.epoch counts passes",
                  hook=hook)
    assert_source(Trainer._inner_training_loop, "for epoch in range(epochs_trained, num_train_epochs):",
                  "on_epoch_begin(", "self._run_epoch(",
                  assumption="on_epoch_begin comes before each pass's batches are drawn", hook="_SamplerPass")

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
