"""`train_reward_model.py` run end to end as a subprocess on tiny local models."""

import json

import pytest

from conftest import assert_ok, error_line, grpo_args, run_in_process, run_script, scalars
from rlhf import tiny

SMALL = ["--max_steps", "3", "--logging_steps", "1", "--per_device_train_batch_size", "4", "--eval_samples", "6",
         "--save_steps", "2"]


def h4_rows(rows):
    """The same pairs in the HuggingFaceH4/orca_dpo_pairs layout: prompt + chosen/rejected message lists."""
    def conversation(row, answer):
        system = [{"role": "system", "content": row["system"]}] if row["system"] else []
        return system + [{"role": "user", "content": row["question"]}, {"role": "assistant", "content": answer}]

    return [{"prompt": r["question"], "chosen": conversation(r, r["chosen"]),
             "rejected": conversation(r, r["rejected"])} for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("schema", ["orca", "orca_messages"])
def test_reward_model_trains_on_each_schema_and_is_ready_for_the_rl_scripts(tiny_models, tmp_path, schema):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rows = tiny.orca_rows(30)
    data = tiny.write_jsonl(tmp_path / "pairs.jsonl", rows if schema == "orca" else h4_rows(rows))
    out = tmp_path / "reward"
    result = run_in_process("train_reward_model.py", "--model_name_or_path", tiny_models["policy"],
                            "--dataset_name", data, "--output_dir", out, *SMALL)
    assert_ok(result)
    assert f"Schema '{schema}': 24 training pairs, 6 held out." in result.stdout

    model = AutoModelForSequenceClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.num_labels == 1
    assert model.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.chat_template is not None
    report = json.loads((out / "reward_accuracy.json").read_text())
    assert report["num_pairs"] == 6 and 0.0 <= report["accuracy"] <= 1.0
    assert f"Held-out pairwise accuracy: {report['accuracy']:.3f}" in result.stdout
    assert "train/loss" in scalars(out) and "train/accuracy" in scalars(out)

    # The folder is usable as is by GRPO.
    grpo_out = tmp_path / "grpo"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, grpo_out, "--max_steps", "1", reward_model=out)))
    assert "train/reward" in scalars(grpo_out)


@pytest.mark.slow
def test_lora_reward_model_is_merged_and_loads_without_peft(tiny_models, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification

    data = tiny.write_jsonl(tmp_path / "pairs.jsonl", tiny.orca_rows(30))
    out = tmp_path / "reward_lora"
    result = run_in_process("train_reward_model.py", "--model_name_or_path", tiny_models["policy"], "--use_lora",
                            "--learning_rate", "1e-2", "--dataset_name", data, "--output_dir", out, *SMALL)
    assert_ok(result)
    assert not (out / "adapter_config.json").exists()
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert not any("lora" in name for name, _ in model.named_parameters())
    assert model.score.weight.shape == (1, model.config.hidden_size)
    # The score head was trained (kept by LoRA's SEQ_CLS task type), not left at a fresh random init.
    torch.manual_seed(0)
    fresh = AutoModelForSequenceClassification.from_pretrained(tiny_models["policy"], num_labels=1)
    assert not torch.allclose(model.score.weight, fresh.score.weight)
    assert (out / "reward_accuracy.json").exists()


def test_prompt_only_dataset_is_refused_in_one_line(tiny_models, tmp_path, run_cli):
    data = tiny.write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "hi"}] * 4)
    result = run_cli("train_reward_model.py", "--model_name_or_path", tiny_models["policy"],
                     "--dataset_name", data, "--output_dir", tmp_path / "out")
    assert "chosen" in error_line(result)


@pytest.mark.slow
def test_help_exits_zero():
    result = run_script("train_reward_model.py", "--help")
    assert result.returncode == 0 and "--eval_samples" in result.stdout


@pytest.mark.slow
def test_the_input_embedding_of_eos_where_the_reward_is_read_is_trained(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path / "reward"
    # The base config pads with EOS; the embedding's padding_idx, the row that gets no gradient, was once fixed there.
    assert_ok(run_in_process("train_reward_model.py", "--model_name_or_path", tiny_models["policy"], "--dataset_name",
                             tiny_models["prompts"], "--output_dir", out, *SMALL, "--learning_rate", "1e-2"))
    tokenizer = AutoTokenizer.from_pretrained(out)
    before = AutoModelForCausalLM.from_pretrained(tiny_models["policy"]).get_input_embeddings().weight
    model = AutoModelForSequenceClassification.from_pretrained(out)
    after = model.get_input_embeddings().weight
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    assert not after[eos].equal(before[eos]), "the EOS row of the input embedding got no gradient"
    assert after[pad].equal(before[pad])  # the pad row is the one that gets none
    assert model.config.pad_token_id == pad == model.get_input_embeddings().padding_idx != eos
