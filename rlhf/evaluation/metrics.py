"""Training metrics read back from TensorBoard event files, under one set of names for GRPO, PPO and reward runs.

TRL's trainers log the same quantities under different tags (GRPO `loss`, PPO `loss/policy_avg`); `COLUMNS` maps
them onto common columns, and the held-out evaluation's `eval/` scalars onto `eval_*` columns. KL and entropy keep a
column per unit: GRPO logs them per token, PPO per completion.
Event files are read with TensorBoard's own `EventAccumulator`.
"""

import csv
import math
from pathlib import Path

from rlhf.errors import UserError

EVENTS_GLOB = "events.out.tfevents.*"
# Column -> the tags that fill it (without the `train/` prefix), first match wins. GRPO/reward model, then PPO.
# GRPO's `kl` and `entropy` are means over a completion's tokens, PPO's `objective/kl` and `objective/entropy` sums
# over them (tens of times larger): different units, so different columns, never one scale.
COLUMNS = {
    "loss": ("loss", "loss/policy_avg"),
    "learning_rate": ("learning_rate", "lr"),
    "reward": ("reward", "objective/scores", "mean_reward"),
    "kl_per_token": ("kl",),
    "kl_per_completion": ("objective/kl",),
    "completion_length": ("completions/mean_length",),
    "entropy_per_token": ("entropy",),
    "entropy_per_completion": ("objective/entropy",),
    "clip_ratio": ("clip_ratio/region_mean", "policy/clipfrac_avg"),
    "value_loss": ("loss/value_avg",),
    # GRPO: the share of a step's groups whose completions all scored alike (advantage 0: nothing learnt from them);
    # with --use_dynamic_sampling, of the groups trained on, and the groups drawn but left out beside it.
    "groups_one_reward": ("frac_reward_zero_std",),
    "groups_discarded": ("dynamic_sampling/groups_discarded",),
    "critic_warmup": ("objective/critic_warmup",),  # PPO --critic_warmup: 1 where the value model alone trained
    # Held-out evaluation during training (rlhf/evaluation/heldout.py), each with its 95% interval.
    **{f"eval_{name}{end}": (f"eval/{name}{end}",) for name in ("win_rate", "accuracy", "accuracy_gain")
       for end in ("", "_low", "_high")},
}
# A quantity logged in two units -> its columns.
UNITS = {"kl": ("kl_per_token", "kl_per_completion"), "entropy": ("entropy_per_token", "entropy_per_completion")}
CORE_COLUMNS = ("loss", "learning_rate", "reward", *UNITS["kl"])  # in every CSV, logged or not
_TAG_TO_COLUMN = {tag: column for column, tags in COLUMNS.items() for tag in tags}


def column_for(tag):
    """The column a logged tag belongs to (`train/objective/kl` -> `kl_per_completion`), or None for other tags."""
    return _TAG_TO_COLUMN.get(tag.removeprefix("train/"))


def reward_function(tag, statistic=None):
    """The reward function a per-function tag names (`rewards/<name>/mean` or `/std`, with `train/` in front or not;
    `statistic`: "mean" or "std" for that one alone), whole: a function given by file keeps its path
    (`rewards/path/to/f.py:fn/mean` -> `path/to/f.py:fn`). None for other tags."""
    tag = tag.removeprefix("train/")
    if not tag.startswith("rewards/"):
        return None
    name, _, end = tag.removeprefix("rewards/").rpartition("/")
    return name if name and end in ((statistic,) if statistic else ("mean", "std")) else None


def ema(values, weight):
    """TensorBoard's smoothing: an exponential moving average, debiased so the first points are not pulled to 0.

    smoothed_t = last_t / (1 - weight^n) with last_t = weight * last_{t-1} + (1 - weight) * value_t, n the count of
    finite values so far. Non-finite values pass through unsmoothed; weight 0 returns the values unchanged.
    """
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    last, count, smoothed = 0.0, 0, []
    for value in values:
        if not math.isfinite(value):
            smoothed.append(value)
            continue
        last = last * weight + (1 - weight) * value
        count += 1
        smoothed.append(last / (1 - weight**count))
    return smoothed


def find_runs(log_dir):
    """{run folder: [event files]} under `log_dir`, however deep.

    The event files of one training run (`output_dir/runs/<date>_<host>/`, one subfolder per launch when resumed)
    form one run; a folder holding several output_dirs gives one run per output_dir.
    """
    folder = Path(log_dir)
    if not folder.exists():
        raise UserError(f"--log_dir {folder} does not exist; pass the output_dir of a training run")
    files = [folder] if folder.is_file() else event_files(folder)
    files = [path for path in files if path.name.startswith("events.out.tfevents.")]
    if not files:
        raise UserError(
            f"no TensorBoard event files ({EVENTS_GLOB}) under {folder}; pass the output_dir of a training run "
            "(trained with --report_to tensorboard) with --log_dir"
        )
    runs = {}
    for path in files:
        root = path.parent.parent.parent if path.parent.parent.name == "runs" else path.parent
        if folder.is_file() or not root.is_relative_to(folder):
            root = folder  # --log_dir named a runs/<date> folder or an event file itself
        runs.setdefault(root, []).append(path)
    return runs


def read_scalars(event_files):
    """Every scalar in TensorBoard event files: {tag: {step: (wall_time, value)}}, all points kept.

    Where two files hold the same tag and step (a run resumed from an earlier checkpoint), the value written last
    wins. The one reader of event files in this package (plots, benchmark, tests).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = {}
    for path in event_files:
        # scalars 0 = keep every point (the default keeps a sample of 10,000); nothing else is needed here.
        guidance = {"scalars": 0, "tensors": 1, "histograms": 1, "images": 1, "audio": 1, "distributions": 1}
        accumulator = EventAccumulator(str(path), size_guidance=guidance)
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            merged = points.setdefault(tag, {})
            for event in accumulator.Scalars(tag):
                if event.step not in merged or merged[event.step][0] <= event.wall_time:
                    merged[event.step] = (event.wall_time, event.value)
    return points


def event_files(folder):
    """The TensorBoard event files under `folder`, however deep."""
    return sorted(path for path in Path(folder).rglob(EVENTS_GLOB) if path.is_file())


def read_run(event_files):
    """({column: {step: value}}, {column: tag read}) merged over the event files of one run."""
    points = {tag.removeprefix("train/"): values for tag, values in read_scalars(event_files).items()
              if column_for(tag) is not None}
    values, tags_read = {}, {}
    for column, names in COLUMNS.items():
        name = next((name for name in names if name in points), None)
        if name is not None:
            values[column] = {step: value for step, (_, value) in sorted(points[name].items())}
            tags_read[column] = name
    return values, tags_read


def run_labels(folders):
    """A short label per run folder: its name, with parent folders added where two names clash."""
    folders = [Path(folder).resolve() for folder in folders]
    depth = dict.fromkeys(folders, 1)
    while True:
        labels = {folder: "/".join(folder.parts[-depth[folder]:]) for folder in folders}
        clashes = [folder for folder in folders if list(labels.values()).count(labels[folder]) > 1]
        if not clashes or all(depth[folder] >= len(folder.parts) for folder in clashes):
            return [labels[folder] for folder in folders]
        for folder in clashes:
            depth[folder] = min(depth[folder] + 1, len(folder.parts))


def write_csv(path, runs):
    """One row per run and step: `run`, `step`, the core columns, and each other column some run has."""
    present = {column for values in runs.values() for column in values}
    columns = [*CORE_COLUMNS, *(column for column in COLUMNS if column in present and column not in CORE_COLUMNS)]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "step", *columns])
        for label, values in runs.items():
            for step in sorted({step for points in values.values() for step in points}):
                writer.writerow([label, step, *(_number(values.get(column, {}).get(step)) for column in columns)])
    return columns


def is_metrics_csv(path):
    """True when `path` holds a table `write_csv` wrote (an earlier plot's, which a new one replaces)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.readline().startswith("run,step,")
    except (OSError, UnicodeDecodeError):
        return False


def _number(value):
    """Shortest text that reads back as the logged value (TensorBoard stores float32: 0.1, not 0.10000000149)."""
    if value is None:
        return ""
    import numpy as np

    single = np.float32(value)
    return repr(float(str(single))) if float(single) == value else repr(value)
