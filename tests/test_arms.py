"""bench/arms.py: which checkpoint an arm is evaluated at under a budget, the order arms run in, the generated
tokens read from a checkpoint, and the report's paired interval over seeds (worked out by hand)."""

import json
import math
import os

import pytest

from bench import arms

STARTED = 1_000_000.0  # a run's start (time.time())


def checkpoint(folder, step, saved_at, state="complete"):
    """`folder/checkpoint-<step>` whose trainer_state.json was written at `saved_at` (or is cut short)."""
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    text = json.dumps({"global_step": step, "log_history": []}) if state == "complete" else '{"global_st'
    (path / "trainer_state.json").write_text(text)
    os.utime(path / "trainer_state.json", (saved_at, saved_at))
    return path


@pytest.fixture
def run(tmp_path):
    """A run stopped after its budget: checkpoints saved 10, 20 and 35 s after its start; one at 25 s cut short."""
    folder = tmp_path / "arm"
    for step, seconds in ((2, 10), (4, 20), (8, 35)):
        checkpoint(folder, step, STARTED + seconds)
    checkpoint(folder, 6, STARTED + 25, state="cut short")
    return folder


def test_an_arm_is_evaluated_at_its_last_checkpoint_saved_within_the_budget(run):
    # checkpoint-6 (25 s) is newer than checkpoint-4 but never marked complete; checkpoint-8 came after the budget
    assert arms.within_budget(run, STARTED, 30, stopped=True) == (run / "checkpoint-4", 20)
    assert arms.within_budget(run, STARTED, 35, stopped=True) == (run / "checkpoint-8", 35)  # saved at the budget
    assert arms.within_budget(run, STARTED, 9.5, stopped=True) == (None, None)
    assert arms.within_budget(run, STARTED, None, stopped=True) == (run / "checkpoint-8", 35)  # no budget
    # A run that finished on its own within the budget: its final model. One stopped mid-save keeps a final-looking
    # folder only by chance; it is still judged by its checkpoints.
    (run / "config.json").write_text("{}")
    assert arms.within_budget(run, STARTED, 30, stopped=False) == (run, None)
    assert arms.within_budget(run, STARTED, 30, stopped=True) == (run / "checkpoint-4", 20)


def test_a_stopped_arm_that_ends_on_its_best_checkpoint_is_evaluated_at_the_best_saved_within_the_budget(run):
    def names_best(step, best):
        state = run / f"checkpoint-{step}" / "trainer_state.json"
        saved_at = state.stat().st_mtime
        state.write_text(json.dumps({"global_step": step, "log_history": [], "best_model_checkpoint": best}))
        os.utime(state, (saved_at, saved_at))

    names_best(4, str(run / "checkpoint-2"))  # step 2's evaluation was the best up to step 4
    names_best(8, str(run / "checkpoint-8"))
    assert arms.within_budget(run, STARTED, 30, stopped=True, best=True) == (run / "checkpoint-2", 10)
    assert arms.within_budget(run, STARTED, 30, stopped=True) == (run / "checkpoint-4", 20)  # without the flag
    assert arms.within_budget(run, STARTED, 35, stopped=True, best=True) == (run / "checkpoint-8", 35)
    names_best(4, None)  # no evaluation named a best yet: the last checkpoint, as without the flag
    assert arms.within_budget(run, STARTED, 30, stopped=True, best=True) == (run / "checkpoint-4", 20)
    (run / "config.json").write_text("{}")  # finished on its own: its final model already holds the best's weights
    assert arms.within_budget(run, STARTED, 30, stopped=False, best=True) == (run, None)


def test_an_evaluated_arm_keeps_the_evaluated_weights_and_no_optimizer_state(run):
    evaluated = run / "checkpoint-4"
    for folder in (evaluated, evaluated / "value_model"):
        folder.mkdir(exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "optimizer.pt").write_bytes(b"AdamW")
    (evaluated / "global_step4").mkdir()  # DeepSpeed's optimizer shards
    arms.prune(run, evaluated)
    assert sorted(path.name for path in run.iterdir()) == ["checkpoint-4"]
    kept = sorted(str(path.relative_to(evaluated)) for path in evaluated.rglob("*"))
    assert kept == ["model.safetensors", "trainer_state.json", "value_model", "value_model/model.safetensors"]


def test_arms_alternate_by_seed():
    given = ["a=", "b=--beta 0", "c=--lr 1"]
    assert arms.arm_order(given, 4) == given
    assert arms.arm_order(given, 5) == ["c=--lr 1", "b=--beta 0", "a="]
    assert [arms.arm_order(given, seed)[0] for seed in range(4)] == ["a=", "c=--lr 1"] * 2


# Two-sided 95% quantiles of Student's t for 1..9 degrees of freedom (n = 2..10 seeds), from a printed table.
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


@pytest.mark.parametrize("degrees", sorted(T_TABLE))
def test_t_quantiles_match_the_table(degrees):
    assert arms.t_quantile(degrees) == pytest.approx(T_TABLE[degrees], abs=5e-4)


def test_the_paired_interval_is_students_over_seeds():
    # differences 0.1, 0.3, 0.2: mean 0.2, standard deviation 0.1, half-width 4.303 x 0.1 / sqrt(3) = 0.2484
    result = arms.paired([0.1, 0.3, 0.2])
    assert result["n"] == 3 and result["mean"] == pytest.approx(0.2)
    half = 4.303 * 0.1 / math.sqrt(3)
    assert [result["low"], result["high"]] == pytest.approx([0.2 - half, 0.2 + half], abs=1e-4)
    assert arms.paired([0.25]) == {"n": 1, "mean": 0.25, "low": None, "high": None}  # one seed: no interval


def arms_folder(root, seed, figures, task="math"):
    """An arms folder as bench/arms.py leaves it: arms.json with each arm's evaluated model and its figure."""
    folder = root / f"seed{seed}"
    folder.mkdir()
    names = list(figures)
    entries = {name: {"model": f"/runs/seed{seed}/{name}/checkpoint-4", "step": 4, "saved_s": 50.0,
                      "generated_tokens": 1000} for name in names}
    # math: the verifier's accuracy is the figure (its win rate another); the reward-model task: the win rate
    math_task = task == "math"
    models = [{"model_path": "/base", "summary": {"verifier_accuracy": 0.1} if math_task else {}}]
    models += [{"model_path": entries[name]["model"], "summary": {"verifier_accuracy": value} if math_task else {}}
               for name, value in figures.items()]
    comparison = [{"model_path": entries[name]["model"], "win_rate": 1 - value if math_task else value}
                  for name, value in figures.items()]
    result = {"task": task, "seed": seed, "order": arms.arm_order(names, seed), "arms": entries,
              "evaluation": {"models": models, "comparison": comparison}}
    (folder / "arms.json").write_text(json.dumps(result))
    return folder


@pytest.mark.parametrize("task", ["math", "rm"])
def test_the_report_pairs_each_arm_with_the_first_over_seeds(tmp_path, capsys, task):
    folders = [arms_folder(tmp_path, seed, {"none": base, "new": base + gain, "other": base}, task)
               for seed, base, gain in ((0, 0.3, 0.1), (1, 0.4, 0.3), (2, 0.5, 0.2))]
    output = tmp_path / "out" / "arms_report.json"
    arms.main(["--report", *map(str, folders), "--output_dir", str(output.parent)])
    written = json.loads(output.read_text())
    assert written["reference"] == "none"
    assert written["metric"] == ("verifier accuracy" if task == "math" else "win rate vs the base")
    assert [seed["order"][0] for seed in written["seeds"]] == ["none", "other", "none"]  # seed 1 ran reversed
    new = written["against_reference"]["new"]
    half = 4.303 * 0.1 / math.sqrt(3)
    assert new["n"] == 3 and new["mean"] == pytest.approx(0.2)
    assert [new["low"], new["high"]] == pytest.approx([0.2 - half, 0.2 + half], abs=1e-4)
    other = written["against_reference"]["other"]
    assert (other["mean"], other["low"], other["high"]) == (0, 0, 0)
    printed = capsys.readouterr().out
    assert "new - none: +0.200 [-0.048, +0.448], n = 3 seeds" in printed


def test_the_report_of_one_seed_gives_no_interval(tmp_path, capsys):
    folder = arms_folder(tmp_path, 0, {"none": 0.3, "new": 0.45})
    arms.main(["--report", str(folder), "--output_dir", str(tmp_path)])
    assert "new - none: +0.150 (no interval under 2 seeds), n = 1 seeds" in capsys.readouterr().out


def test_generated_tokens_are_read_up_to_the_evaluated_checkpoint(run):
    # GRPO, 16 completions per optimizer step (the manifest's batch), logged at every step; checkpoint-4 is evaluated
    config = {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1, "num_generations": 4}
    (run / "run_manifest.json").write_text(json.dumps({"config": {"GRPOTrainingConfig": config},
                                                       "launches": [{"processes": 1}]}))
    history = [{"eval/accuracy": 0.2, "step": 0}, *({"completions/mean_length": 10.0 * step, "step": step}
                                                     for step in range(1, 5))]
    state = run / "checkpoint-4" / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 4, "log_history": history}))
    assert arms.tokens_up_to(run, run / "checkpoint-4") == (4, 16 * (10 + 20 + 30 + 40), "estimate")
