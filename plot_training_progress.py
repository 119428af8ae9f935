"""Plot the training curves of GRPO, PPO and reward-model runs from their TensorBoard logs (PNG + CSV).

Usage:

    python plot_training_progress.py                       # ./grpo_training_output and ./ppo_training_output
    python plot_training_progress.py --log_dir ./grpo_run ./ppo_run --smoothing 0.6 --extra
    python plot_training_progress.py --log_dir ./grpo_run --output grpo.png --csv grpo.csv

Each --log_dir is a run's output_dir; every event file under it (a resumed run has several) is merged into one run.
Panels: loss, learning rate, mean reward, KL to the reference (--extra adds completion length, entropy, clip ratio,
PPO's value loss, GRPO's share of groups of one reward and dynamic sampling's discarded groups), and where a run
evaluated held-out prompts (--eval_prompts), the held-out win rate and accuracy with their 95% intervals as bands.
GRPO and PPO tag names are mapped onto these (see rlhf/evaluation/metrics.py); KL and entropy, which GRPO logs per
token and PPO per completion, get a panel (and a CSV column) per unit. The CSV has one row per run and step.
Runs that evaluated held-out prompts also get that metric (accuracy, else win rate) against minutes of training (from
each launch's first event, a resumed run's launches summed) and against generated completion tokens (counted from
PPO's episodes and mean lengths; for GRPO an estimate from its mean lengths and completions per step), one line per
run; the CSV's `minutes`, `generated_tokens` and `generated_tokens_from` (exact / estimate) columns hold them.
`python plot_training_progress.py --help` lists every flag.
"""

from dataclasses import dataclass, field
from pathlib import Path

from rlhf.cli import UserError, exit_on_user_error, parse_args
from rlhf.evaluation.metrics import (
    COLUMNS,
    UNITS,
    ema,
    find_runs,
    heldout_curve,
    is_metrics_csv,
    read_run,
    run_labels,
    write_csv,
)
from rlhf.lifecycle.manifest import read_manifest

DEFAULT_LOG_DIRS = ("./grpo_training_output", "./ppo_training_output")
CORE_METRICS = ("loss", "learning_rate", "reward", "kl")  # always drawn, if only to say a run did not log them
NO_KL = "no KL logged: beta was 0 (GRPO)\nor the run has no reference model"
PER_COMPLETION = "nats per completion (sum over its tokens)"
# Panel title, y-axis label, and what to say when a run has no such metric. GRPO's KL and entropy (means over
# tokens) and PPO's (sums over a completion, tens of times larger) are drawn in panels of their own.
PANELS = {
    "loss": ("Loss", None, "no loss logged"),
    "learning_rate": ("Learning rate", None, "no learning rate logged"),
    "reward": ("Mean reward", None, "no reward logged"),
    "kl_per_token": ("KL to the reference, per token (GRPO)", "nats per token", NO_KL),
    "kl_per_completion": ("KL to the reference, per completion (PPO)", PER_COMPLETION, NO_KL),
    "completion_length": (
        "Completion length (tokens)", None, "no completion length logged\n(plain TRL PPO logs none)"
    ),
    "entropy_per_token": ("Entropy, per token (GRPO)", "nats per token", "no entropy logged"),
    "entropy_per_completion": ("Entropy, per completion (PPO)", PER_COMPLETION, "no entropy logged"),
    "clip_ratio": ("Clip ratio", None, "no clip ratio logged"),
    "value_loss": ("Value loss (PPO)", None, "no value loss logged"),
    "groups_one_reward": ("Groups of one reward (GRPO): nothing learnt", "share of the groups trained on",
                          "no group statistics logged"),
    "groups_discarded": ("Groups discarded (--use_dynamic_sampling)", "groups per step", "no dynamic sampling"),
    # Held-out evaluation (--eval_prompts): drawn wherever a run logged it, its 95% interval as a band.
    "eval_win_rate": ("Held-out win rate vs the starting policy", "band: 95% interval", "no held-out evaluation"),
    "eval_accuracy": ("Held-out verifier accuracy", "band: 95% interval", "no held-out accuracy"),
    "eval_accuracy_gain": ("Held-out accuracy gain over the starting policy", "band: paired 95% interval",
                           "no held-out accuracy"),
}
# PPO's score also carries the --missing_eos_penalty of completions cut off before EOS: said where both are drawn.
TAG_NOTES = {"objective/scores": "incl. missing-EOS penalty"}
PPO_TAGS = {"lr", "objective/scores", "objective/kl", "loss/policy_avg"}


@dataclass
class PlotArguments:
    """Which runs to read and where the plot and the table go."""

    log_dir: list[str] | None = field(
        default=None,
        metadata={"help": "Run folders (a training run's output_dir), one or more. Default: ./grpo_training_output "
                  "and ./ppo_training_output, those that exist."},
    )
    output: str = field(default="training_progress.png", metadata={"help": "The figure (PNG; .pdf/.svg work too)."})
    csv: str = field(default="training_metrics.csv", metadata={"help": "The table: one row per run and step."})
    smoothing: float = field(
        default=0.0,
        metadata={"help": "TensorBoard-style EMA weight in [0, 1), e.g. 0.6, drawn over the faint raw curve. 0: off."},
    )
    extra: bool = field(
        default=False,
        metadata={"help": "Add panels for completion length, entropy, clip ratio, value loss and groups of one "
                  "reward (where logged)."},
    )

    def __post_init__(self):
        if not 0 <= self.smoothing < 1:
            raise ValueError(f"--smoothing must be in [0, 1) (e.g. 0.6), got {self.smoothing}")


def main(args):
    _check_outputs(args.output, args.csv)
    folders = args.log_dir or [path for path in DEFAULT_LOG_DIRS if Path(path).is_dir()]
    if not folders:
        raise UserError(f"none of the default run folders exist ({', '.join(DEFAULT_LOG_DIRS)}); pass the "
                        "output_dir of a training run with --log_dir")
    found = {}  # run folder -> event files, in the order given
    for folder in folders:
        found.update(find_runs(folder))
    runs, tags, curves = {}, {}, {}
    for label, (folder, files) in zip(run_labels(found), found.items()):
        runs[label], tags[label] = read_run(files)
        held_out = any(column.startswith("eval_") for column in runs[label])
        curves[label] = heldout_curve(files, read_manifest(folder)) if held_out else None
    if not any(runs.values()):
        raise UserError(f"the event files under {', '.join(map(str, folders))} hold none of the metrics plotted "
                        f"({', '.join(CORE_METRICS)}); is this the output_dir of a TRL training run?")

    try:
        columns = write_csv(args.csv, runs, curves)
        plot(runs, tags, args.output, args.smoothing, panel_columns(runs, args.extra), curves)
    except OSError as error:
        raise UserError(f"cannot write {error.filename} ({error.strerror}); choose another --output / --csv") from None
    print("Runs:")
    for (label, values), files in zip(runs.items(), found.values()):
        steps = sorted({step for points in values.values() for step in points})
        span = f"{len(steps)} logged steps (last {steps[-1]})" if steps else "no plotted metric logged"
        lacking = [metric for metric in CORE_METRICS if not set(UNITS.get(metric, (metric,))) & set(values)]
        lacking = f"; not logged: {', '.join(lacking)}" if lacking and steps else ""
        print(f"  {label}: {span}, {len(files)} event file{'s' * (len(files) > 1)} in {found_folder(files)}{lacking}")
    print(f"Wrote the plot to {args.output} and the table to {args.csv} (columns: {', '.join(columns)}).")


def _check_outputs(output, table):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    if Path(output).suffix.lower().lstrip(".") not in formats:
        raise UserError(f"--output {output} needs an image file extension such as .png, .pdf or .svg")
    if Path(output).resolve() == Path(table).resolve():
        raise UserError(f"--output and --csv are both {output}; give them different paths")
    for path, flag in ((output, "--output"), (table, "--csv")):
        if not Path(path).resolve().parent.is_dir():
            raise UserError(f"the folder of {flag} {path} does not exist; create it or choose another path")
    if Path(table).is_dir():
        raise UserError(f"--csv {table} is a folder; give a file path, e.g. {Path(table) / 'training_metrics.csv'}")
    if Path(table).exists() and not is_metrics_csv(table):  # an earlier plot's table is replaced; a user's file not
        raise UserError(f"--csv {table} exists and is not a table this script wrote; it is kept: give another path, "
                        "or delete it first if it may go")


def found_folder(files):
    folders = {Path(path).parent for path in files}
    return str(folders.pop()) if len(folders) == 1 else str(Path(files[0]).parent.parent)


def panel_columns(runs, extra):
    """The columns drawn, a panel each: the core metrics, then (`extra`) every other one some run logged. KL gets a
    panel per unit some run logged it in, or one panel that says no run did."""
    logged = {column for values in runs.values() for column in values}
    kl_logged = logged & set(UNITS["kl"])
    panels = []
    for column in PANELS:
        if column in UNITS["kl"]:
            if column in kl_logged or (not kl_logged and column == UNITS["kl"][0]):
                panels.append(column)
        elif column in CORE_METRICS or ((extra or column.startswith("eval_")) and column in logged):
            panels.append(column)
    return panels


def plot(runs, tags, output, smoothing, panels, curves=None):
    import matplotlib.pyplot as plt

    fig = figure(runs, tags, smoothing, panels, curves)
    fig.savefig(output, dpi=110)
    plt.close(fig)


def figure(runs, tags, smoothing, panels, curves=None):
    """The figure: one panel per column in `panels`, every run that logged it drawn in its colour; with `curves`
    ({run: `heldout_curve`}) that hold any, two panels more: the held-out metric against minutes and tokens."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    curves = {label: curve for label, curve in (curves or {}).items() if curve}
    rows = (len(panels) + (2 if curves else 0) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(13, 3.4 * rows + 1), layout="constrained", squeeze=False)
    colors = {label: f"C{i % 10}" for i, label in enumerate(runs)}
    has_ppo = any(PPO_TAGS & set(used.values()) for used in tags.values())
    for ax, column in zip(axes.flat, panels):
        if _panel(ax, column, runs, tags, colors, smoothing):
            ax.set_xlabel("step (GRPO: optimizer step, PPO: rollout batch)" if has_ppo else "optimizer step")
    drawn = len(panels)
    if curves:
        for ax, axis in zip(axes.flat[drawn:], ("minutes", "tokens")):
            _curve_panel(ax, axis, curves, colors)
        drawn += 2
    for ax in axes.flat[drawn:]:
        ax.remove()
    steps = {label: len({s for points in values.values() for s in points}) for label, values in runs.items()}
    handles = [Line2D([], [], color=colors[run], linewidth=2, label=f"{run} ({steps[run]} steps)") for run in runs]
    # The title rides on the legend: a separate suptitle and an outside legend overlap in constrained layout.
    title = "Training progress" + (f" (EMA smoothing {smoothing}; faint lines: raw values)" if smoothing else "")
    for ncol in range(min(len(runs), 4), 0, -1):  # the most columns (up to 4) whose labels fit the figure's width
        legend = fig.legend(handles=handles, loc="outside upper center", ncol=ncol, frameon=False, title=title,
                            title_fontproperties={"size": "large"})
        if ncol == 1 or legend.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width:
            break
        legend.remove()
    return fig


def _panel(ax, column, runs, tags, colors, smoothing):
    """Draw one metric of every run on `ax`; False when no run logged it (the panel then says so)."""
    from matplotlib.lines import Line2D

    title, unit, missing_text = PANELS[column]
    ax.set_title(title, loc="left", fontweight="bold")
    used = sorted({tags[label][column] for label in runs if column in tags[label]}, key=COLUMNS[column].index)
    notes = [f"{tag} ({TAG_NOTES[tag]})" if tag in TAG_NOTES and len(used) > 1 else tag for tag in used]
    ax.set_title(", ".join(notes), loc="right", fontsize=8, color="0.4")
    # A run that logged this quantity in its other unit is drawn in that unit's panel, not missing from this one.
    units = next((columns for columns in UNITS.values() if column in columns), (column,))
    missing = [label for label in runs if not set(units) & set(runs[label])]
    if not any(column in values for values in runs.values()):
        ax.text(0.5, 0.5, missing_text, ha="center", va="center", transform=ax.transAxes, color="0.3")
        ax.set_xticks([])
        ax.set_yticks([])
        return False
    for label, values in runs.items():
        if column in values:
            steps, points = list(values[column]), list(values[column].values())
            held_out = column.startswith("eval_")  # a few evaluations: points, and their interval as a band
            style = {"marker": "o", "markersize": 4} if len(steps) == 1 or held_out else {}
            if held_out and f"{column}_low" in values and f"{column}_high" in values:
                ax.fill_between(list(values[f"{column}_low"]), list(values[f"{column}_low"].values()),
                                list(values[f"{column}_high"].values()), color=colors[label], alpha=0.15, gid=label)
            elif smoothing and column != "learning_rate":  # a schedule is not noisy: smoothing it only adds lag
                ax.plot(steps, points, color=colors[label], alpha=0.25, linewidth=1, **style)
                points = ema(points, smoothing)
            ax.plot(steps, points, color=colors[label], linewidth=1.8, gid=label, **style)
    if missing:  # the runs that lack this metric, said in the panel itself
        note = missing_text.split(":")[0].split("\n")[0]
        handles = [Line2D([], [], color=colors[label], linestyle=":", label=f"{label}: {note}") for label in missing]
        ax.legend(handles=handles, fontsize=8, loc="best")
    if unit:
        ax.set_ylabel(unit)
    ax.grid(alpha=0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)  # steps are whole numbers, also in a 3-step run
    if column == "learning_rate":
        ax.yaxis.set_major_formatter("{x:.3g}")  # no "1e-5" offset text colliding with the title
    return True


def _curve_panel(ax, axis, curves, colors):
    """The held-out metric of each run in `curves` against its minutes of training or its generated tokens."""
    metrics = {curve["metric"] for curve in curves.values()}
    name = "accuracy" if metrics == {"eval/accuracy"} else "win rate" if metrics == {"eval/win_rate"} else \
        "accuracy (verifier), else win rate"
    estimated = any(curve["tokens_from"] == "estimate" for curve in curves.values())
    xlabel = "minutes of training" if axis == "minutes" else \
        "generated completion tokens" + (" (GRPO: estimated from mean lengths)" if estimated else "")
    ax.set_title(f"Held-out {name} vs {'minutes' if axis == 'minutes' else 'generated tokens'}", loc="left",
                 fontweight="bold")
    for label, curve in curves.items():
        points = [(minutes if axis == "minutes" else tokens, value) for _, value, minutes, tokens in curve["points"]]
        points = [(x, y) for x, y in points if x is not None]
        if points:
            ax.plot(*zip(*points), color=colors[label], linewidth=1.8, marker="o", markersize=4, gid=label)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)


def configs():
    return (PlotArguments,)


@exit_on_user_error
def cli(args=None):
    main(*parse_args(configs, args, __doc__))


if __name__ == "__main__":
    cli()
