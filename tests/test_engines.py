"""accelerate's engines on 2 CPU processes, launched as docs/multi-gpu.md says: DeepSpeed ZeRO-2 and ZeRO-3 with
the shipped configs (`DS_ACCELERATOR=cpu`), and FSDP, which accelerate runs on GPUs only, refused on CPU.

A few combinations cover each engine and each trainer once (the full matrix verified by hand is in
docs/multi-gpu.md): GRPO ZeRO-2 (+ continued), PPO ZeRO-2 (+ resumed) and ZeRO-3, the reward model ZeRO-3; the
refusals.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, assert_ok, error_line, grpo_args, ppo_args, scalars

NEEDS_DEEPSPEED = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="deepspeed is not installed (pip install -r requirements-deepspeed.txt)")


def launched(test):
    """A launch: slow, and skipped only where deepspeed is not installed (CI installs it: requirements-test.txt)."""
    return pytest.mark.slow(NEEDS_DEEPSPEED(test))


def launch(config, script, *args, cpu=False, env=()):
    """`accelerate launch --config_file configs/accelerate/<config>.yaml --mixed_precision no --num_processes 2`."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", **dict(env)}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               f"configs/accelerate/{config}.yaml", *(["--cpu"] if cpu else []), "--mixed_precision", "no",
               "--num_processes", "2", script, *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def reward_args(models, output_dir):
    return ["--model_name_or_path", models["policy"], "--dataset_name", models["prompts"], "--output_dir", output_dir,
            "--per_device_train_batch_size", "2", "--eval_samples", "8", "--max_steps", "2"]


def engine(output_dir):
    return json.loads((output_dir / "run_manifest.json").read_text())["resolved"]["engine"]


@launched
def test_grpo_under_zero2_says_so_saves_a_loadable_model_and_continues(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM

    out, kernels = tmp_path / "grpo", tmp_path / "torch_extensions"
    result = launch("deepspeed_zero2", "train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "2"),
                    env={"TORCH_EXTENSIONS_DIR": str(kernels)})
    assert_ok(result)
    line = "engine: DeepSpeed ZeRO-2 (optimizer state and gradients sharded over 2 processes)"
    assert result.stdout.count(line) == 1
    assert engine(out) == {"distributed_type": "DEEPSPEED", "num_processes": 2, "zero_stage": 2,
                           "sharded": ["optimizer state", "gradients"]}
    AutoModelForCausalLM.from_pretrained(out)
    # DeepSpeed's shared-memory all-reduce, for inference only, was not compiled (35-65 s on 2 cores).
    assert not kernels.exists() or not any(kernels.rglob("*.so")), sorted(kernels.rglob("*"))

    result = launch("deepspeed_zero2", "train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "4"))
    assert_ok(result)
    run = json.loads((out / "run_manifest.json").read_text())
    assert run["global_step"] == 4 and run["launches"][-1]["resumed_from"] == str(out / "checkpoint-2")


@launched
def test_ppo_under_zero3_shards_the_parameters_and_saves_the_trained_policy(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "ppo"
    # 2 mini-batches per rollout: TRL saved nothing under DeepSpeed (`SavePolicyUnderDeepSpeed`).
    result = launch("deepspeed_zero3", "train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "8",
                                                                  "--per_device_train_batch_size", "1",
                                                                  "--prompts_per_rollout", "4"))
    assert_ok(result)
    assert "engine: DeepSpeed ZeRO-3 (optimizer state and gradients and parameters sharded over 2" in result.stdout
    assert engine(out)["zero_stage"] == 3 and "parameters" in engine(out)["sharded"]
    start, final = (AutoModelForCausalLM.from_pretrained(path).state_dict() for path in (tiny_models["policy"], out))
    assert start.keys() == final.keys()
    assert any(not torch.equal(start[name], final[name]) for name in start)


@launched
def test_ppo_with_reward_functions_under_zero2_scores_them_and_saves_the_value_model(tiny_models, tmp_path):
    from rlhf import tiny

    data = tiny.write_jsonl(tmp_path / "math.jsonl", [{"question": f"What is {a} + 1?", "ground_truth": str(a + 1)}
                                                      for a in range(8)])
    out = tmp_path / "ppo"
    # No reward model: TRL would put the reward functions into a DeepSpeed engine (`_prepare_deepspeed`). Held out:
    # the last 2 problems, evaluated at each rollout's checkpoint; the run ends on the best of them.
    result = launch("deepspeed_zero2", "train_ppo.py", *ppo_args(tiny_models, out, "--dataset_name", data,
                                                                  "--reward_funcs", "boxed_format",
                                                                  "--total_episodes", "8", "--max_samples", "6",
                                                                  "--eval_prompts", "2", "--save_steps", "1",
                                                                  "--end_on_best_checkpoint"))
    assert_ok(result)
    assert "engine: DeepSpeed ZeRO-2" in result.stdout
    logged = scalars(out)
    assert "train/rewards/boxed_format/mean" in logged
    assert (out / "value_model" / "config.json").exists()
    # Ended on its best checkpoint under the engine: the final policy is that checkpoint's, bit for bit.
    assert result.stdout.count("Ended on the best checkpoint by the held-out evaluation, checkpoint-") == 1
    best = Path(json.loads((out / "run_report.json").read_text())["best_checkpoint"])
    assert best.name in {"checkpoint-1", "checkpoint-2"}
    final, kept = (load_file(folder / "model.safetensors") for folder in (out, best))
    assert final.keys() == kept.keys() and all(torch.equal(final[name], kept[name]) for name in final)
    # The tiny policy boxes nothing: the first rollout is without signal (all cut off at 8 tokens), and under
    # DeepSpeed not trained on at all (its optimizer holds the policy and value model flattened together: the
    # policy's momentum cannot be held alone).
    assert logged["train/objective/advantages_zeroed"][0][1] == 1.0
    assert "it is not trained on (under DeepSpeed or FSDP the value model skips it too)" in result.stdout


@launched
def test_ppo_under_zero2_resumed_from_a_checkpoint_trains_what_one_run_trains(tiny_models, tmp_path):
    """The optimizer state comes back from DeepSpeed's own checkpoint (global_step*/), in each process its shard."""
    from test_interruption import final_weights

    def args(out, *extra):
        return ppo_args(tiny_models, out, "--total_episodes", "12", "--prompts_per_rollout", "4",
                        "--per_device_train_batch_size", "1", "--max_samples", "8", "--save_steps", "1",
                        "--save_total_limit", "10", "--lr_scheduler_type", "constant", "--learning_rate", "1e-3",
                        *extra)

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert_ok(launch("deepspeed_zero2", "train_ppo.py", *args(whole)))  # 3 rollouts, a checkpoint after each
    assert any((whole / "checkpoint-2").glob("global_step*"))
    result = launch("deepspeed_zero2", "train_ppo.py",
                    *args(resumed, "--resume_from_checkpoint", whole / "checkpoint-2"))
    assert_ok(result)
    assert f"Resuming from {whole / 'checkpoint-2'} (step 2)." in result.stdout
    expected, weights = final_weights(whole), final_weights(resumed)
    assert weights.keys() == expected.keys() and any(name.startswith("value_model") for name in weights)
    differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


@launched
def test_reward_model_under_zero3_saves_a_loadable_model_and_scores_the_held_out_pairs(tiny_models, tmp_path):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "rm"
    result = launch("deepspeed_zero3", "train_reward_model.py", *reward_args(tiny_models, out))
    assert_ok(result)
    assert engine(out)["zero_stage"] == 3 and "parameters" in engine(out)["sharded"]
    AutoModelForSequenceClassification.from_pretrained(out)
    assert json.loads((out / "reward_accuracy.json").read_text())["num_pairs"] == 8


# What `accelerate launch --config_file configs/accelerate/<config>.yaml` puts in each process's environment (read
# from accelerate 1.15's launcher; the launches above check the engine it sets up from them): the refusals below are
# taken from these before anything loads, so they run in the test process.
LAUNCHED = {
    "deepspeed_zero2": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
    "deepspeed_zero3": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"},
    "fsdp": {"ACCELERATE_USE_FSDP": "true"},
}


def test_a_lora_reward_model_under_zero3_is_refused(tiny_models, tmp_path, run_cli):
    result = run_cli("train_reward_model.py", *reward_args(tiny_models, tmp_path / "rm"), "--use_peft",
                     env=LAUNCHED["deepspeed_zero3"])
    assert "use deepspeed_zero2.yaml or multi_gpu.yaml" in error_line(result)
    assert not (tmp_path / "rm").exists()


def test_a_ppo_critic_warmup_under_zero2_is_refused_before_any_model_loads(tiny_models, tmp_path, run_cli):
    # ZeRO's optimizer holds the policy and the value model flattened together: the policy's AdamW state cannot be
    # held still alone.
    result = run_cli("train_ppo.py", *ppo_args(tiny_models, tmp_path / "ppo", "--max_steps", "2", "--critic_warmup",
                                               "1"), env=LAUNCHED["deepspeed_zero2"])
    assert "--critic_warmup is not supported under DeepSpeed or FSDP" in error_line(result)
    assert not (tmp_path / "ppo").exists()


def test_dynamic_sampling_where_the_weights_are_sharded_is_refused_before_any_model_loads(tiny_models, tmp_path,
                                                                                          run_cli):
    # Its re-padded rows' log-probabilities are taken again on the processes that hold them: under ZeRO-3 a forward
    # pass on some processes alone waits for the others forever.
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "grpo", "--use_dynamic_sampling"),
                     env=LAUNCHED["deepspeed_zero3"])
    assert "--use_dynamic_sampling is not supported with FSDP or DeepSpeed ZeRO-3" in error_line(result)
    assert not (tmp_path / "grpo").exists()


def test_fsdp_on_cpu_processes_is_refused_rather_than_run_as_ddp(tiny_models, tmp_path, run_cli, monkeypatch):
    from rlhf import processes

    monkeypatch.setattr(processes, "cuda_available", lambda: False)  # as on this CPU machine, and on a GPU one
    result = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "fsdp", "--max_steps", "1"),
                     env=LAUNCHED["fsdp"])
    assert "fsdp.yaml (FSDP) needs CUDA GPUs" in error_line(result)
    assert not (tmp_path / "fsdp").exists()


@pytest.mark.parametrize("config", list(LAUNCHED))
def test_the_launched_environment_above_is_what_the_shipped_configs_ask_accelerate_for(config):
    import yaml

    settings = yaml.safe_load((ROOT / "configs" / "accelerate" / f"{config}.yaml").read_text())
    env = LAUNCHED[config]
    if "ACCELERATE_USE_DEEPSPEED" in env:
        assert settings["distributed_type"] == "DEEPSPEED"
        assert str(settings["deepspeed_config"]["zero_stage"]) == env["ACCELERATE_DEEPSPEED_ZERO_STAGE"]
    else:
        assert settings["distributed_type"] == "FSDP"


@launched
def test_accelerate_launch_cpu_with_an_engine_config_is_refused(tiny_models, tmp_path):
    result = launch("deepspeed_zero2", "train_grpo.py", *grpo_args(tiny_models, tmp_path / "cpu", "--max_steps", "1"),
                    cpu=True)
    assert "started one process without its DEEPSPEED" in error_line(_first_worker(result))


def _first_worker(result):
    """A launch whose processes each stopped with a user error: the launcher adds its own exit status and
    traceback; the processes' `error:` line (said by the main process) stands for the launch."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines and len(set(lines)) == 1, result.stderr[-3000:]
    return subprocess.CompletedProcess(result.args, 2, result.stdout, lines[0] + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("launch", [["--cpu", "--num_processes=2"], ["--num-processes", "2"]])
def test_accelerate_launch_asking_for_two_processes_and_starting_one_is_refused_with_the_command_that_gives_two(
        tiny_models, tmp_path, launch):
    """`accelerate launch --num_processes 2 --cpu` (or without --cpu, on a machine without 2 GPUs) starts one process:
    it trained alone and said only 'engine: one process'."""
    out = tmp_path / "grpo"
    command = [sys.executable, "-m", "accelerate.commands.launch", *launch, "--mixed_precision", "no",
               "train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "1")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode != 0  # accelerate's launcher adds its own traceback and exit status 1
    why = "--cpu takes" if "--cpu" in launch else "without --multi_gpu and 2 GPUs, --num_processes 2 takes"
    assert error_line(_first_worker(result)) == (
        f"error: accelerate launch asked for 2 processes and started one ({why} accelerate's one-process launcher); "
        "`accelerate launch --multi_gpu --num_processes 2 --mixed_precision no train_grpo.py ...` (or `torchrun "
        "--nproc_per_node 2 train_grpo.py ...`) starts 2 processes, which train on the CPU where there is no GPU "
        "(docs/multi-gpu.md)")
    assert not out.exists()
    if "--cpu" not in launch:  # the command it gives starts 2 processes, on the CPU
        command[3:3] = ["--multi_gpu"]
        assert_ok(subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env))
        assert json.loads((out / "run_manifest.json").read_text())["launches"][-1]["processes"] == 2


def test_the_engine_asked_for_is_read_from_accelerates_launcher(monkeypatch):
    from rlhf import processes

    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        monkeypatch.delenv(name, raising=False)
    assert (processes.launched_engine(), processes.launched_zero_stage()) == (None, 0)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert (processes.launched_engine(), processes.launched_zero_stage()) == ("DEEPSPEED", 3)


def test_fsdp_without_a_gpu_is_refused_before_anything_loads(monkeypatch):
    from rlhf import processes
    from rlhf.engines import check_engine_launch
    from rlhf.errors import UserError

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setattr(processes, "cuda_available", lambda: False)
    with pytest.raises(UserError, match="fsdp.yaml .FSDP. needs CUDA GPUs"):
        check_engine_launch()
    monkeypatch.setattr(processes, "cuda_available", lambda: True)
    check_engine_launch()


def test_the_engine_settings_are_read_from_the_training_config_among_the_configs(tmp_path):
    import config
    from rlhf.engines import engine_settings

    training = config.PPOTrainingConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert engine_settings([config.PPOModelArguments(), training]) == {
        "device": "cpu", "distributed_type": "NO", "num_processes": 1}
    assert engine_settings([config.ModelArguments(), config.EvalArguments()]) == {}  # evaluation: no training config
