"""Evaluation: held-out prompts, sampling, scoring and ranking completions, summaries, and comparisons with the
baseline (win rate under the reward, verifier accuracy gain) with bootstrap intervals over prompts.

The statistics are pure functions of lists of numbers, so they are unit-tested on their own. The prompt is the
unit every interval resamples: the completions of one prompt are not independent of each other.
"""

import json
import math
import os
import random
import signal
import statistics
import tempfile
from pathlib import Path

from rlhf.errors import UserError

TIE_TOLERANCE = 1e-6


################
# Statistics
################


def rank_labels(rewards):
    """BEST for the highest reward of a prompt's completions, WORST for the lowest, MEDIUM for the rest.

    Ties keep the completions' order (the first of equal rewards ranks higher). One completion is BEST.
    """
    order = sorted(range(len(rewards)), key=lambda i: -rewards[i])
    labels = ["MEDIUM"] * len(rewards)
    if order:
        labels[order[0]] = "BEST"
    if len(order) > 1:
        labels[order[-1]] = "WORST"
    return labels


def pearson(xs, ys):
    """Pearson correlation, or None when either side is constant (or there are fewer than 2 points)."""
    if len(xs) < 2:
        return None
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    var_x = sum((x - mean_x) ** 2 for x in xs)
    var_y = sum((y - mean_y) ** 2 for y in ys)
    if var_x == 0 or var_y == 0:
        return None
    return cov / math.sqrt(var_x * var_y)


def bootstrap_interval(values, num_resamples=2000, confidence=0.95, seed=0):
    """Percentile bootstrap interval of the mean of `values`, resampling them with replacement."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(num_resamples))
    tail = (1.0 - confidence) / 2.0
    low = means[int(math.floor(tail * (num_resamples - 1)))]
    high = means[int(math.ceil((1.0 - tail) * (num_resamples - 1)))]
    return low, high


def summarize(prompts, seed=0):
    """Summary of one model's completions, given per prompt (lists of dicts with `reward`, `num_tokens`,
    `ended_with_eos`, and `verdict` when the math verifier scored them)."""
    completions = [c for cs in prompts for c in cs]
    rewards = [c["reward"] for c in completions]
    lengths = [c["num_tokens"] for c in completions]
    summary = {
        "num_completions": len(completions),
        "mean_reward": statistics.fmean(rewards),
        "std_reward": statistics.pstdev(rewards),
        "min_reward": min(rewards),
        "max_reward": max(rewards),
        "mean_length": statistics.fmean(lengths),
        "eos_rate": sum(c["ended_with_eos"] for c in completions) / len(completions),
        # Reward rising with length alone is a warning sign of length hacking.
        "reward_length_correlation": pearson(lengths, rewards),
    }
    if "verdict" in completions[0]:
        accuracy = prompt_shares(prompts, "correct")
        low, high = bootstrap_interval(accuracy, seed=seed)
        summary.update(
            format_rate=statistics.fmean(prompt_shares(prompts, "correct", "wrong", "timeout")),
            verifier_accuracy=statistics.fmean(accuracy),
            verifier_accuracy_ci_low=low,
            verifier_accuracy_ci_high=high,
            verifier_timeouts=sum(c["verdict"] == "timeout" for c in completions),
        )
    return summary


def prompt_shares(prompts, *verdicts):
    """Per prompt, the share of its completions whose verifier verdict is one of `verdicts`."""
    return [sum(c["verdict"] in verdicts for c in cs) / len(cs) for cs in prompts]


def prompt_win_scores(model_rewards, baseline_rewards):
    """Per prompt, the share of (model, baseline) completion pairs the model wins; a tie counts half.

    Both arguments are lists (one entry per prompt) of the rewards of that prompt's completions.
    """
    scores = []
    for ours, theirs in zip(model_rewards, baseline_rewards, strict=True):
        pairs = [(a, b) for a in ours for b in theirs]
        scores.append(sum(0.5 if abs(a - b) <= TIE_TOLERANCE else float(a > b) for a, b in pairs) / len(pairs))
    return scores


def compare(model_prompts, baseline_prompts, seed=0):
    """A model against the baseline on the same prompts (completions per prompt, as `summarize` takes them).

    - `win_rate`: per prompt, the share of (model, baseline) completion pairs won under the reward (ties half),
      averaged over prompts; `ci_low`/`ci_high`: its 95% bootstrap interval over prompts; `mean_reward_delta`.
    - With the verifier: `accuracy_delta`, the gain in verifier accuracy, with a paired 95% bootstrap interval
      (`accuracy_delta_ci_low`/`_high`): the per-prompt differences are resampled, prompts being shared.
    """
    def rewards(prompts):
        return [[c["reward"] for c in cs] for cs in prompts]

    scores = prompt_win_scores(rewards(model_prompts), rewards(baseline_prompts))
    low, high = bootstrap_interval(scores, seed=seed)
    flat = [r for rs in rewards(model_prompts) for r in rs]
    flat_baseline = [r for rs in rewards(baseline_prompts) for r in rs]
    result = {
        "win_rate": statistics.fmean(scores),
        "ci_low": low,
        "ci_high": high,
        "mean_reward_delta": statistics.fmean(flat) - statistics.fmean(flat_baseline),
    }
    if "verdict" in model_prompts[0][0]:
        deltas = [ours - theirs for ours, theirs in zip(prompt_shares(model_prompts, "correct"),
                                                         prompt_shares(baseline_prompts, "correct"), strict=True)]
        low, high = bootstrap_interval(deltas, seed=seed)
        result.update(accuracy_delta=statistics.fmean(deltas), accuracy_delta_ci_low=low, accuracy_delta_ci_high=high)
    return result


################
# Prompts, generation, scoring
################


ROW = "_evaluation_row"  # the dataset row number of a prompt, carried through the length filter


def held_out_prompts(rows, tokenizer, train_samples, max_prompt_length, system_prompt=None):
    """(prompt rows, their dataset row numbers, how many were dropped as over-long): the rows after the first
    `train_samples` (the rows training used), as `build_prompt_dataset` makes them. A prompt keeps the number of
    its row: counting after the filter would shift every number past a dropped prompt."""
    from rlhf.data import build_prompt_dataset

    held_out = rows.select(range(train_samples, len(rows)))
    held_out = held_out.add_column(ROW, list(range(train_samples, len(rows))))
    prompts, _, dropped = build_prompt_dataset(held_out, tokenizer, max_prompt_length, system_prompt)
    return prompts.remove_columns(ROW), prompts[ROW], dropped


def draw_prompts(rows, row_numbers, num_prompts, seed):
    """(picked rows, their row numbers): `num_prompts` of `rows` drawn (seeded), in their order; all of them when
    there are fewer. `rows` are prompt rows (a `prompt` column plus the dataset's others)."""
    picked = sorted(random.Random(seed).sample(range(len(rows)), min(num_prompts, len(rows))))
    return [rows[i] for i in picked], [row_numbers[i] for i in picked]


def generate(model, tokenizer, prompts, num_completions, max_new_tokens, temperature, top_p, batch_size, seed,
             progress=None, stop=None):
    """Sample `num_completions` completions per prompt (chat-templated conversations), batched.

    Returns, per prompt, a list of dicts with `text`, `num_tokens` and `ended_with_eos`. The RNG is seeded once
    before the first batch, and batches always hold the same prompts in the same order, so every model
    evaluated with the same arguments draws from the same random stream. `stop` (a `StopOnSignal`) is checked
    after each batch.
    """
    import torch

    from rlhf.data import render_prompt

    texts = [render_prompt(tokenizer, p) for p in prompts]
    jobs = [(i, text) for i, text in enumerate(texts) for _ in range(num_completions)]
    results = [[] for _ in prompts]
    eos_id = tokenizer.eos_token_id
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    model.eval()
    for start in range(0, len(jobs), batch_size):
        batch = jobs[start : start + batch_size]
        inputs = tokenizer([text for _, text in batch], return_tensors="pt", padding=True, padding_side="left",
                           add_special_tokens=False).to(device)
        with torch.inference_mode():
            output = model.generate(**inputs, do_sample=True, temperature=temperature, top_p=top_p,
                                    max_new_tokens=max_new_tokens, eos_token_id=eos_id,
                                    pad_token_id=tokenizer.pad_token_id)
        for (prompt_index, _), ids in zip(batch, output[:, inputs["input_ids"].shape[1] :].tolist()):
            ended = eos_id in ids
            ids = ids[: ids.index(eos_id) + 1] if ended else ids
            results[prompt_index].append({
                "text": tokenizer.decode(ids, skip_special_tokens=True).strip(),
                "num_tokens": len(ids),
                "ended_with_eos": ended,
            })
        if progress is not None:
            progress.update(len(batch))
        if stop is not None:
            stop.check()
    return results


def score(funcs, weights, rows, completions):
    """Give every completion its `rewards` per function, their weighted sum `reward`, and its `rank` among the
    completions of its prompt; with the math verifier (`boxed_answer`), its `verdict` too."""
    flat = [(row, c) for row, cs in zip(rows, completions) for c in cs]
    columns = {key: [row[key] for row, _ in flat] for key in rows[0] if key != "prompt"}
    prompts = [row["prompt"] for row, _ in flat]
    messages = [[{"role": "assistant", "content": c["text"]}] for _, c in flat]
    per_func = {func.__name__: func(prompts=prompts, completions=messages, **columns) for func in funcs}
    verifier = next((getattr(func, "func", func) for func in funcs if func.__name__ == "boxed_answer"), None)
    for i, (_, completion) in enumerate(flat):
        completion["rewards"] = {name: values[i] for name, values in per_func.items()}
        completion["reward"] = sum(w * values[i] for w, values in zip(weights, per_func.values()))
        if verifier is not None:
            completion["verdict"] = verifier.last_verdicts[i]
    for cs in completions:
        for completion, rank in zip(cs, rank_labels([c["reward"] for c in cs])):
            completion["rank"] = rank


def interval_bound(value, reference, digits=2, percent=False, sign=False):
    """An interval's bound to `digits` decimals (of a percentage with `percent`), with more (up to 5) while it would
    print as `reference` without being it: a win rate's lower bound 0.504 prints 0.504, not 0.50, which would read
    as touching 0.5; a gain's reference is 0."""
    scale = 100 if percent else 1
    while digits < 5 and value != reference and round(value * scale, digits) == round(reference * scale, digits):
        digits += 1
    return f"{value:{'+' if sign else ''}.{digits}{'%' if percent else 'f'}}"


def win_interval(low, high, separator=", "):
    """A win rate's interval, its bounds told apart from 0.5."""
    return f"{interval_bound(low, 0.5)}{separator}{interval_bound(high, 0.5)}"


def gain_interval(low, high, separator=", "):
    """An accuracy gain's interval in points of percent, its bounds told apart from 0."""
    low, high = (interval_bound(bound, 0, 1, percent=True, sign=True) for bound in (low, high))
    return f"{low}{separator}{high}"


def format_table(results, comparison):
    """The terminal summary of an evaluation: one line per model, then the verifier's figures when it scored."""
    wins = [None, *comparison]  # by position: the same model may be given twice (a check that it ties)
    width = max([len("model"), *(len(r["model_path"]) for r in results)])  # whole names: their ends differ
    lines = [f"\n{'model':<{width}} {'reward mean±std':>16} {'EOS':>5} {'tokens':>7} {'corr(len)':>9}  "
             "win rate vs baseline"]
    for r, c in zip(results, wins):
        s = r["summary"]
        corr = "n/a" if s["reward_length_correlation"] is None else f"{s['reward_length_correlation']:+.2f}"
        win = "(baseline)" if c is None else (
            f"{c['win_rate']:.2f} [{win_interval(c['ci_low'], c['ci_high'])}]  Δreward {c['mean_reward_delta']:+.3f}")
        lines.append(f"{r['model_path']:<{width}} {s['mean_reward']:>8.3f}±{s['std_reward']:<7.3f} "
                     f"{s['eos_rate']:>5.0%} {s['mean_length']:>7.1f} {corr:>9}  {win}")
    if results and "verifier_accuracy" in results[0]["summary"]:
        lines.append(f"\n{'model':<{width}} {'boxed':>6} {'accuracy [95% CI]':>20} {'timeouts':>9}  "
                     "accuracy gain vs baseline")
        for r, c in zip(results, wins):
            s = r["summary"]
            gain = "(baseline)" if c is None else (
                f"{c['accuracy_delta']:+.1%} "
                f"[{gain_interval(c['accuracy_delta_ci_low'], c['accuracy_delta_ci_high'])}]")
            accuracy = (f"{s['verifier_accuracy']:.1%} [{s['verifier_accuracy_ci_low']:.0%}, "
                        f"{s['verifier_accuracy_ci_high']:.0%}]")
            lines.append(f"{r['model_path']:<{width}} {s['format_rate']:>6.0%} {accuracy:>20} "
                         f"{s['verifier_timeouts']:>9}  {gain}")
    return "\n".join(lines)


################
# What scored, where the report goes, stopping early
################


def scoring_record(rewards, weights, reward_model_dtype):
    """What scored the completions: the reward functions and their weights, the reward model (path, and the dtype
    it loaded in), the verifier's settings; the report records it beside the models and sampling settings."""
    from rlhf import verifier

    record = {"reward_funcs": list(rewards.reward_funcs), "reward_weights": list(weights)}
    if "reward_model" in rewards.reward_funcs:
        record["reward_model"] = {"path": rewards.reward_model_name_or_path, "dtype": reward_model_dtype,
                                  "reward_model_dtype": rewards.reward_model_dtype}
    if "boxed_answer" in rewards.reward_funcs:
        correct, wrong, missing = rewards.boxed_rewards
        record["boxed_answer"] = {"correct": correct, "wrong": wrong, "missing": missing, "timeout": wrong,
                                  "time_limit_s": verifier.TIME_LIMIT, "max_answer_chars": verifier.MAX_ANSWER_CHARS}
    return record


def check_writable(output_file):
    """Refuse, before any model loads, an `--output_file` the report could not be written to (found out only at
    the end, it would throw the whole evaluation away), or that is a file of the user's other than an earlier
    report (replaced, it would be lost). Missing folders are fine: they are made when it is written."""
    path = Path(output_file).expanduser()
    if path.is_dir():
        raise UserError(f"--output_file {output_file} is a folder; give a file path, e.g. "
                        f"{path / 'evaluation_results.json'}")
    if path.exists() and not is_report(path):
        raise UserError(f"--output_file {output_file} exists and is not an evaluation report; it is kept: give "
                        "another path, or delete it first if it may go")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"cannot write --output_file {output_file}: {folder} is a file, not a folder; pick another "
                        "path")
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write_test_")
    except OSError as error:
        raise UserError(f"cannot write --output_file {output_file} ({error.strerror} in {folder}); pick a writable "
                        "path or make that folder writable") from None
    os.close(handle)
    os.unlink(probe)


def interrupted_report(output_file, config):
    """The report in `output_file` when an interrupted run with the same settings (`config`, as the report records
    it) left it unfinished: its finished models need not be generated again. Else None."""
    path = Path(output_file).expanduser()
    if not is_report(path):
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    same = report["config"] == json.loads(json.dumps(config, default=str))
    return report if same and not report["complete"] else None


def is_report(path):
    """True when `path` holds an evaluation report (an earlier run's, which a new one replaces)."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and {"complete", "config", "models", "comparison"} <= report.keys()


class ReportNotWritten(UserError):
    """The report could not be written where asked; the message says where it went instead."""


def save_report(output_file, report):
    """Write the report atomically (a crash never leaves half a file). Should writing fail after all (a full disk),
    the results go to the temporary folder instead and the error says where: they are never lost."""
    from rlhf.files import write_json

    path = Path(output_file).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, report)
    except OSError as error:
        handle, fallback = tempfile.mkstemp(prefix=f"{path.stem}_", suffix=".json")
        os.close(handle)
        write_json(Path(fallback), report)
        raise ReportNotWritten(f"cannot write --output_file {output_file} ({error.strerror or error}); the results "
                               f"were saved to {fallback} instead") from None


class Interrupted(BaseException):
    """SIGINT (Ctrl-C) or SIGTERM during the evaluation: the models already finished are saved, then exit 130.

    A BaseException, like KeyboardInterrupt, so that no library's `except Exception` swallows it."""

    def __init__(self, name):
        super().__init__(f"{name} received")
        self.name = name


class StopOnSignal:
    """While active, the first SIGINT or SIGTERM raises `Interrupted` where the evaluation is, so that what is
    finished can be saved; a second one aborts at once (KeyboardInterrupt).

    Python drops (and prints) an exception raised inside a finalizer (`__del__`, or a weakref callback such as
    `WeakValueDictionary`'s `remove`, run whenever objects are freed): a signal landing there is only recorded, and
    `check()`, called between batches and models, raises it.
    """

    def __init__(self):
        self.received = None
        self.previous = {}

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc_info):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        if self.received:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        while frame is not None and not _finalizer(frame.f_code):
            frame = frame.f_back
        if frame is None:  # not within a finalizer
            raise Interrupted(self.received)

    def check(self):
        if self.received:
            raise Interrupted(self.received)


def _finalizer(code):
    """Whether `code` may run as a finalizer, where Python prints and drops an exception: `__del__`, or anything in
    weakref.py (its callbacks; deferring a signal that lands in its other code only delays it to `check()`)."""
    return code.co_name == "__del__" or Path(code.co_filename).name == "weakref.py"
