"""`plot_training_progress.py` on TensorBoard logs written here with GRPO, PPO and reward-model tag names."""

import csv

import pytest

from conftest import run_in_process
from rlhf.cli import UserError
from rlhf.evaluation.metrics import column_for, ema, find_runs, run_labels

STEPS = range(1, 6)


def write_events(folder, scalars, walltime=1000.0):
    """One event file in `folder` holding {tag: {step: value}}, as the Trainer's TensorBoard callback writes it."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder))
    for tag, points in scalars.items():
        for step, value in points.items():
            writer.add_scalar(tag, value, step, walltime=walltime + step)
    writer.close()


def grpo_scalars(kl=True):
    tags = {"train/loss": 0.5, "train/learning_rate": 1e-6, "train/reward": 0.25, "train/entropy": 2.0,
            "train/completions/mean_length": 10.0, "train/clip_ratio/region_mean": 0.125, "train/grad_norm": 1.0,
            "train/frac_reward_zero_std": 0.125, "train/dynamic_sampling/groups_discarded": 2.0}
    if kl:
        tags["train/kl"] = 0.0625
    return {tag: {step: scale * step for step in STEPS} for tag, scale in tags.items()}


def ppo_scalars():
    tags = {"train/loss/policy_avg": -0.5, "train/loss/value_avg": 0.75, "train/lr": 2e-6,
            "train/objective/scores": -1.0, "train/objective/kl": 0.5, "train/objective/entropy": 40.0,
            "train/policy/clipfrac_avg": 0.25}
    scalars = {tag: {step: scale * step for step in STEPS} for tag, scale in tags.items()}
    return {**scalars, "train/objective/critic_warmup": {step: float(step <= 2) for step in STEPS}}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    write_events(root / "grpo" / "runs" / "Jan01_host", grpo_scalars())
    # Resumed from checkpoint-3: the second launch logs steps 4-5 again, later, with other values; those win.
    write_events(root / "grpo" / "runs" / "Jan02_host", {"train/reward": {4: 10.0, 5: 20.0}}, walltime=5000.0)
    write_events(root / "ppo" / "runs" / "Jan01_host", ppo_scalars())
    write_events(root / "nokl" / "runs" / "Jan01_host", grpo_scalars(kl=False))
    (root / "empty").mkdir()
    return root


@pytest.fixture(scope="module")
def results(logs, tmp_path_factory):
    """The script's runs that several tests read."""
    out = tmp_path_factory.mktemp("out")
    commands = {
        "plot": ("--log_dir", logs / "grpo", logs / "ppo", logs / "nokl", "--smoothing", "0.6", "--extra",
                 "--output", out / "progress.png", "--csv", out / "metrics.csv"),
        "help": ("--help",),
        "empty": ("--log_dir", logs / "empty", "--output", out / "empty.png"),
    }
    return {"out": out, **{name: run_in_process("plot_training_progress.py", *args)
                           for name, args in commands.items()}}


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_plots_grpo_ppo_and_a_run_without_kl(results):
    import matplotlib.image

    png, table, result = results["out"] / "progress.png", results["out"] / "metrics.csv", results["plot"]
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_csv(table)
    assert list(rows[0]) == ["run", "step", "loss", "learning_rate", "reward", "kl_per_token", "kl_per_completion",
                             "completion_length", "entropy_per_token", "entropy_per_completion", "clip_ratio",
                             "value_loss", "groups_one_reward", "groups_discarded", "critic_warmup"]
    by_key = {(row["run"], int(row["step"])): row for row in rows}
    assert len(rows) == 15
    grpo3, grpo5, ppo2, nokl2 = by_key["grpo", 3], by_key["grpo", 5], by_key["ppo", 2], by_key["nokl", 2]
    assert (grpo3["reward"], grpo3["loss"], grpo3["learning_rate"]) == ("0.75", "1.5", "3e-06")
    # GRPO's KL and entropy are per token, PPO's per completion: each in its own column, never one.
    assert (grpo3["kl_per_token"], grpo3["entropy_per_token"]) == ("0.1875", "6.0")
    assert (grpo3["kl_per_completion"], grpo3["entropy_per_completion"]) == ("", "")
    assert grpo5["reward"] == "20.0"  # the resumed launch's value for step 5
    assert (grpo3["completion_length"], grpo3["clip_ratio"], grpo3["value_loss"]) == ("30.0", "0.375", "")
    assert (grpo3["groups_one_reward"], grpo3["groups_discarded"], grpo3["critic_warmup"]) == ("0.375", "6.0", "")
    assert [by_key["ppo", step]["critic_warmup"] for step in STEPS] == ["1.0", "1.0", "0.0", "0.0", "0.0"]
    assert (ppo2["loss"], ppo2["value_loss"], ppo2["learning_rate"], ppo2["reward"]) == (
        "-1.0", "1.5", "4e-06", "-2.0"
    )
    assert (ppo2["kl_per_completion"], ppo2["entropy_per_completion"]) == ("1.0", "80.0")
    assert (ppo2["kl_per_token"], ppo2["entropy_per_token"]) == ("", "")
    assert (ppo2["clip_ratio"], ppo2["completion_length"]) == ("0.5", "")
    assert nokl2["kl_per_token"] == nokl2["kl_per_completion"] == "" and nokl2["reward"] == "0.5"
    assert "nokl: 5 logged steps" in result.stdout and "not logged: kl" in result.stdout
    assert "2 event files" in result.stdout and str(png) in result.stdout and str(table) in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    height, width, channels = matplotlib.image.imread(png).shape
    assert height > width > 1000 and channels in (3, 4)  # 6 rows of panels with --extra


def test_per_token_and_per_completion_kl_and_entropy_are_drawn_apart(logs):
    import matplotlib.pyplot as plt

    from plot_training_progress import figure, panel_columns
    from rlhf.evaluation.metrics import event_files, read_run

    runs, tags = {}, {}
    for name in ("grpo", "ppo", "nokl"):
        runs[name], tags[name] = read_run(event_files(logs / name))
    panels = panel_columns(runs, extra=True)
    assert panels == ["loss", "learning_rate", "reward", "kl_per_token", "kl_per_completion", "completion_length",
                      "entropy_per_token", "entropy_per_completion", "clip_ratio", "value_loss", "groups_one_reward",
                      "groups_discarded"]
    fig = figure(runs, tags, 0.0, panels)
    axes = {ax.get_title(loc="left"): ax for ax in fig.axes}
    drawn = {title: {line.get_gid() for line in ax.get_lines() if line.get_gid()} for title, ax in axes.items()}
    assert drawn["Loss"] == {"grpo", "ppo", "nokl"}
    assert drawn["KL to the reference, per token (GRPO)"] == {"grpo"}  # nokl: GRPO with beta 0
    assert drawn["Entropy, per token (GRPO)"] == {"grpo", "nokl"}
    assert drawn["KL to the reference, per completion (PPO)"] == drawn["Entropy, per completion (PPO)"] == {"ppo"}
    assert drawn["Value loss (PPO)"] == {"ppo"}
    groups = ("Groups of one reward (GRPO): nothing learnt", "Groups discarded (--use_dynamic_sampling)")
    assert drawn[groups[0]] == drawn[groups[1]] == {"grpo", "nokl"}
    assert axes["KL to the reference, per token (GRPO)"].get_ylabel() == "nats per token"
    assert axes["Entropy, per completion (PPO)"].get_ylabel().startswith("nats per completion")
    # A run is "missing" from a KL panel only if it logged KL in neither unit.
    notes = [text.get_text() for text in axes["KL to the reference, per token (GRPO)"].get_legend().get_texts()]
    assert notes == ["nokl: no KL logged"]
    plt.close(fig)
    # GRPO alone: one KL panel, per token; no run with KL: one panel that says so.
    assert [p for p in panel_columns({"grpo": runs["grpo"]}, extra=False) if p.startswith("kl")] == ["kl_per_token"]
    assert panel_columns({"nokl": runs["nokl"]}, extra=False) == ["loss", "learning_rate", "reward", "kl_per_token"]
    assert [p for p in panel_columns({"ppo": runs["ppo"]}, extra=False) if p.startswith("kl")] == ["kl_per_completion"]


def test_the_legend_of_many_runs_with_long_names_fits_the_figure(logs):
    import matplotlib.pyplot as plt

    from plot_training_progress import figure, panel_columns
    from rlhf.evaluation.metrics import event_files, read_run

    run, tags = read_run(event_files(logs / "grpo"))
    for names, rows in (([f"arms_math_grpo_seed{seed}/{arm}" for seed in range(105, 109)
                          for arm in ("none", "dynamic_sampling")], 4), (["grpo", "ppo"], 1)):
        runs = dict.fromkeys(names, run)
        fig = figure(runs, dict.fromkeys(names, tags), 0.0, panel_columns(runs, extra=False))
        fig.canvas.draw()  # laid out as saved
        legend, renderer = fig.legends[0], fig.canvas.get_renderer()
        box = legend.get_window_extent(renderer)
        assert [text.get_text() for text in legend.get_texts()] == [f"{name} (5 steps)" for name in names]
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width  # every label inside the figure, none cut at its edges
        # as many columns as fit: 2 of these 8 long names a row (4 did not fit), short names side by side
        assert len({round(text.get_window_extent(renderer).y0) for text in legend.get_texts()}) == rows
        plt.close(fig)


@pytest.mark.slow
def test_help_exits_zero(results):
    assert results["help"].returncode == 0
    assert "--log_dir" in results["help"].stdout and "--smoothing" in results["help"].stdout


@pytest.mark.slow
def test_a_folder_without_event_files_ends_in_one_error_line(logs, results):
    result = results["empty"]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(logs / "empty") in errors[0] and "--log_dir" in errors[0]
    assert not (results["out"] / "empty.png").exists()


def test_missing_folders_and_defaults_are_user_errors(tmp_path, monkeypatch):
    from plot_training_progress import PlotArguments, main

    with pytest.raises(UserError, match="does not exist"):
        find_runs(tmp_path / "no_such_run")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="grpo_training_output.*ppo_training_output.*--log_dir"):
        main(PlotArguments())
    with pytest.raises(ValueError, match="smoothing"):
        PlotArguments(smoothing=1.0)


def test_runs_are_split_by_output_dir_and_labels_disambiguated(logs, tmp_path):
    assert sorted(path.name for path in find_runs(logs)) == ["grpo", "nokl", "ppo"]
    assert len(find_runs(logs / "grpo")[logs / "grpo"]) == 2  # a resumed run stays one run
    labels = run_labels([tmp_path / "a" / "grpo", tmp_path / "b" / "grpo", tmp_path / "ppo"])
    assert labels == ["a/grpo", "b/grpo", "ppo"]


@pytest.mark.parametrize(
    "tag, column",
    [
        ("train/loss", "loss"), ("loss", "loss"), ("train/loss/policy_avg", "loss"),
        ("train/loss/value_avg", "value_loss"), ("train/learning_rate", "learning_rate"),
        ("train/lr", "learning_rate"),
        ("train/reward", "reward"), ("train/objective/scores", "reward"), ("train/mean_reward", "reward"),
        ("train/kl", "kl_per_token"), ("objective/kl", "kl_per_completion"),
        ("train/completions/mean_length", "completion_length"), ("train/entropy", "entropy_per_token"),
        ("train/objective/entropy", "entropy_per_completion"),
        ("train/clip_ratio/region_mean", "clip_ratio"), ("train/policy/clipfrac_avg", "clip_ratio"),
        ("train/grad_norm", None), ("eval/loss", None), ("train/train_loss", None),
        ("eval/win_rate", "eval_win_rate"), ("eval/accuracy_gain_low", "eval_accuracy_gain_low"),
        ("train/objective/rlhf_reward", None),
    ],
)
def test_tag_names_map_onto_common_columns(tag, column):
    assert column_for(tag) == column


def test_ema_matches_tensorboard_smoothing():
    assert ema([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
    # Debiased: the first point is the value itself, then (0.5*0.5*1 + 0.5*3) / (1 - 0.25) = 2.333...
    assert ema([1.0, 3.0], 0.5) == pytest.approx([1.0, (0.25 + 1.5) / 0.75])
    assert ema([4.0] * 5, 0.9) == pytest.approx([4.0] * 5)
    smoothed = ema([1.0, float("nan"), 1.0], 0.6)
    assert smoothed[0] == smoothed[2] == pytest.approx(1.0) and smoothed[1] != smoothed[1]
    with pytest.raises(ValueError):
        ema([1.0], 1.0)


def test_a_users_file_at_csv_is_kept_and_an_earlier_table_replaced(logs, tmp_path):
    from plot_training_progress import PlotArguments, main

    mine = tmp_path / "mine.csv"
    mine.write_text("name,score\nada,1\n")
    with pytest.raises(UserError, match=f"--csv {mine} exists and is not a table this script wrote; it is kept"):
        main(PlotArguments(log_dir=[str(logs / "grpo")], output=str(tmp_path / "p.png"), csv=str(mine)))
    assert mine.read_text() == "name,score\nada,1\n" and not (tmp_path / "p.png").exists()
    with pytest.raises(UserError, match="is a folder; give a file path"):
        main(PlotArguments(log_dir=[str(logs / "grpo")], output=str(tmp_path / "p.png"), csv=str(tmp_path)))
    table = tmp_path / "metrics.csv"
    for _ in range(2):  # the second run replaces the first one's table
        main(PlotArguments(log_dir=[str(logs / "grpo")], output=str(tmp_path / "p.png"), csv=str(table)))
    assert len(read_csv(table)) == len(STEPS)


def test_the_held_out_evaluation_is_drawn_with_its_interval_as_a_band(tmp_path):
    import matplotlib.pyplot as plt

    from plot_training_progress import figure, panel_columns
    from rlhf.evaluation.metrics import event_files, read_run, write_csv

    evaluated = {"eval/win_rate": {0: 0.5, 2: 0.625}, "eval/win_rate_low": {0: 0.5, 2: 0.375},
                 "eval/win_rate_high": {0: 0.5, 2: 0.875}}
    write_events(tmp_path / "run" / "runs" / "Jan01_host", {**grpo_scalars(), **evaluated})
    values, tags = read_run(event_files(tmp_path / "run"))
    assert values["eval_win_rate"] == {0: 0.5, 2: 0.625} and values["eval_win_rate_high"] == {0: 0.5, 2: 0.875}
    panels = panel_columns({"run": values}, extra=False)  # drawn without --extra: it was asked for
    assert panels == ["loss", "learning_rate", "reward", "kl_per_token", "eval_win_rate"]
    fig = figure({"run": values}, {"run": tags}, 0.0, panels)
    ax = next(ax for ax in fig.axes if ax.get_title(loc="left") == "Held-out win rate vs the starting policy")
    assert [band.get_gid() for band in ax.collections] == ["run"]
    assert [line.get_gid() for line in ax.get_lines()] == ["run"]
    plt.close(fig)
    columns = write_csv(tmp_path / "metrics.csv", {"run": values})
    assert columns[-3:] == ["eval_win_rate", "eval_win_rate_low", "eval_win_rate_high"]
    rows = read_csv(tmp_path / "metrics.csv")
    assert (rows[0]["step"], rows[0]["eval_win_rate"], rows[0]["loss"]) == ("0", "0.5", "")
    assert (rows[2]["eval_win_rate_low"], rows[2]["eval_win_rate_high"]) == ("0.375", "0.875")


def write_launch(folder, opened, points, monkeypatch):
    """One launch's event file in `folder`, opened at wall time `opened`, holding [(tag, step, value, wall time)]."""
    import time

    from torch.utils.tensorboard import SummaryWriter

    with monkeypatch.context() as patch:
        patch.setattr(time, "time", lambda: opened)  # the file's first event (its version) takes the time it opens
        writer = SummaryWriter(log_dir=str(folder))
    for tag, step, value, wall in points:
        writer.add_scalar(tag, value, step, walltime=wall)
    writer.close()


def grpo_manifest(folder, per_device=8, accumulation=2, iterations=1):
    import json

    config = {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
              "num_generations": 4, "num_iterations": iterations}
    manifest = {"config": {"GRPOTrainingConfig": config}, "launches": [{"processes": 1}]}
    (folder / "run_manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_held_out_curves_count_minutes_over_launches_and_tokens_from_the_logs(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from plot_training_progress import figure
    from rlhf.evaluation.metrics import CURVE_COLUMNS, event_files, heldout_curve, read_run, write_csv

    # GRPO, 16 completions per step (8 per pass x 2 passes), resumed from checkpoint-2: the second launch trains
    # steps 3-4 again and evaluates step 4 again; its figures win, and its minutes follow the first launch's 160 s.
    grpo = tmp_path / "grpo"
    write_launch(grpo / "runs" / "Jan01", 1000.0, [
        ("eval/accuracy", 0, 0.25, 1030.0), ("eval/accuracy", 2, 0.5, 1100.0), ("eval/accuracy", 4, 0.75, 1160.0),
        *[("train/completions/mean_length", step, 10.0 * step, 1000.0 + 30 * step) for step in (1, 2, 3, 4)],
        ("train/loss", 1, 0.5, 1030.0)], monkeypatch)
    write_launch(grpo / "runs" / "Jan02", 5000.0, [
        ("train/completions/mean_length", 3, 12.0, 5030.0), ("train/completions/mean_length", 4, 14.0, 5060.0),
        ("eval/accuracy", 4, 0.625, 5070.0)], monkeypatch)
    curve = heldout_curve(event_files(grpo), grpo_manifest(grpo))
    assert curve["metric"] == "eval/accuracy" and curve["tokens_from"] == "estimate"
    # tokens: 16 x (10 + 20) by step 2, then 16 x (12 + 14) more (the resumed launch's lengths) by step 4
    assert curve["points"] == [(0, 0.25, 0.5, 0), (2, 0.5, pytest.approx(100 / 60), 480),
                               (4, 0.625, pytest.approx((160 + 70) / 60), 480 + 16 * 26)]
    # PPO counts its completions (`episode`): exact. Its held-out metric without the verifier is the win rate.
    ppo = tmp_path / "ppo"
    write_launch(ppo / "runs" / "Jan01", 2000.0, [
        ("eval/win_rate", 0, 0.5, 2006.0), ("eval/win_rate", 3, 0.625, 2180.0),
        *[("train/episode", step, 16.0 * step, 2000.0 + 50 * step) for step in (1, 2, 3)],
        *[("train/completions/mean_length", step, length, 2000.0 + 50 * step)
          for step, length in ((1, 10.0), (2, 12.5), (3, 11.0))]], monkeypatch)
    ppo_curve = heldout_curve(event_files(ppo), {})
    assert ppo_curve["tokens_from"] == "exact"
    assert ppo_curve["points"] == [(0, 0.5, 0.1, 0), (3, 0.625, 3.0, 16 * (10 + 12.5 + 11))]

    runs = {"grpo": read_run(event_files(grpo)), "ppo": read_run(event_files(ppo))}
    curves = {"grpo": curve, "ppo": ppo_curve}
    columns = write_csv(tmp_path / "metrics.csv", {label: values for label, (values, _) in runs.items()}, curves)
    assert columns[-3:] == ["minutes", "generated_tokens", "generated_tokens_from"]
    rows = {(row["run"], int(row["step"])): row for row in read_csv(tmp_path / "metrics.csv")}
    assert (rows["grpo", 4]["minutes"], rows["grpo", 4]["generated_tokens"]) == ("3.833", "896")
    assert (rows["grpo", 4]["generated_tokens_from"], rows["ppo", 3]["generated_tokens_from"]) == ("estimate", "exact")
    assert rows["grpo", 1]["minutes"] == rows["grpo", 1]["generated_tokens"] == ""  # no evaluation at step 1

    fig = figure({label: values for label, (values, _) in runs.items()},
                 {label: tags for label, (_, tags) in runs.items()}, 0.0, ["loss"], curves)
    axes = {ax.get_title(loc="left"): ax for ax in fig.axes}
    by_minutes = axes["Held-out accuracy (verifier), else win rate vs minutes"]
    assert [line.get_gid() for line in by_minutes.get_lines()] == ["grpo", "ppo"]
    assert list(by_minutes.get_lines()[1].get_xdata()) == [0.1, 3.0]
    by_tokens = axes["Held-out accuracy (verifier), else win rate vs generated tokens"]
    assert list(by_tokens.get_lines()[0].get_xdata()) == [0, 480, 896]
    assert "estimated" in by_tokens.get_xlabel()
    plt.close(fig)
    # The script: the same figures in its table (the GRPO batch read from the run's run_manifest.json)
    result = run_in_process("plot_training_progress.py", "--log_dir", grpo, ppo, "--output", tmp_path / "p.png",
                            "--csv", tmp_path / "script.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "generated_tokens_from" in result.stdout
    written = {(row["run"], int(row["step"])): row for row in read_csv(tmp_path / "script.csv")}
    assert [written[key][column] for key in (("grpo", 4), ("ppo", 3)) for column in CURVE_COLUMNS] == [
        "3.833", "896", "estimate", "3.0", "536", "exact"]


def test_generated_tokens_read_a_logged_count_first_and_grpo_counts_discarded_groups():
    from rlhf.evaluation.metrics import completions_per_step, generated_tokens, series_of_log_history

    history = [{"eval/accuracy": 0.5, "step": 0}, {"completions/mean_length": 10.0, "step": 1},
               {"completions/mean_length": 20.0, "dynamic_sampling/groups_discarded": 1.0, "step": 3}]
    series = series_of_log_history(history)
    assert series == {"eval/accuracy": {0: 0.5}, "completions/mean_length": {1: 10.0, 3: 20.0},
                      "dynamic_sampling/groups_discarded": {3: 1.0}}
    # 2 processes x 4 per pass x 3 passes, each generation trained on twice: 12 new completions per step
    manifest = {"config": {"Config": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3,
                                      "num_generations": 4, "num_iterations": 2}}, "launches": [{"processes": 2}]}
    assert completions_per_step(manifest) == 12
    # steps 2-3: 2 steps of 12 completions plus one discarded group of 4 each, 20 tokens long on average
    assert generated_tokens(series, 12, 4) == ({1: 120, 3: 120 + 2 * (12 + 4) * 20}, "estimate")
    assert generated_tokens(series) == ({}, None)  # neither a count nor completions per step: nothing said
    counted = {**series, "num_completion_tokens": {1: 100.0, 3: 700.0}}
    assert generated_tokens(counted, 12, 4) == ({1: 100, 3: 700}, "exact")
