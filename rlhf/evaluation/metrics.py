"""Training metrics read back from TensorBoard event files, under one set of names for GRPO, PPO and reward runs.

TRL's trainers log the same quantities under different tags (GRPO `loss`, PPO `loss/policy_avg`); `COLUMNS` maps
them onto common columns, and the held-out evaluation's `eval/` scalars onto `eval_*` columns. KL and entropy keep a
column per unit: GRPO logs them per token, PPO per completion. `heldout_curve` puts a run's held-out evaluations
against minutes of training and generated completion tokens (`generated_tokens`, also read from a checkpoint's
log_history by bench/arms.py). Event files are read with TensorBoard's own `EventAccumulator`.
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
    points = {}
    for path in event_files:
        for tag, events in read_event_file(path)[1].items():
            merged = points.setdefault(tag, {})
            for step, (wall_time, value) in events.items():
                keep_latest(merged, step, wall_time, value)
    return points


def keep_latest(merged, step, wall_time, value):
    """Put (wall_time, value) at `step` in `merged` unless a later-written value is there already."""
    if step not in merged or merged[step][0] <= wall_time:
        merged[step] = (wall_time, value)


def read_event_file(path):
    """(The wall time of the file's first event, {tag: {step: (wall_time, value)}}) of one TensorBoard event file,
    the value written last winning within it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # scalars 0 = keep every point (the default keeps a sample of 10,000); nothing else is needed here.
    guidance = {"scalars": 0, "tensors": 1, "histograms": 1, "images": 1, "audio": 1, "distributions": 1}
    accumulator = EventAccumulator(str(path), size_guidance=guidance)
    accumulator.Reload()
    points = {}
    for tag in accumulator.Tags()["scalars"]:
        merged = points.setdefault(tag, {})
        for event in accumulator.Scalars(tag):
            keep_latest(merged, event.step, event.wall_time, event.value)
    return accumulator.FirstEventTimestamp(), points


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


CURVE_COLUMNS = ("minutes", "generated_tokens", "generated_tokens_from")  # at each held-out evaluation


def write_csv(path, runs, curves=None):
    """One row per run and step: `run`, `step`, the core columns, and each other column some run has; with `curves`
    ({run: `heldout_curve`}) that hold any, `CURVE_COLUMNS` in the rows of held-out evaluations."""
    present = {column for values in runs.values() for column in values}
    columns = [*CORE_COLUMNS, *(column for column in COLUMNS if column in present and column not in CORE_COLUMNS)]
    curves = {label: curve for label, curve in (curves or {}).items() if curve}
    extra = list(CURVE_COLUMNS) if curves else []
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "step", *columns, *extra])
        for label, values in runs.items():
            curve = curves.get(label)
            timed = {step: (minutes, tokens) for step, _, minutes, tokens in curve["points"]} if curve else {}
            for step in sorted({step for points in values.values() for step in points}):
                row = [label, step, *(_number(values.get(column, {}).get(step)) for column in columns)]
                if extra:
                    minutes, tokens = timed.get(step, (None, None))
                    row += [_number(minutes and round(minutes, 3)), "" if tokens is None else tokens,
                            (curve["tokens_from"] or "") if step in timed else ""]
                writer.writerow(row)
    return columns + extra


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


# ---- Held-out curves: the held-out metric against minutes of training and generated tokens ----

# A cumulative count of the completion tokens generated in training, read first where a trainer logs it (GRPO's and
# PPO's trainers log none today: GRPO's `num_tokens` counts prompt tokens too); else it is worked out as below.
COMPLETION_TOKENS_TAG = "num_completion_tokens"


def completions_per_step(manifest):
    """GRPO's completions generated per optimizer step, from a run's `run_manifest.json` (as a dict), or None for
    another trainer: TRL generates `per_device_train_batch_size` per process for each of its
    `gradient_accumulation_steps` passes, once per `num_iterations` (its completions are trained on that many times).
    """
    config = next((section for section in manifest.get("config", {}).values() if "num_generations" in section), None)
    if config is None:
        return None
    processes = (manifest.get("launches") or [{}])[-1].get("processes") or 1
    return (config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] * processes
            / (config.get("num_iterations") or 1))


def group_size(manifest):
    """GRPO's completions per prompt (`num_generations`), or None."""
    return next((section["num_generations"] for section in manifest.get("config", {}).values()
                 if "num_generations" in section), None)


def series_of_log_history(log_history):
    """A trainer_state.json `log_history` as {key: {step: value}} (as `read_scalars` gives TensorBoard's tags,
    without `train/`)."""
    series = {}
    for entry in log_history:
        for key, value in entry.items():
            if key != "step" and isinstance(value, int | float):
                series.setdefault(key, {})[entry["step"]] = value
    return series


def generated_tokens(series, per_step=None, group=None):
    """({step: cumulative completion tokens generated in training up to it}, "exact" or "estimate") from a run's
    logged `series` ({tag without `train/`: {step: value}}); ({}, None) where nothing says.

    - `num_completion_tokens`, where a trainer logs it: as logged (exact).
    - PPO: each log's `completions/mean_length` (the mean over its rollouts, all the same size) times the completions
      since the previous log (`episode` counts them): exact but for rounding.
    - GRPO: each log's `completions/mean_length` times `per_step` (`completions_per_step`) times the steps since the
      previous log, plus the groups that dynamic sampling drew and discarded (`group` completions each): an estimate,
      as the mean is of generation batches, not of the step's completions.
    """
    if COMPLETION_TOKENS_TAG in series:
        return {step: round(value) for step, value in sorted(series[COMPLETION_TOKENS_TAG].items())}, "exact"
    lengths = series.get("completions/mean_length", {})
    episodes = series.get("episode")
    if not lengths or (episodes is None and not per_step):
        return {}, None
    discarded = series.get("dynamic_sampling/groups_discarded", {})
    total, before, tokens = 0.0, 0, {}
    for step, length in sorted(lengths.items()):
        if episodes is not None:
            completions = episodes.get(step, 0) - before
            before = episodes.get(step, before)
        else:
            completions = (step - before) * (per_step + discarded.get(step, 0) * (group or 0))
            before = step
        total += length * completions
        tokens[step] = round(total)
    return tokens, "exact" if episodes is not None else "estimate"


def at_step(cumulative, step):
    """The value of a cumulative {step: value} at `step`: its last point at or before it (None before any)."""
    return next((value for point, value in sorted(cumulative.items(), reverse=True) if point <= step), None)


def heldout_metric(series):
    """The held-out metric a run logged (tags without `train/`): `eval/accuracy` (the verifier's) where it did, else
    `eval/win_rate`; None without held-out evaluation."""
    return next((name for name in ("eval/accuracy", "eval/win_rate") if name in series), None)


def heldout_curve(event_files, manifest=None):
    """The held-out evaluations of one run: {"metric": tag, "tokens_from": "exact"/"estimate"/None, "points":
    [(step, value, minutes, generated tokens or None)]}, or None where the run logged none.

    Minutes are of training as TensorBoard saw it: from each launch's first event (its event file opened, after the
    models loaded) to its last, the launches of a resumed run summed; an evaluation that a later launch logged again
    is counted in that launch. Generated tokens: `generated_tokens` at the evaluation's step (at the last log at or
    before it).
    """
    launches = []  # (first wall time, last wall time, {tag: {step: (wall_time, value)}}) per event file
    for path in event_files:
        first, scalars = read_event_file(path)
        last = max((wall for points in scalars.values() for wall, _ in points.values()), default=first)
        launches.append((first, last, scalars))
    launches.sort(key=lambda launch: launch[0])
    series, timed, offset = {}, {}, 0.0  # timed: {tag: {step: minutes}}, a later launch winning
    for first, last, scalars in launches:
        for tag, points in scalars.items():
            series.setdefault(tag.removeprefix("train/"), {}).update({s: v for s, (_, v) in points.items()})
        for tag in ("eval/accuracy", "eval/win_rate"):
            for step, (wall, _) in scalars.get(tag, {}).items():
                timed.setdefault(tag, {})[step] = (offset + wall - first) / 60
        offset += last - first
    metric = heldout_metric(series)
    if metric is None:
        return None
    manifest = manifest or {}
    tokens, tokens_from = generated_tokens(series, completions_per_step(manifest), group_size(manifest))
    points = [(step, value, timed[metric][step], (at_step(tokens, step) or 0) if tokens_from else None)
              for step, value in sorted(series[metric].items())]
    return {"metric": metric, "tokens_from": tokens_from, "points": points}
