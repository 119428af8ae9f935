"""The distributed path: GRPO, PPO and the reward model run as 2 processes on CPU (torchrun, gloo backend).

What must hold with N processes: the data is split between them (each prompt is trained on once per epoch in
total, not once per process), the optimizer step count follows the batch semantics, and one final model is saved.
"""

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
import torch

import quickstart
from conftest import assert_ok, grpo_args, ppo_args, run_script, scalars, start_script, wait_for

pytestmark = pytest.mark.slow

# A reward function that records, per process, which prompts it scored (and scores 0, so training is unchanged);
# its module, once imported in each process, also makes process 1 slow to save its generation file.
PROBE = '''
import json, os, time
from pathlib import Path

import torch

_save = torch.save

def slow_save(obj, path, *args, **kwargs):
    if "grpo_generation_1" in str(path):
        time.sleep(3)
    return _save(obj, path, *args, **kwargs)

torch.save = slow_save

def probe(prompts, completions, **kwargs):
    with open(Path(os.environ["PROBE_DIR"]) / f"rank{os.environ.get('RANK', '0')}.jsonl", "a") as f:
        for prompt in prompts:
            f.write(json.dumps(prompt[-1]["content"]) + "\\n")
    return [0.0] * len(prompts)
'''


def manifest(output_dir):
    return json.loads((output_dir / "run_manifest.json").read_text())


def test_grpo_on_two_processes_splits_the_prompts_keeps_the_step_count_and_completes_checkpoints(tiny_models,
                                                                                                 tmp_path):
    from transformers import AutoModelForCausalLM

    (tmp_path / "probe_reward.py").write_text(PROBE)
    seen = tmp_path / "seen"
    seen.mkdir()
    out = tmp_path / "run"
    # 32 prompts, 4 prompts x 2 completions per step: 8 steps per epoch, on 1 process or 2. The per-device batch is
    # left at its default (16 completions), which is capped at each process's share of a step (4).
    result = run_script(
        "train_grpo.py", "--model_name_or_path", tiny_models["policy"], "--dataset_name", tiny_models["prompts"],
        "--reward_model_path", tiny_models["reward_model"], "--reward_funcs", "reward_model", "probe_reward.probe",
        "--output_dir", out, "--num_generations", "2", "--prompts_per_step", "4", "--max_completion_length", "8",
        "--num_train_epochs", "1", "--save_steps", "4", "--seed", "0", "--missing_eos_penalty", "1",
        processes=2, env={"PROBE_DIR": str(seen), "PYTHONPATH": str(tmp_path)},
    )
    assert_ok(result)
    logged = scalars(out)  # the penalty, on both processes' completions: the tiny policy never ends within 8 tokens
    clipped = dict(logged["train/completions/clipped_ratio"])
    assert [(step, -clipped[step]) for step in clipped] == logged["train/rewards/missing_eos_penalty/mean"]

    run = manifest(out)
    assert run["launches"][-1]["processes"] == 2
    assert run["resolved"]["distributed_type"] == "MULTI_CPU" and run["resolved"]["num_processes"] == 2
    assert not (out / "run.lock").exists()  # one launch, one lock (rank 0's), released at the end
    assert run["global_step"] == 8
    grpo = run["config"]["GRPOTrainingConfig"]
    assert grpo["per_device_train_batch_size"] == 4 and grpo["gradient_accumulation_steps"] == 1
    assert grpo["use_cpu"] is True  # set for a multi-process launch on a machine without a GPU

    # Each process scored half of the completions, and every prompt got exactly its 2 completions in total.
    per_rank = [(seen / f"rank{rank}.jsonl").read_text().splitlines() for rank in (0, 1)]
    assert len(per_rank[0]) == len(per_rank[1]) == 32
    assert set(Counter(per_rank[0] + per_rank[1]).values()) == {2}
    assert len(Counter(per_rank[0] + per_rank[1])) == 32

    assert result.stdout.count("Saved the final model") == 1
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]
    AutoModelForCausalLM.from_pretrained(out)
    # trainer_state.json, written by process 0, marks a checkpoint complete: a run interrupted before it is resumed
    # from the checkpoint before. Process 1's generation file, slow to save (PROBE), must be in it by then.
    for checkpoint in ("checkpoint-4", "checkpoint-8"):
        written = {path.name: path.stat().st_mtime_ns for path in (out / checkpoint).iterdir()}
        assert written["grpo_generation_1.pt"] <= written["trainer_state.json"]


@pytest.fixture(scope="module")
def ppo_on_two_processes(tiny_models, tmp_path_factory):
    """One PPO run on two processes that the tests below read: rollouts of 2 prompts, one in each process, 16 episodes
    (8 rollouts), a checkpoint and a held-out evaluation every 2, ending on the best checkpoint (the value model
    stays the last step's), with the math quickstart's value model (a plain baseline: lambda 1, a zero head,
    advantages as GAE's; TRL's whitening over both processes: test_ppo_whitens_each_process_slice_...)."""
    out = tmp_path_factory.mktemp("ppo_on_two_processes") / "ppo"
    result = run_script("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "16",
                                                  "--per_device_train_batch_size", "1", "--save_steps", "2",
                                                  "--eval_prompts", "2", "--max_samples", "24",
                                                  "--end_on_best_checkpoint", *quickstart.MATH_PPO_CRITIC),
                        processes=2, timeout=300)
    assert_ok(result)
    return out


def test_ppo_on_two_processes_counts_episodes_over_both_and_saves_policy_and_value_model(tiny_models,
                                                                                       ppo_on_two_processes):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    out = ppo_on_two_processes
    # One PPO batch = 1 prompt per device x 2 processes = 2 episodes: 16 episodes take 8 steps.
    run = manifest(out)
    assert run["launches"][-1]["processes"] == 2
    assert (run["global_step"], run["episode"]) == (8, 16)
    AutoModelForCausalLM.from_pretrained(out)
    # The value model was trained (it starts as the reward model, its head at 0), and the checkpoint of the last step
    # holds the same weights as the final save: both go through the gathered state dict.
    paths = (tiny_models["reward_model"], out / "value_model", out / "checkpoint-8" / "value_model")
    load = AutoModelForSequenceClassification.from_pretrained
    start, final, checkpoint = (load(path).state_dict() for path in paths)
    assert start.keys() == final.keys() == checkpoint.keys()
    assert any(not torch.equal(start[name], final[name]) for name in start)
    assert all(torch.equal(final[name], checkpoint[name]) for name in final)


def test_ppo_on_two_processes_judges_a_rollout_without_signal_on_both_processes_completions(tiny_models,
                                                                                              ppo_on_two_processes):
    from transformers import AutoModelForCausalLM

    out = ppo_on_two_processes
    # Rollouts of 2 prompts, one in each process: a process's slice of one completion always "scored the same", and
    # judged per process every rollout had its advantages zeroed and the policy never trained. The tiny reward model's
    # scores differ from completion to completion: every rollout has signal.
    logged = scalars(out)
    assert [value for _, value in logged["train/objective/advantages_zeroed"]] == [0.0] * 8
    assert all(value != 0 for _, value in logged["train/loss/policy_avg"])
    start, final = (AutoModelForCausalLM.from_pretrained(path).state_dict() for path in (tiny_models["policy"], out))
    assert any(not torch.equal(start[name], final[name]) for name in start)


def test_held_out_evaluation_on_two_processes_finishes_with_one_best_checkpoint(tiny_models, tmp_path,
                                                                             ppo_on_two_processes):
    # The main process alone evaluates; its best checkpoint used to be known to it alone, and transformers'
    # `_save_checkpoint` then waited for the other process in a barrier that process never reached (a hang at the
    # first checkpoint). GRPO: 4 steps, a checkpoint and an evaluation every 2; PPO: the run above. Both end on their
    # best checkpoint, which every process loads alike (each process holds the main process's decision).
    from safetensors.torch import load_file

    out = tmp_path / "run"
    result = run_script("train_grpo.py", *grpo_args(tiny_models, out, "--max_steps", "4", "--save_steps", "2",
                                                    "--eval_prompts", "2", "--max_samples", "24",
                                                    "--end_on_best_checkpoint"),
                        processes=2, timeout=300)
    assert_ok(result)
    assert result.stdout.count("Ended on the best checkpoint by the held-out evaluation, checkpoint-") == 1
    for run, checkpoints in ((out, {"checkpoint-2", "checkpoint-4"}),
                             (ppo_on_two_processes, {f"checkpoint-{step}" for step in (2, 4, 6, 8)})):
        report = json.loads((run / "run_report.json").read_text())
        best = Path(report["best_checkpoint"])
        assert best.name in checkpoints and best.is_dir()
        assert report["final_model"]["checkpoint"] == str(best) and report["final_model"]["last_step"] == max(
            int(name.split("-")[1]) for name in checkpoints)
        final, kept = (load_file(folder / "model.safetensors") for folder in (run, best))
        assert final.keys() == kept.keys() and all(torch.equal(final[name], kept[name]) for name in final)


def test_ppo_with_lora_on_two_processes_trains_against_the_adapter_disabled_reference(tiny_models, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "ppo_lora"
    # TRL 1.12 read the reference (the policy, adapter off) through the DDP wrapper: an AttributeError at step 1.
    result = run_script("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "8", "--use_lora"),
                        processes=2)
    assert_ok(result)
    assert (manifest(out)["global_step"], manifest(out)["episode"]) == (2, 8)
    adapter = load_file(out / "adapter_model.safetensors")
    assert any(name.endswith("lora_B.weight") and tensor.abs().sum() > 0 for name, tensor in adapter.items())


def test_reward_model_on_two_processes(tiny_models, tmp_path):
    out = tmp_path / "rm"
    # 32 rows, 8 held out: 24 pairs, 2 per device x 2 processes per step = 6 steps.
    result = run_script("train_reward_model.py", "--model_name_or_path", tiny_models["policy"], "--dataset_name",
                        tiny_models["prompts"], "--output_dir", out, "--per_device_train_batch_size", "2",
                        "--eval_samples", "8", processes=2)
    assert_ok(result)
    assert manifest(out)["global_step"] == 6
    assert result.stdout.count("Held-out pairwise accuracy") == 1
    assert json.loads((out / "reward_accuracy.json").read_text())["num_pairs"] == 8


def test_ctrl_c_on_torchrun_stops_both_processes_at_one_checkpoint_and_the_rerun_finishes(tiny_models, tmp_path):
    out = tmp_path / "run"
    args = grpo_args(tiny_models, out, "--max_steps", "30")
    # torchrun starts its workers in sessions of their own and forwards a Ctrl-C (SIGINT) to each, once.
    process = start_script("train_grpo.py", *args, processes=2)
    wait_for(out / "checkpoint-2" / "trainer_state.json", process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode != 0  # torchrun's own exit status for a signal; each worker exited with 130
    assert stdout.count("SIGINT received") == 1  # said once, not once per process
    stopped = [line for line in stdout.splitlines() if line.startswith("Stopped at step")]
    assert len(stopped) == 1, stdout[-3000:]
    step = int(stopped[0].split()[3].rstrip(";"))
    assert 2 <= step < 30 and f"checkpoint saved in {out / f'checkpoint-{step}'}." in stopped[0]
    checkpoint = out / f"checkpoint-{step}"
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    # Both processes stopped after the same step: each saved its random state into that one checkpoint.
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    # ... and its generation buffer, which the resumed run trains on until the next generation.
    buffers = {p.name for p in checkpoint.glob("grpo_generation_*.pt")}
    assert buffers == {"grpo_generation_0.pt", "grpo_generation_1.pt"}
    assert not (out / "model.safetensors").exists()

    result = run_script("train_grpo.py", *args, processes=2)
    assert_ok(result)
    assert result.stdout.count(f"Resuming from {checkpoint}") == 1
    run = manifest(out)
    assert run["global_step"] == 30 and run["finished_at"]
    assert [launch["resumed_from"] for launch in run["launches"]] == [None, str(checkpoint)]


def test_grpo_on_two_processes_resumed_inside_a_generation_block_trains_what_one_run_trains(tiny_models, tmp_path):
    from safetensors.torch import load_file

    # As tests/test_interruption.py's one-process test: 2 steps per generation, 2 generations per pass over the
    # prompts; the resume at step 5 is in the second pass, where each process's sampler must draw that pass's order.
    def args(out):
        return grpo_args(tiny_models, out, "--max_steps", "7", "--prompts_per_generation", "4", "--max_samples", "8",
                         "--save_steps", "1", "--save_total_limit", "10", "--lr_scheduler_type", "constant",
                         "--learning_rate", "1e-2")

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert_ok(run_script("train_grpo.py", *args(whole), processes=2))
    assert_ok(run_script("train_grpo.py", *args(resumed), "--resume_from_checkpoint", whole / "checkpoint-5",
                         processes=2))
    expected, weights = load_file(whole / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert all(torch.equal(expected[name], weights[name]) for name in expected)


def test_ppo_on_two_processes_resumed_inside_a_later_pass_trains_what_one_run_trains(tiny_models, tmp_path):
    from test_interruption import final_weights

    # Rollouts of 2 prompts (1 per process) from 4: 2 per pass; checkpoint-3 is one rollout into the second pass.
    def args(out):
        return ppo_args(tiny_models, out, "--total_episodes", "8", "--max_samples", "4",
                        "--per_device_train_batch_size", "1", "--save_steps", "1", "--save_total_limit", "10",
                        "--lr_scheduler_type", "constant", "--learning_rate", "1e-3")

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert_ok(run_script("train_ppo.py", *args(whole), processes=2))
    assert_ok(run_script("train_ppo.py", *args(resumed), "--resume_from_checkpoint", whole / "checkpoint-3",
                         processes=2))
    expected, weights = final_weights(whole), final_weights(resumed)
    differ = [name for name, tensor in expected.items() if not torch.equal(tensor, weights[name])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ from one uninterrupted run"


@pytest.mark.parametrize("script", ["train_grpo.py", "train_ppo.py", "train_reward_model.py"])
def test_a_user_error_in_a_two_process_launch_is_said_once(tiny_models, tmp_path, script):
    result = run_script(script, "--model_name_or_path", tmp_path / "no_such_model", "--output_dir", tmp_path / "run",
                        processes=2)
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "no_such_model" in lines[0], result.stderr[-2000:]


# Each process whitens its own slice of a rollout with sums over both (rlhf.ppo.maths.masked_whiten, as PPO's
# train() calls it); process 0's slice is flat (value-model noise and the KL term only), process 1's varies.
WHITEN = '''
import sys
import torch
from accelerate import Accelerator
from rlhf.ppo.maths import masked_whiten

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
flat, varied = 0.01 * torch.randn(3, 5), 2.0 * torch.randn(3, 5)
mask = torch.ones(3, 5, dtype=torch.bool)
mask[0, 3:] = False
mine = [flat, varied][accelerator.process_index]
whitened = masked_whiten(mine, mask, total=lambda tensor: accelerator.reduce(tensor, "sum"))
torch.save({"whitened": whitened, "alone": masked_whiten(mine, mask),
            "whole": masked_whiten(torch.cat([flat, varied]), torch.cat([mask, mask])), "mask": mask},
           f"{sys.argv[1]}/rank{accelerator.process_index}.pt")
'''


def test_ppo_whitens_each_process_slice_with_the_whole_rollouts_statistics(tmp_path):
    script = tmp_path / "whiten.py"
    script.write_text(WHITEN)
    result = run_script(script, tmp_path, processes=2, env={"PYTHONPATH": str(Path(__file__).parents[1])},
                        timeout=120)
    assert_ok(result)
    flat, varied = (torch.load(tmp_path / f"rank{rank}.pt") for rank in (0, 1))
    mask = flat["mask"]
    # the two slices together are the whole rollout whitened at once, as one process holding it would
    assert torch.allclose(torch.cat([flat["whitened"], varied["whitened"]]), flat["whole"], atol=1e-6)
    # the flat slice stays small; whitened alone (TRL's, per process) it was blown up to unit size
    assert flat["whitened"][mask].std() < 0.05
    assert flat["alone"][mask].std() == pytest.approx(1.0, rel=1e-3)


def test_the_first_update_is_the_policys_own_on_two_processes_for_families_that_break_it_most_easily(
        families, tiny_models, tmp_path):
    """On two processes as on one: GRPO with dynamic sampling on GPT-2 (absolute positions: rows re-padded across
    rounds and gathered from both processes) has KL 0 at step 1; PPO on Qwen2.5 (a generation config that samples
    with its own repetition penalty and top-k, a pad token that is one of its ends) has ratio 1 and KL 0."""
    from test_cli_grpo_dynamic_sampling import REWARDS
    from test_families import models_of

    (tmp_path / "signal_rewards.py").write_text(REWARDS)
    grpo, ppo = tmp_path / "grpo", tmp_path / "ppo"
    assert_ok(run_script("train_grpo.py", *grpo_args(
        models_of(families, tiny_models, "gpt2"), grpo, "--reward_funcs", "signal_rewards.half",
        "--use_dynamic_sampling", "--max_steps", "1", "--prompts_per_generation", "4",
        "--per_device_train_batch_size", "4"), processes=2, env={"PYTHONPATH": str(tmp_path)}))
    logged = scalars(grpo)
    assert logged["train/dynamic_sampling/rounds"][0][1] > 1
    assert logged["train/kl"][0] == (1, pytest.approx(0, abs=1e-6))
    assert_ok(run_script("train_ppo.py", *ppo_args(models_of(families, tiny_models, "qwen2.5"), ppo,
                                                   "--total_episodes", "4"), processes=2))
    logged = scalars(ppo)
    assert logged["train/val/ratio"][0] == (1, pytest.approx(1, abs=1e-6))
    assert logged["train/policy/approxkl_avg"][0] == (1, pytest.approx(0, abs=1e-6))
    assert logged["train/objective/kl"][0] == (1, pytest.approx(0, abs=8e-6))  # summed over 8 tokens: fp32's noise
