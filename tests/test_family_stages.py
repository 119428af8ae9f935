"""Every stage on every family (`rlhf.tiny.FAMILIES`), in the test process, a step or a rollout each: the reward
model with the family's sequence-classification head, GRPO with a LoRA adapter on every linear layer, PPO with a LoRA
adapter and with a critic warm-up, and the evaluation scored by the family's reward model beside a judge of another
family (another vocabulary). tests/test_families.py holds the invariants of the first update."""

import json

import pytest

from conftest import assert_ok, grpo_args, ppo_args, run_in_process, scalars
from rlhf import tiny
from test_families import models_of

pytestmark = pytest.mark.slow


def lora(name):
    """A LoRA adapter on every linear layer: a mixture of experts' fused expert weights take it without dropout."""
    return ["--use_peft", "--lora_target_modules", "all-linear", *(["--lora_dropout", "0"] if "moe" in name else [])]


@pytest.mark.parametrize("name", tiny.FAMILIES)
def test_the_reward_model_trains_with_the_familys_classification_head(families, tiny_models, tmp_path, name):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "reward"
    assert_ok(run_in_process("train_reward_model.py", "--model_name_or_path", families[name]["policy"],
                             "--dataset_name", tiny_models["prompts"], "--output_dir", out, "--max_steps", "2",
                             "--per_device_train_batch_size", "4", "--eval_samples", "8"))
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.num_labels == 1 and model.config.pad_token_id is not None
    assert json.loads((out / "reward_accuracy.json").read_text())["num_pairs"] == 8


@pytest.mark.parametrize("name", tiny.FAMILIES)
def test_grpo_trains_a_lora_adapter_on_every_linear_layer_and_evaluates_held_out_prompts(families, tiny_models,
                                                                                        tmp_path, name):
    out = tmp_path / "grpo"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(models_of(families, tiny_models, name), out, "--max_steps",
                                                         "2", *lora(name), "--max_samples", "24", "--eval_prompts",
                                                         "2")))
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert len(adapter["target_modules"]) >= 3  # every linear layer of the family, whatever its names
    logged = scalars(out)
    assert logged["train/kl"][0] == (1, pytest.approx(0, abs=1e-6))
    assert [step for step, _ in logged["eval/win_rate"]] == [0, 2]  # the start, then the checkpoint


@pytest.mark.parametrize("name", tiny.FAMILIES)
@pytest.mark.parametrize("flags", [["--use_peft"], ["--critic_warmup", "1"]], ids=["lora", "critic_warmup"])
def test_ppo_trains_with_lora_or_a_critic_warmup(families, tiny_models, tmp_path, name, flags):
    out = tmp_path / "ppo"
    flags = lora(name) if "--use_peft" in flags else flags
    assert_ok(run_in_process("train_ppo.py", *ppo_args(models_of(families, tiny_models, name), out,
                                                       "--total_episodes", "4", *flags)))
    logged = scalars(out)
    assert [step for step, _ in logged["train/objective/kl"]] == [1, 2]
    assert (out / ("adapter_config.json" if "--use_peft" in flags else "model.safetensors")).exists()
    if "--critic_warmup" in flags:  # the first rollout trained the value model alone
        assert [value for _, value in logged["train/objective/critic_warmup"]] == [1.0, 0.0]


@pytest.mark.parametrize("name", tiny.FAMILIES)
def test_the_evaluation_scores_with_the_familys_reward_model_and_a_judge_of_another_family(families, tiny_models,
                                                                                          tmp_path, name):
    judge = "gpt2" if name != "gpt2" else "llama3"  # another family: another vocabulary and chat template
    out = tmp_path / "evaluation.json"
    assert_ok(run_in_process("evaluate_generations.py", "--model_path", families[name]["policy"],
                             families[name]["policy"], "--reward_model_path", families[name]["reward_model"],
                             "--judge_model_name_or_path", families[judge]["reward_model"], "--dataset_name",
                             tiny_models["prompts"], "--train_samples", "0", "--num_prompts", "2",
                             "--num_completions", "2", "--max_new_tokens", "6", "--output_file", out))
    report = json.loads(out.read_text())
    assert report["complete"] and len(report["comparison"]) == 1
    assert report["comparison"][0]["judge"]["win_rate"] == 0.5  # a model against itself, the same samples
    assert all(c["text"] is not None for m in report["models"] for p in m["prompts"] for c in p["completions"])


def test_a_lora_combination_a_family_cannot_take_is_one_line(families, tiny_models, tmp_path, run_cli):
    from conftest import error_line

    # PEFT adapts a mixture of experts' fused expert weights as parameters, which it refuses with dropout: it was a
    # ValueError from deep inside PEFT
    line = error_line(run_cli("train_grpo.py", *grpo_args(models_of(families, tiny_models, "qwen3_moe"),
                                                          tmp_path / "moe", "--use_peft", "--lora_target_modules",
                                                          "all-linear")))
    assert "mixture of experts (qwen3_moe, 4 experts)" in line and "pass --lora_dropout 0 (it is 0.05)" in line
    # GPT-2's attention and MLP are transformers' Conv1D layers, which PEFT adapts: the hint names them
    line = error_line(run_cli("train_ppo.py", *ppo_args(models_of(families, tiny_models, "gpt2"), tmp_path / "gpt2",
                                                        "--use_peft")))
    assert "its linear layers are c_attn c_fc c_proj lm_head (or pass all-linear)" in line
    assert not (tmp_path / "moe").exists() and not (tmp_path / "gpt2").exists()
