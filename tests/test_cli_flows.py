"""The flows users run, end to end as subprocesses: LoRA -> evaluate, re-running and continuing a finished run,
starting from an adapter, --resume_from_checkpoint, and small preference sets."""

import json

import pytest
import torch

from conftest import assert_ok, error_line, grpo_args, ppo_args, run_in_process, scalars
from rlhf import tiny

pytestmark = pytest.mark.slow


def evaluate(models, output, *model_paths):
    return run_in_process("evaluate_generations.py", "--model-path", *model_paths, "--reward_model_path",
                          models["reward_model"], "--dataset_name", models["prompts"], "--train_samples", "20",
                          "--num_prompts", "3", "--num_completions", "2", "--max_new_tokens", "8",
                          "--output_file", output)


def texts(report, index):
    return [c["text"] for p in report["models"][index]["prompts"] for c in p["completions"]]


def snapshot(folder):
    return {path: path.stat().st_mtime_ns for path in sorted(folder.rglob("*"))}


def scheduled_rates(kind, peak, total, warmup=0):
    """The learning rate of steps 1 to `total` under transformers' schedule `kind`: what one uninterrupted run of
    `total` steps trains at."""
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total)
    rates = []
    for _ in range(total):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


def assert_new_steps_follow_the_new_schedule(logged, first_new_step, expected):
    """The steps from `first_new_step` on trained at the rates of the schedule of the new length (none at 0)."""
    rates = dict(logged)
    new = [rates[step] for step in range(first_new_step, len(expected) + 1)]
    assert all(rate > 0 for rate in new), rates
    assert new == pytest.approx(expected[first_new_step - 1:], rel=1e-5), rates


def weights(path):
    from safetensors.torch import load_file

    return load_file(path)


def test_grpo_lora_run_is_evaluated_rerun_continued_and_seeds_a_followup_run(tiny_models, tmp_path, run_cli):
    out = tmp_path / "lora"

    def args(max_steps, learning_rate="1e-2"):  # this high, it moves the adapter enough to change what is sampled
        return grpo_args(tiny_models, out, "--max_steps", max_steps, "--use-lora", "--learning_rate", learning_rate)

    assert_ok(run_in_process("train_grpo.py", *args(2)))
    assert (out / "adapter_config.json").exists() and not (out / "config.json").exists()

    # The adapter folder evaluates alone and next to its base; the adapter is applied, not ignored.
    assert_ok(evaluate(tiny_models, tmp_path / "alone.json", out))
    assert_ok(evaluate(tiny_models, tmp_path / "pair.json", tiny_models["policy"], out))
    report = json.loads((tmp_path / "pair.json").read_text())
    assert texts(report, 0) != texts(report, 1)

    # The same command again: finished, nothing to do, nothing touched (in-process: it stops before training).
    before = snapshot(out)
    again = run_cli("train_grpo.py", *args(2))
    assert_ok(again)
    assert "finished at step 2" in again.stdout and "nothing to do" in again.stdout
    assert snapshot(out) == before

    # A higher --max_steps continues from the last checkpoint (optimizer and schedule included) to the new total.
    result = run_in_process("train_grpo.py", *args(4))
    assert_ok(result)
    assert f"Resuming from {out / 'checkpoint-2'}" in result.stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["global_step"] == 4 and manifest["finished_at"]
    assert [launch["changed"] for launch in manifest["launches"]] == [{}, {"max_steps": [2, 4]}]
    assert sorted(step for step, _ in scalars(out)["train/kl"]) == [1, 2, 3, 4]
    # ... and trains at the rates of a 4-step schedule: the first new step does not inherit the 2-step one's end (0).
    expected = scheduled_rates("cosine", 1e-2, 4)
    assert_new_steps_follow_the_new_schedule(scalars(out)["train/learning_rate"], 3, expected)

    # Anything else changed on the finished run is refused, naming the flag; nothing is written.
    refused = run_cli("train_grpo.py", *args(4, learning_rate="1e-3"))
    assert "--learning_rate 0.001 (the run has 0.01)" in error_line(refused)
    assert len(json.loads((out / "run_manifest.json").read_text())["launches"]) == 2

    # The adapter folder as the model of a follow-up run: full fine-tuning from the adapter merged into its base.
    followup = tmp_path / "followup"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, followup, "--max_steps", "1"),
                             "--model_name_or_path", out))
    assert (followup / "start_model" / "config.json").exists() and (followup / "model.safetensors").exists()


def test_ppo_lora_run_is_evaluated_and_continues_to_more_episodes(tiny_models, tmp_path):
    out = tmp_path / "ppo"
    assert_ok(run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "4", "--use_lora")))
    assert_ok(evaluate(tiny_models, tmp_path / "eval.json", out))

    result = run_in_process("train_ppo.py", *ppo_args(tiny_models, out, "--total_episodes", "8", "--use_lora"))
    assert_ok(result)
    assert f"Resuming from {out / 'checkpoint-2'}" in result.stdout
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert (manifest["global_step"], manifest["episode"]) == (4, 8)
    assert manifest["launches"][-1]["changed"] == {"total_episodes": [4, 8]}
    assert sorted(step for step, _ in scalars(out)["train/objective/kl"]) == [1, 2, 3, 4]
    assert_new_steps_follow_the_new_schedule(scalars(out)["train/lr"], 3, scheduled_rates("linear", 5e-6, 4))


def test_resume_from_checkpoint_starts_a_new_folder_from_a_given_checkpoint(tiny_models, tmp_path, run_cli):
    first = tmp_path / "first"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(tiny_models, first, "--max_steps", "4")))
    branch = tmp_path / "branch"
    result = run_in_process("train_grpo.py", *grpo_args(tiny_models, branch, "--max_steps", "4"),
                            "--resume_from_checkpoint", first / "checkpoint-2")
    assert_ok(result)
    assert sorted(step for step, _ in scalars(branch)["train/kl"]) == [3, 4]  # steps 1-2 came from the checkpoint
    manifest = json.loads((branch / "run_manifest.json").read_text())
    assert manifest["launches"][0]["resumed_from"] == str(first / "checkpoint-2") and manifest["global_step"] == 4
    # The checkpoint is compared with the settings that produced it (its own copy of the manifest).
    assert json.loads((first / "checkpoint-2" / "run_manifest.json").read_text())["config"] == json.loads(
        (first / "run_manifest.json").read_text())["config"]
    changed = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "y", "--max_steps", "4"),
                      "--learning_rate", "1e-3", "--resume_from_checkpoint", first / "checkpoint-2")
    assert "comes from a run trained with other settings: --learning_rate 0.001" in error_line(changed)
    assert not (tmp_path / "y").exists()
    missing = run_cli("train_grpo.py", *grpo_args(tiny_models, tmp_path / "x", "--max_steps", "4"),
                      "--resume_from_checkpoint", first / "checkpoint-3")
    assert "not a complete checkpoint" in error_line(missing)


def test_small_preference_sets_still_report_accuracy_or_say_why_not(tiny_models, tmp_path):
    common = ["--model_name_or_path", tiny_models["policy"], "--max_steps", "2", "--per_device_train_batch_size", "2",
              "--save_steps", "2", "--logging_steps", "1"]
    small = tiny.write_jsonl(tmp_path / "small.jsonl", tiny.orca_rows(12))
    out = tmp_path / "rm_small"
    result = run_in_process("train_reward_model.py", *common, "--dataset_name", small, "--output_dir", out)
    assert_ok(result)
    assert "8 training pairs, 4 held out (a tenth of the 12 pairs" in result.stdout
    assert json.loads((out / "reward_accuracy.json").read_text())["num_pairs"] == 4

    # The finished reward model continues to a higher --max_steps too, at the rate of a 3-step schedule (one step
    # of warm-up, as --warmup_steps 0.05 gives): the new step trains.
    result = run_in_process("train_reward_model.py", *common[:2], "--max_steps", "3", *common[4:],
                            "--dataset_name", small, "--output_dir", out)
    assert_ok(result)
    assert json.loads((out / "run_manifest.json").read_text())["global_step"] == 3
    assert_new_steps_follow_the_new_schedule(scalars(out)["train/learning_rate"], 3,
                                             scheduled_rates("cosine", 2e-5, 3, warmup=1))
    before, after = weights(out / "checkpoint-2" / "model.safetensors"), weights(out / "model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in before.keys() & after.keys())

    tiny_set = tiny.write_jsonl(tmp_path / "tiny.jsonl", tiny.orca_rows(6))
    out = tmp_path / "rm_tiny"
    result = run_in_process("train_reward_model.py", *common, "--dataset_name", tiny_set, "--output_dir", out)
    assert_ok(result)
    assert "6 training pairs, none held out (only 6 pairs" in result.stdout
    assert not (out / "reward_accuracy.json").exists()
