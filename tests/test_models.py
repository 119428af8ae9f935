"""`rlhf.models.stop_token_ids`: the one set of ids that end a run's completions, read from the model loaded, and the
same set TRL's GRPOTrainer stops generation at."""

import pytest


def test_the_stop_tokens_are_the_tokenizers_eos_and_every_end_the_model_declares(tiny_models, end_of_turn_models):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf.models import stop_token_ids

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    eos, eot = tokenizer.eos_token_id, end_of_turn_models["end_of_turn"]
    assert stop_token_ids(tokenizer, tiny_models["policy"]) == (eos,)
    assert stop_token_ids(tokenizer, end_of_turn_models["policy"]) == tuple(sorted({eos, eot}))
    # the model loaded says the same as its folder
    assert stop_token_ids(tokenizer, AutoModelForCausalLM.from_pretrained(end_of_turn_models["policy"])) == (
        tuple(sorted({eos, eot})))
    # PPO's --stop_token none: --stop_token_id alone, or nothing (completions run to the length limit)
    assert stop_token_ids(tokenizer, end_of_turn_models["policy"], None, eot) == (eot,)
    assert stop_token_ids(tokenizer, end_of_turn_models["policy"], None, None) == ()


def test_an_adapter_folders_stop_tokens_are_its_bases(tiny_models, end_of_turn_models):
    """An adapter folder has no generation config: TRL trains its merge into the base, whose generation config is the
    base's (GRPO scored completions TRL stopped at the end-of-turn id as cut off)."""
    from transformers import AutoTokenizer

    from rlhf.models import stop_token_ids

    adapter = end_of_turn_models["adapter"]
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "generation_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    assert end_of_turn_models["end_of_turn"] in stop_token_ids(tokenizer, adapter)


def test_a_model_without_a_generation_config_file_declares_the_ends_of_its_config_json(tiny_models, tmp_path):
    """transformers then makes the generation config from config.json: its eos ids apply."""
    import shutil

    from transformers import AutoConfig, AutoTokenizer

    from rlhf.models import stop_token_ids

    folder = shutil.copytree(tiny_models["policy"], tmp_path / "policy")
    (folder / "generation_config.json").unlink()
    config = AutoConfig.from_pretrained(folder)
    config.eos_token_id = [config.eos_token_id, 7]
    config.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert stop_token_ids(tokenizer, folder) == tuple(sorted({tokenizer.eos_token_id, 7}))


@pytest.mark.parametrize("start", ["policy", "adapter"])
def test_grpo_rewards_stop_where_trls_grpo_trainer_stops_generation(tiny_models, end_of_turn_models, tmp_path,
                                                                    start):
    """The rewards' stop set (train_grpo.py: from --model_name_or_path) is the one TRL's GRPOTrainer generates and
    masks with, for the model it loads (an adapter folder: its merge into the base, `trainable_model_path`)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from rlhf.models import stop_token_ids, trainable_model_path
    from rlhf.trl_compat import GRPOConfig, GRPOTrainer

    path = end_of_turn_models[start]
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"], padding_side="left")
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=4, max_steps=1, beta=0.0, use_cpu=True, bf16=False, report_to=[])
    trainer = GRPOTrainer(model=str(trainable_model_path(path, tmp_path / "out")), reward_funcs=[lambda **_: [0.0]],
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["a b", "c d"]}),
                          processing_class=tokenizer)
    assert end_of_turn_models["end_of_turn"] in trainer.eos_token_ids
    assert set(trainer.eos_token_ids) == set(stop_token_ids(tokenizer, path))


def test_the_flags_decide_sampling_and_a_models_own_sampling_fields_are_turned_off_and_said():
    """Qwen2.5-Instruct's generation_config.json: transformers fills every field a generate call leaves unset from it,
    so PPO's rollouts sampled with its repetition penalty and top-k while the loss read the policy's own log-probs."""
    from transformers import GenerationConfig

    from rlhf.models import NEUTRAL_SAMPLING, flags_sampling, model_sampling, sampling_note

    qwen = GenerationConfig(do_sample=True, repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20,
                            eos_token_id=[151645, 151643])
    assert model_sampling(qwen) == {"repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
    assert flags_sampling(qwen, temperature=1.0, top_p=0.9) == {"repetition_penalty": 1.0, "temperature": 1.0,
                                                                "top_p": 0.9, "top_k": 0, "do_sample": True}
    # a model that sets none gets the flags alone; every neutral value adds no logits processor
    assert flags_sampling(GenerationConfig(), temperature=0.7) == {"temperature": 0.7, "do_sample": True}
    assert model_sampling(GenerationConfig(**NEUTRAL_SAMPLING)) == {} and model_sampling(None) == {}
    assert sampling_note("PPO", "qwen", qwen, {"temperature": 0.7, "top_p": 1.0}) == (
        "note: qwen's generation_config.json samples with repetition_penalty 1.05, temperature 0.7, top_k 20, top_p "
        "0.8; PPO samples as its flags say (--temperature 0.7, --top_p 1) (docs/training.md, Sampling)")
    assert sampling_note("PPO", "llama", GenerationConfig(), {"temperature": 0.7}) is None
