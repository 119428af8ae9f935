"""Mistakes a user can make end in one `error:` line naming the value and the fix, exit code 2, nothing written.

Run in-process (`run_cli`): each stops before any training, so a new Python process would only add import time.
"""

import pytest

from conftest import error_line, grpo_args, ppo_args
from rlhf import tiny


def reward_args(models, output_dir, *extra):
    return ["--model_name_or_path", models["policy"], "--dataset_name", models["prompts"], "--output_dir", output_dir,
            "--max_steps", "1", *extra]


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "train_reward_model.py"])
@pytest.mark.parametrize("content", ["", "system,question,chosen,rejected\n"], ids=["empty", "header-only"])
def test_an_empty_dataset_is_one_line(tiny_models, tmp_path, run_cli, script, content):
    data = tmp_path / ("data.jsonl" if not content else "data.csv")
    data.write_text(content)
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), "--dataset_name", data)
    assert str(data) in error_line(result)
    assert not (tmp_path / "out" / "run_manifest.json").exists()


@pytest.mark.parametrize("script, flags, message", [
    ("train_grpo.py", ["--max_completion_length", "0"], "--max_completion_length must be >= 1"),
    ("train_ppo.py", ["--max_completion_length", "0"], "--max_completion_length must be >= 1"),
    ("train_ppo.py", ["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be >= 1"),
    ("train_grpo.py", ["--use_lora", "--lora_r", "0"], "--lora_r must be >= 1"),
    ("train_reward_model.py", ["--eval_samples", "-5"], "--eval_samples must be >= 0"),
    ("train_grpo.py", ["--max_samples", "-5"], "--max_samples must be >= 0"),
    ("train_grpo.py", ["--dataset_split", "test"], "single split, 'train'; drop --dataset_split test"),
    ("train_grpo.py", ["--dtype", "bfloat16"], "--allow_half_precision_weights to train them anyway"),
    ("train_ppo.py", ["--dtype", "float16"], "--allow_half_precision_weights to train them anyway"),
    ("train_grpo.py", ["--use_cpu", "--bf16", "true", "--cache_implementation", "static"],
     "--cache_implementation static fails with float32 weights under --bf16"),
])
def test_values_a_user_can_type_are_one_line(tiny_models, tmp_path, run_cli, script, flags, message):
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), *flags)
    assert message in error_line(result)
    assert not (tmp_path / "out").exists()


def test_a_file_or_an_empty_folder_given_as_model_or_data_says_what_it_is(tiny_models, tmp_path, run_cli):
    weights = tiny_models["policy"] / "model.safetensors"
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--model_name_or_path", weights)
    assert f"model {weights} is a file; point --model_name_or_path at a model folder" in error_line(result)
    (tmp_path / "empty").mkdir()
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--dataset_name", tmp_path / "empty")
    assert "holds no data files" in error_line(result) and "quickstart" not in error_line(result)


def test_qlora_without_a_gpu_is_refused_before_anything_loads(tiny_models, tmp_path, run_cli, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a machine with a GPU
    for script, build in (("train_grpo.py", grpo_args), ("train_ppo.py", ppo_args),
                          ("train_reward_model.py", reward_args)):
        result = run_cli(script, *build(tiny_models, tmp_path / "out"), "--use_lora", "--load_in_4bit")
        assert "--load_in_4bit needs a CUDA GPU" in error_line(result)
    assert not (tmp_path / "out").exists()


def test_qlora_needs_bitsandbytes_and_builds_an_nf4_config(monkeypatch):
    import importlib.util

    import torch

    from rlhf.errors import UserError
    from rlhf.models import check_4bit, load_kwargs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "bitsandbytes" else real_find_spec(name))
    with pytest.raises(UserError, match="pip install -r requirements-qlora.txt"):
        check_4bit(True)
    config = load_kwargs("float32", load_in_4bit=True)["quantization_config"]
    assert (config.load_in_4bit, config.bnb_4bit_quant_type, config.bnb_4bit_compute_dtype) == (True, "nf4",
                                                                                                 torch.bfloat16)
    assert "quantization_config" not in load_kwargs("float32")


def test_a_reward_model_of_another_kind_of_adapter_is_refused(tiny_models, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlhf.errors import UserError
    from rlhf.reward import load_reward_model

    adapter = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
                             LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    adapter.save_pretrained(tmp_path / "causal_adapter")
    with pytest.raises(UserError, match="adapter of a CAUSAL_LM model, not of a sequence classifier"):
        load_reward_model(str(tmp_path / "causal_adapter"))


def test_a_lora_reward_model_adapter_loads_merged(tiny_models, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    from rlhf.reward import load_reward_model, score_conversations

    base = AutoModelForSequenceClassification.from_pretrained(tiny_models["reward_model"])
    adapter = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], task_type="SEQ_CLS"))
    with torch.no_grad():
        adapter.base_model.model.score.modules_to_save["default"].weight.add_(1.0)  # a trained head, not the base's
    adapter.save_pretrained(tmp_path / "rm_adapter")
    model, tokenizer = load_reward_model(str(tmp_path / "rm_adapter"))
    plain, _ = load_reward_model(str(tiny_models["reward_model"]))
    conversation = [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]]
    assert score_conversations(model, tokenizer, conversation) != score_conversations(plain, tokenizer, conversation)
    assert not any("lora" in name for name, _ in model.named_parameters())
