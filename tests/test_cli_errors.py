"""Mistakes a user can make end in one `error:` line naming the value and the fix, exit code 2, nothing written.

Run in-process (`run_cli`): each stops before any training, so a new Python process would only add import time.
"""

import json
from pathlib import Path

import pytest

from conftest import assert_ok, error_line, grpo_args, ppo_args, run_script
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
    ("train_grpo.py", ["--missing_eos_penalty", "-1"], "--missing_eos_penalty must be >= 0 and finite"),
    ("train_ppo.py", ["--missing_eos_penalty", "-1"], "--missing_eos_penalty must be >= 0 and finite"),
    ("train_grpo.py", ["--dataset_split", "test"], "single split, 'train'; drop --dataset_train_split test"),
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

    from config import ModelArguments
    from rlhf.checks import check_quantization
    from rlhf.errors import UserError
    from rlhf.models import trained_model_kwargs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "bitsandbytes" else real_find_spec(name)
    )
    qlora = ModelArguments(use_peft=True, load_in_4bit=True)
    with pytest.raises(UserError, match="--load_in_4bit needs bitsandbytes: pip install -r requirements-qlora.txt"):
        check_quantization(qlora)
    with pytest.raises(UserError, match="--load_in_8bit needs bitsandbytes"):
        check_quantization(ModelArguments(use_peft=True, load_in_8bit=True))
    config = trained_model_kwargs(qlora)["quantization_config"]  # TRL's get_quantization_config, QLoRA's settings
    assert (config.load_in_4bit, config.bnb_4bit_quant_type, config.bnb_4bit_compute_dtype,
            config.bnb_4bit_use_double_quant) == (True, "nf4", torch.bfloat16, True)
    assert trained_model_kwargs(ModelArguments(use_peft=True, load_in_8bit=True))["quantization_config"].load_in_8bit
    assert "quantization_config" not in trained_model_kwargs(ModelArguments())


def test_a_reward_model_of_another_kind_of_adapter_is_refused(tiny_models, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlhf.errors import UserError
    from rlhf.rewards.reward_model import load_reward_model

    adapter = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
                             LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    adapter.save_pretrained(tmp_path / "causal_adapter")
    with pytest.raises(UserError, match="adapter of a CAUSAL_LM model, not of a sequence classifier"):
        load_reward_model(str(tmp_path / "causal_adapter"))


def test_a_lora_reward_model_adapter_loads_merged(tiny_models, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    from rlhf.rewards.reward_model import load_reward_model, score_conversations

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


def eval_args(models, output_file, *extra):
    return ["--model_path", models["policy"], "--reward_model_path", models["reward_model"], "--dataset_name",
            models["prompts"], "--train_samples", "0", "--num_prompts", "2", "--max_new_tokens", "8", "--output_file",
            output_file, *extra]


@pytest.mark.parametrize("script, cell", [("train_grpo.py", "question"), ("train_ppo.py", "question"),
                                          ("train_reward_model.py", "rejected")])
def test_an_empty_cell_in_a_csv_dataset_names_its_row_and_column(tiny_models, tmp_path, run_cli, script, cell):
    rows = ["system,question,chosen,rejected", ",What is 2+2?,Four.,Five.", "Be brief.,Say hi.,Hi.,Bye."]
    rows.append("Be kind.,,Yes.,No." if cell == "question" else "Be kind.,Why?,Because.,")
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")  # an empty `system` (row 1) is fine: no system turn
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), "--dataset_name", tmp_path / "data.csv")
    assert f"row 3 of the dataset has no `{cell}` (an empty cell or null)" in error_line(result)
    assert not (tmp_path / "out" / "run_manifest.json").exists()


def test_the_reward_model_script_on_prompt_only_data_names_the_columns_it_needs(tiny_models, tmp_path, run_cli):
    data = tiny.write_jsonl(tmp_path / "questions.jsonl", [{"system": "", "question": f"Q{i}?"} for i in range(8)])
    result = run_cli("train_reward_model.py", *reward_args(tiny_models, tmp_path / "out"), "--dataset_name", data)
    assert "dataset columns ['question', 'system'] hold prompts only, no chosen/rejected pairs" in error_line(result)
    assert not (tmp_path / "out" / "run_manifest.json").exists()


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "train_reward_model.py"])
def test_a_lora_target_module_the_model_lacks_is_one_line_listing_its_linear_layers(tiny_models, tmp_path, run_cli,
                                                                                     script):
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), "--use_lora",
                     "--lora_target_modules", "q_proj", "v_prj")
    line = error_line(result)
    assert "--lora_target_modules v_prj matches no module of the model; its linear layers are" in line
    assert "v_proj" in line and "down_proj" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_lora_target_module_given_as_a_yaml_scalar_trains(tiny_models, tmp_path, run_cli):
    """What PEFT did with the string 'q_proj': matched it as a regular expression against full names, found none."""
    config = tmp_path / "lora.yaml"
    config.write_text("use_lora: true\nlora_target_modules: q_proj\n")
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--config", config,
                     "--max_steps", "1")
    assert_ok(result)
    adapter = __import__("json").loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert adapter["target_modules"] == ["q_proj"]


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "evaluate_generations.py"])
def test_a_reward_model_given_as_the_policy_is_refused(tiny_models, tmp_path, run_cli, script):
    if script == "evaluate_generations.py":
        args = eval_args(tiny_models, tmp_path / "out" / "eval.json", "--model_path", tiny_models["reward_model"])
        flag = "--model_path"
    else:
        build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args}[script]
        args = [*build(tiny_models, tmp_path / "out"), "--model_name_or_path", tiny_models["reward_model"]]
        flag = "--model_name_or_path"
    line = error_line(run_cli(script, *args))
    assert f"{flag} {tiny_models['reward_model']} is a sequence classifier (a reward model), not a causal LM" in line
    assert not (tmp_path / "out").exists()


def test_a_causal_lm_given_as_the_ppo_reward_model_is_refused_before_the_run_starts(tiny_models, tmp_path, run_cli):
    result = run_cli("train_ppo.py", *ppo_args(tiny_models, tmp_path / "out", reward_model=tiny_models["policy"]))
    assert "must be a sequence classifier with num_labels=1 (it has architectures=['LlamaForCausalLM']" in \
        error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["train_grpo.py", "evaluate_generations.py"])
def test_a_reward_model_that_cannot_render_a_conversation_is_refused_before_the_run_starts(tiny_models, tmp_path,
                                                                                         run_cli, script):
    # GRPO and the evaluation score text through the reward model's own chat template; PPO feeds it the policy's
    # token ids, so it takes such a reward model (tests/test_cli_ppo.py).
    tokenizer = tiny.build_tokenizer()
    tokenizer.chat_template = None
    reward_model = tiny.build_reward_model(tmp_path / "no_template", tokenizer)
    if script == "evaluate_generations.py":
        args = eval_args({**tiny_models, "reward_model": reward_model}, tmp_path / "out" / "eval.json")
    else:
        args = grpo_args(tiny_models, tmp_path / "out", reward_model=reward_model)
    line = error_line(run_cli(script, *args))
    assert f"the tokenizer of reward model {reward_model} has no chat template" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script, flags, message", [
    ("train_grpo.py", ["--max_prompt_length", "20000"],
     "--max_prompt_length 20000 + --max_completion_length 8 = 2000"),
    ("train_ppo.py", ["--max_prompt_length", "512", "--max_completion_length", "1020"],
     "--max_prompt_length 512 + --max_completion_length 1020"),
    ("evaluate_generations.py", ["--max_prompt_length", "512", "--max_new_tokens", "600"],
     "--max_prompt_length 512 + --max_new_tokens 600 = 1112"),  # given: a default is fitted (test below)
])
def test_lengths_beyond_the_models_context_are_refused(tiny_models, tmp_path, run_cli, script, flags, message):
    if script == "evaluate_generations.py":
        args = eval_args(tiny_models, tmp_path / "out" / "eval.json", *flags)
    else:
        args = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args}[script](tiny_models, tmp_path / "out", *flags)
    line = error_line(run_cli(script, *args))
    assert message in line and "more than the 1024 positions of" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "evaluate_generations.py"])
def test_prompts_all_too_long_are_answered_with_what_the_model_holds(tiny_models, tmp_path, run_cli, script):
    # rlhf.checks.prompt_room, read from the model's config where the prompts are built (GRPO, PPO, the evaluation)
    if script == "evaluate_generations.py":
        args = eval_args(tiny_models, tmp_path / "out" / "eval.json", "--max_prompt_length", "2")
        flag = "--max_new_tokens"
    else:
        args = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args}[script](tiny_models, tmp_path / "out",
                                                                              "--max_prompt_length", "2")
        flag = "--max_completion_length"
    line = error_line(run_cli(script, *args))
    assert "every prompt is longer than --max_prompt_length 2 tokens" in line
    assert f"{tiny_models['policy']} holds 1024 positions" in line and f"beside {flag} " in line, line


def short_context_policy(tiny_models, folder, positions=256):
    """The tiny policy, told it has `positions` positions (max_position_embeddings in its config.json)."""
    import json
    import shutil

    shutil.copytree(tiny_models["policy"], folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
    return folder


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_a_default_prompt_length_the_model_cannot_hold_is_fitted_and_one_given_is_refused(tiny_models, tmp_path,
                                                                                          run_cli, script):
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args}[script]
    policy = short_context_policy(tiny_models, tmp_path / "short")
    length = ["--max_steps", "1"] if script == "train_grpo.py" else ["--total_episodes", "2"]
    # PPO scores with the reward model: it must share the policy's tokenizer, which the copy does
    result = run_cli(script, *build(tiny_models, tmp_path / "fitted", *length), "--model_name_or_path", policy)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (f"note: --max_prompt_length 512 -> 248 ({policy} has 256 positions, and --max_completion_length 8 of them "
            "go to the completion)") in result.stdout
    manifest = __import__("json").loads((tmp_path / "fitted" / "run_manifest.json").read_text())
    assert manifest["config"]["PromptDataArguments"]["max_prompt_length"] == 248  # what trained
    result = run_cli(script, *build(tiny_models, tmp_path / "given", *length), "--model_name_or_path", policy,
                     "--max_prompt_length", "512")
    assert "--max_prompt_length 512 + --max_completion_length 8 = 520 tokens, more than the 256" in error_line(result)


def _adapter(tiny_models, folder, base):
    """A LoRA adapter of the tiny policy saved in `folder`, its adapter_config.json recording `base` as its base."""
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_models["policy"]),
                           LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return folder


@pytest.mark.parametrize("adapter, base", [("models/adapter", "../policy"),
                                           ("runs/grpo/checkpoint-2", "models/policy")])  # trained from work/
def test_an_adapter_with_a_relative_base_loads_from_any_folder(tiny_models, tmp_path, monkeypatch, adapter, base):
    import shutil

    from rlhf.checks import check_model_source
    from rlhf.models import load_causal_lm

    shutil.copytree(tiny_models["policy"], tmp_path / "work" / "models" / "policy")
    adapter = _adapter(tiny_models, tmp_path / "work" / adapter, base)
    monkeypatch.chdir(tmp_path)  # where the base's relative path leads nowhere
    check_model_source(str(adapter), "model", "--model_name_or_path")
    model, tokenizer = load_causal_lm(str(adapter))
    assert tokenizer.chat_template and not any("lora" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize("base", ["../policy", "runs/policy"])
def test_an_adapter_whose_relative_base_is_not_found_names_it(tiny_models, tmp_path, run_cli, monkeypatch, base):
    adapter = _adapter(tiny_models, tmp_path / "adapter", base)
    monkeypatch.chdir(tmp_path)
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--model_name_or_path", adapter)
    line = error_line(result)
    assert f"the adapter {adapter} records its base model as '{base}' (base_model_name_or_path in" in line
    assert "run from the folder it was trained in, or write the base model's absolute path or Hub id there" in line
    assert not (tmp_path / "out").exists()


def test_a_typo_in_a_local_folder_says_it_does_not_exist_and_what_was_meant(tiny_models, tmp_path, run_cli,
                                                                            monkeypatch):
    root = tiny_models["policy"].parent
    monkeypatch.chdir(root.parent)
    typo = f"{root.name}/polcy"  # reads like a Hub id (owner/name), but `owner` is a folder here
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--model_name_or_path", typo)
    assert f"model {typo} does not exist (did you mean {root.name}/policy?)" in error_line(result)
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--reward_model_path",
                     f"{root.name}/reward_modle")
    assert f"(did you mean {root.name}/reward_model?)" in error_line(result)
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--dataset_name",
                     f"{root.name}/prompt")
    assert f"dataset {root.name}/prompt does not exist (did you mean {root.name}/prompts.jsonl?)" in error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script, flags, message", [
    ("train_grpo.py", ["--learning_rate", "nan"], "--learning-rate: nan is not a finite number"),
    ("train_ppo.py", ["--learning_rate", "inf"], "--learning-rate: inf is not a finite number"),
    ("train_grpo.py", ["--reward_weights", "nan"], "--reward-weights: nan is not a finite number"),
    ("train_grpo.py", ["--report_to", "tensorbord"], "--report_to tensorbord is not supported"),
    ("train_reward_model.py", ["--report_to", "wandb"], "--report_to wandb needs its package"),
    ("train_ppo.py", ["--bf16"], "--bf16 needs a GPU with bfloat16 support"),
    ("train_grpo.py", ["--fp16"], "--fp16 needs a CUDA GPU (float16 autocast with a loss scaler), and this run has"),
    ("train_ppo.py", ["--fp16"], "--fp16 needs a CUDA GPU"),
    ("train_reward_model.py", ["--fp16", "true"], "--fp16 needs a CUDA GPU"),
    ("train_grpo.py", ["--seed", "-1"], "--seed must be >= 0, got -1."),
    ("train_grpo.py", ["--top_k", "-5"], "--top_k must be >= 0, got -5."),
    ("train_grpo.py", ["--epsilon", "-0.2"], "--epsilon must be > 0, got -0.2."),
    ("train_grpo.py", ["--prompts_per_step", "0", "--steps_per_generation", "0"], "--steps_per_generation must be >="),
    ("train_grpo.py", ["--prompts_per_step", "0", "--generation_batch_size", "16", "--prompts_per_generation", "4"],
     "--prompts_per_generation 4 counts prompts of --prompts_per_step, but TRL's batch flags"),
    ("train_grpo.py", ["--steps_per_generation", "4", "--prompts_per_generation", "4"],
     "--steps_per_generation 4 is TRL's, and this package's --prompts_per_step 2 sets the batch here"),
    ("train_ppo.py", ["--stop_token", "foo"], "--stop_token foo is not supported; use eos"),
    ("train_reward_model.py", ["--eval_strategy", "steps"], "--eval_strategy steps needs an evaluation set"),
    ("train_grpo.py", ["--eval_strategy", "epoch"], "--eval_strategy epoch needs an evaluation set"),
])
def test_a_value_that_fails_only_once_training_runs_is_refused_first(tiny_models, tmp_path, run_cli, monkeypatch,
                                                                      script, flags, message):
    import transformers.integrations.integration_utils as integrations

    monkeypatch.setattr("rlhf.engines._bf16_available", lambda: False)  # the same answer on a machine with a GPU
    monkeypatch.setattr("rlhf.checks.cuda_available", lambda: False)
    monkeypatch.setattr(integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), *flags)
    assert message in error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("yaml, message", [
    ("learning_rate: [1.0e-5, 2.0e-5]", "learning_rate: [1e-05, 2e-05] in {config} is not valid; give one number"),
    ("learning_rate: null", "learning_rate is empty (null) in {config}"),
    ("max_steps: 1.5", "max_steps: 1.5 in {config} is not valid; give one integer"),
    ("lora_target_modules: {q_proj: 1}", "lora_target_modules: {'q_proj': 1} in {config} is not valid; give a text"),
    ("learning_rate: .nan", "learning_rate: nan in {config} is not valid; give one number"),
])
def test_a_yaml_value_of_the_wrong_kind_is_one_line(tiny_models, tmp_path, run_cli, yaml, message):
    config = tmp_path / "run.yaml"
    config.write_text(yaml + "\n")
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--config", config)
    assert message.replace("{config}", str(config)) in error_line(result)


@pytest.mark.parametrize("script, rows, message", [
    ("train_grpo.py", [{"prompt": ["a question"]}] * 8, "has list \"['a question']\" in `prompt`; it must be text or"),
    ("train_ppo.py", [{"question": 5}] * 8, "row 1 of the dataset has int '5' in `question`; it must be text:"),
    ("train_grpo.py", [{"system": "", "question": "q"}] * 4 + [{"system": 3, "question": "q"}] * 4,
     "row 5 of the dataset has int '3' in `system`; it must be text:"),
    ("train_reward_model.py", [{"question": "q", "chosen": 1.5, "rejected": "r"}] * 8, "has float '1.5' in `chosen`"),
])
def test_a_dataset_cell_that_is_not_text_names_its_row_and_column(tiny_models, tmp_path, run_cli, script, rows,
                                                                  message):
    data = tiny.write_jsonl(tmp_path / "data.jsonl", rows)
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), "--dataset_name", data)
    assert message in error_line(result)
    assert not (tmp_path / "out" / "run_manifest.json").exists()


@pytest.mark.parametrize("script, flag", [("train_grpo.py", "--model_name_or_path"),
                                          ("train_grpo.py", "--reward_model_path"),
                                          ("train_ppo.py", "--value_model_path"),
                                          ("train_reward_model.py", "--model_name_or_path")])
def test_a_model_folder_without_weights_is_one_line(tiny_models, tmp_path, run_cli, script, flag):
    import shutil

    source = tiny_models["reward_model" if flag != "--model_name_or_path" else "policy"]
    folder = shutil.copytree(source, tmp_path / "model", ignore=shutil.ignore_patterns("*.safetensors"))
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), flag, folder)
    assert f"folder {folder} has a config but no weights (*.safetensors or pytorch_model*.bin)" in error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["{not json", '{"version": "1.0", "model": 5}'], ids=["syntax", "structure"])
def test_a_damaged_tokenizer_is_one_line(tiny_models, tmp_path, run_cli, content):
    import shutil

    folder = shutil.copytree(tiny_models["policy"], tmp_path / "model")
    (folder / "tokenizer.json").write_text(content)
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--model_name_or_path", folder)
    assert f"cannot read the tokenizer of {folder} (" in error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["train_grpo.py", "train_reward_model.py"])
def test_a_run_or_checkpoint_of_another_script_is_refused_and_kept(tiny_models, tmp_path, run_cli, script):
    from rlhf.files import write_json
    from rlhf.lifecycle.manifest import MANIFEST

    other = tmp_path / "ppo_run"
    (other / "checkpoint-2").mkdir(parents=True)
    (other / "checkpoint-2" / "trainer_state.json").write_text('{"episode": 4}')
    manifest = {"script": "train_ppo.py", "config": {"PPOTrainingConfig": {}}, "finished_at": "2026-01-01"}
    write_json(other / MANIFEST, manifest)
    before = sorted(path.name for path in other.rglob("*"))
    build = {"train_grpo.py": grpo_args, "train_reward_model.py": reward_args}[script]

    result = run_cli(script, *build(tiny_models, other))
    assert f"{other} holds a run of train_ppo.py, which this script cannot resume" in error_line(result)
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), "--resume_from_checkpoint", other / "checkpoint-2")
    assert "checkpoint-2 comes from a run of train_ppo.py" in error_line(result)
    assert sorted(path.name for path in other.rglob("*")) == before and not (tmp_path / "out").exists()


def test_a_reward_model_max_length_below_every_pair_is_refused_before_the_run_starts(tiny_models, tmp_path, run_cli):
    result = run_cli("train_reward_model.py", *reward_args(tiny_models, tmp_path / "out"), "--max_length", "8")
    assert "every training pair is longer than --max_length 8 tokens (the shortest has" in error_line(result)
    assert not (tmp_path / "out" / "run_manifest.json").exists()


@pytest.mark.parametrize("script, flags, message", [
    ("train_grpo.py", ["--output_dir", ""], "--output_dir is empty"),
    ("train_ppo.py", ["--dataset_name", ""], "--dataset_name is empty"),
    ("train_reward_model.py", ["--model_name_or_path", ""], "--model_name_or_path is empty"),
    ("train_grpo.py", ["--reward_funcs", "reward_model", "reward_model"],
     "--reward_funcs names reward_model more than once"),
])
def test_an_empty_or_repeated_value_is_one_line(tiny_models, tmp_path, run_cli, monkeypatch, script, flags, message):
    monkeypatch.chdir(tmp_path)  # an empty --output_dir or model path must not mean the current folder
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args}[script]
    result = run_cli(script, *build(tiny_models, tmp_path / "out"), *flags)
    assert message in error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_a_classifier_of_several_outputs_as_the_ppo_value_model_is_refused(tiny_models, tmp_path, run_cli):
    from transformers import AutoConfig

    folder = tmp_path / "two_labels"
    config = AutoConfig.from_pretrained(tiny_models["reward_model"], num_labels=2)
    config.save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"")  # never read: refused from its config
    result = run_cli("train_ppo.py", *ppo_args(tiny_models, tmp_path / "out"), "--value_model_path", folder)
    assert f"value model {folder} is a classifier with num_labels=2" in error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_file_that_is_not_parquet_is_one_line(tiny_models, tmp_path):
    # In a new process: all a user sees, where `datasets` logs its own account of the failure (held back: the
    # error line says it).
    data = tmp_path / "data.parquet"
    data.write_text("not a parquet file")
    result = run_script("train_grpo.py", *grpo_args(tiny_models, tmp_path / "out"), "--dataset_name", data)
    assert f"cannot read dataset {data} (ArrowInvalid: " in error_line(result)
    assert "Failed to" not in result.stdout + result.stderr
    assert not (tmp_path / "out" / "run_manifest.json").exists()


def malformed_rows(tiny_models, tmp_path, bad):
    """A data file (or folder) with one malformed row, and the start of the line that names it."""
    lines = Path(tiny_models["prompts"]).read_text().splitlines()
    if bad == "cut-short":  # after a `chosen` of another type, which `datasets` would read alone
        data, changed = tmp_path / "data.jsonl", {**json.loads(lines[4]), "chosen": {"text": "Yes."}}
        data.write_text("\n".join([*lines[:4], json.dumps(changed), *lines[5:9], lines[9][:40], *lines[10:]]) + "\n")
        return data, f"dataset file {data}, line 10: the row is cut short"
    # conversations in one file of a folder, text in the other: `datasets` cannot cast one to the other
    data, rows = tmp_path / "data", [json.loads(line) for line in lines]
    tiny.write_jsonl(data / "a.jsonl", [{**row, "chosen": [{"role": "assistant", "content": row["chosen"]}]}
                                        for row in rows[:16]])
    tiny.write_jsonl(data / "b.jsonl", rows[16:])
    return data, f"dataset file {data / 'b.jsonl'}, line 1: `chosen` is text ("


MALFORMED_BUILDS = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args, "train_reward_model.py": reward_args,
                    "evaluate_generations.py": lambda models, folder: eval_args(models, folder / "eval.json")}


@pytest.mark.parametrize("script", list(MALFORMED_BUILDS))
@pytest.mark.parametrize("bad", ["cut-short", "type-change"])
def test_a_malformed_data_row_is_one_line_naming_its_file_and_line(tiny_models, tmp_path, run_cli, script, bad):
    """Once a pyarrow or pandas traceback (exit 1) that named no line."""
    data, said = malformed_rows(tiny_models, tmp_path, bad)
    out = tmp_path / "out"
    result = run_cli(script, *MALFORMED_BUILDS[script](tiny_models, out), "--dataset_name", data)
    assert error_line(result).startswith(f"error: {said}")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("script, bad", [("train_grpo.py", "cut-short"), ("evaluate_generations.py", "type-change")])
def test_a_malformed_data_row_is_all_a_user_sees(tiny_models, tmp_path, script, bad):
    """In a new process: all a user sees, where `datasets` logs its own account of the failure (held back: the error
    line says it; every script reads its data through `rlhf.data.load_rows`)."""
    data, said = malformed_rows(tiny_models, tmp_path, bad)
    result = run_script(script, *MALFORMED_BUILDS[script](tiny_models, tmp_path / "out"), "--dataset_name", data)
    assert error_line(result).startswith(f"error: {said}")
    assert "Failed to" not in result.stdout + result.stderr  # `datasets`' log of the failure: said once is enough


def test_grpo_with_boxed_answer_on_data_without_reference_answers_is_refused_before_any_model_loads(
        tiny_models, tmp_path, run_cli):
    out = tmp_path / "out"
    line = error_line(run_cli("train_grpo.py", *grpo_args(tiny_models, out, "--reward_funcs", "boxed_answer")))
    assert "boxed_answer" in line and "`ground_truth`" in line and str(tiny_models["prompts"]) in line
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("what", ["model", "dataset"])
def test_an_unreachable_hub_is_said_in_one_line_at_once_not_after_retries(tiny_models, tmp_path, what):
    # Nothing listens on port 9 here: the connection is refused at once, as with no network. huggingface_hub would
    # retry each request 5 times over ~25 s, printing every retry, before its error.
    env = {"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9",
           "HF_HOME": str(tmp_path / "hf_home")}
    local = {"model": ["--dataset_name", tiny_models["prompts"]],
             "dataset": ["--model_name_or_path", tiny_models["policy"], "--dataset_name", "owner/some_prompts"]}
    result = run_script("train_grpo.py", "--reward_model_name_or_path", tiny_models["reward_model"], *local[what],
                        "--output_dir", tmp_path / "run", env=env)
    line = error_line(result)
    assert line.startswith("error: cannot reach the Hugging Face Hub (127.0.0.1: Connection refused) to download "
                           + ("model HuggingFaceTB/smollm2-135M-SFT-Only" if what == "model"
                              else "dataset 'owner/some_prompts'"))
    assert "Retry" not in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_grpo.py", "evaluate_generations.py"])
def test_prompts_longer_than_a_fitted_length_are_refused_saying_what_fits(tiny_models, tmp_path, run_cli, script):
    # 128 positions, 120 of them for the completion: the default --max_prompt_length is fitted to 8, and every prompt
    # is longer. "raise it" alone would be refused in turn: the line says how long a prompt is and what must fit.
    policy = short_context_policy(tiny_models, tmp_path / "short", positions=128)
    if script == "train_grpo.py":
        args = [*grpo_args(tiny_models, tmp_path / "out"), "--model_name_or_path", policy,
                "--max_completion_length", "120"]
        flag = "--max_completion_length"
    else:
        args = ["--model_path", policy, "--reward_model_name_or_path", tiny_models["reward_model"], "--dataset_name",
                tiny_models["prompts"], "--train_samples", "0", "--max_new_tokens", "120", "--output_file",
                tmp_path / "eval.json"]
        flag = "--max_new_tokens"
    result = run_cli(script, *args)
    assert (f"note: --max_prompt_length 512 -> 8 ({policy} has 128 positions, and {flag} 120 of them go to the "
            "completion)") in result.stdout
    line = error_line(result)
    assert line.startswith("error: every prompt is longer than --max_prompt_length 8 tokens (the shortest has ")
    shortest = int(line.split("(the shortest has ")[1].split(")")[0])
    assert line.endswith(f"; with {flag} 120, {policy}'s 128 positions cannot hold the shortest prompt: lower "
                         f"{flag} to at most {128 - shortest} and pass --max_prompt_length {shortest}, or use shorter "
                         "prompts (other data, a shorter --system_prompt)")
    # ... and what it says works: the fix it names runs
    fixed = [*args, "--max_prompt_length", str(shortest), flag, str(128 - shortest)]
    short = ["--num_prompts", "2", "--num_completions", "1"] if script == "evaluate_generations.py" else [
        "--max_steps", "1", "--prompts_per_step", "1", "--per_device_train_batch_size", "2"]  # one prompt fits
    assert_ok(run_cli(script, *fixed, *short))


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "evaluate_generations.py"])
def test_several_mistakes_are_said_together_in_one_line(tiny_models, tmp_path, run_cli, script):
    """A newcomer took three runs to learn of three problems, one error at a time."""
    data = tmp_path / "prompts.jsonl"
    data.write_text((Path(tiny_models["prompts"])).read_text())
    (tmp_path / "report.json").mkdir()  # a folder where the evaluation's report would go
    missing_reward = tmp_path / "no_reward_model"
    if script == "evaluate_generations.py":
        args = ["--model_path", tiny_models["policy"], "--dataset_name", tmp_path / "promts.jsonl",
                "--reward_model_name_or_path", missing_reward, "--output_file", tmp_path / "report.json"]
    else:
        args = ["--model_name_or_path", tiny_models["policy"], "--dataset_name", tmp_path / "promts.jsonl",
                "--reward_model_name_or_path", missing_reward, "--output_dir", tmp_path / "out"]
    result = run_cli(script, *args)
    assert result.returncode == 2
    line = error_line(result)
    things = 3 if script == "evaluate_generations.py" else 2
    assert line.startswith(f"error: {things} things to fix: (1) dataset {tmp_path / 'promts.jsonl'} does not exist "
                           f"(did you mean {data}?)")
    assert f"(2) reward model {missing_reward} does not exist" in line
    if script == "evaluate_generations.py":
        assert f"(3) --output_file {tmp_path / 'report.json'} is a folder" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py"])
def test_the_appended_system_prompt_reaches_the_training_prompts(tiny_models, tmp_path, run_cli, script):
    """Every prompt made longer than --max_prompt_length 1 says its shortest length: the appended words count."""
    build = {"train_grpo.py": grpo_args, "train_ppo.py": ppo_args}[script]

    def shortest(*flags):
        line = error_line(run_cli(script, *build(tiny_models, tmp_path / "out"), "--max_prompt_length", "1", *flags))
        return int(line.split("(the shortest has ")[1].split(")")[0])

    assert shortest("--append_system_prompt", "Answer in two or three short sentences.") > shortest()
    assert not (tmp_path / "out").exists()
