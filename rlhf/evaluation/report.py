"""An evaluation's report: the terminal table, intervals printed so that they are read right, what scored the
completions, and the JSON file (checked writable before any model loads, written after each model, resumed).
"""

import json
import os
import tempfile
from pathlib import Path

from rlhf.errors import UserError


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


def win_figure(comparison):
    """A win rate and its interval, as the table prints them: `0.61 [0.52, 0.70]`."""
    return f"{comparison['win_rate']:.2f} [{win_interval(comparison['ci_low'], comparison['ci_high'])}]"


def disagreement(comparison):
    """The one line that says the judge and the reward read a model differently (`judge_agreement`): one interval
    shows a win and the other a loss, or the paired difference of the two win rates is shown; None where they agree.
    """
    judge = comparison.get("judge")
    if not judge or judge["agreement"] not in ("disagree", "differ"):
        return None
    if judge["agreement"] == "differ":
        lower = judge["difference"] < 0
        low, high = (interval_bound(judge[f"difference_ci_{end}"], 0, sign=True) for end in ("low", "high"))
        why = ("part of its win under the reward may be what the reward model pays rather than what it stands for"
               if lower else "the judge rates it better than the reward model does")
        return (f"difference: {comparison['model_path']}'s win rate under the judge ({win_figure(judge)}) is "
                f"{'lower' if lower else 'higher'} than under the reward ({win_figure(comparison)}) by "
                f"{abs(judge['difference']):.2f} (paired over prompts, judge - reward [{low}, {high}]): {why}; read "
                "its completions")
    reward_wins = comparison["ci_low"] > 0.5
    why = ("a win under the reward that a judge it never trained against sees as a loss: it may have learnt what the "
           "reward model pays rather than what it stands for" if reward_wins
           else "the reward and the judge disagree about which is better")
    return (f"disagreement: {comparison['model_path']} {'wins' if reward_wins else 'loses'} against the baseline "
            f"under the reward ({win_figure(comparison)}) and {'loses' if reward_wins else 'wins'} under the judge "
            f"({win_figure(judge)}): {why}; read its completions")


def format_table(results, comparison):
    """The terminal summary of an evaluation: one line per model, then the verifier's figures when it scored, then
    the judge's beside the reward's (and a line for each model they disagree about) when one judged."""
    wins = [None, *comparison]  # by position: the same model may be given twice (a check that it ties)
    width = max([len("model"), *(len(r["model_path"]) for r in results)])  # whole names: their ends differ
    lines = [f"\n{'model':<{width}} {'reward mean±std':>16} {'EOS':>5} {'tokens':>7} {'corr(len)':>9}  "
             "win rate vs baseline"]
    for r, c in zip(results, wins):
        s = r["summary"]
        corr = "n/a" if s["reward_length_correlation"] is None else f"{s['reward_length_correlation']:+.2f}"
        win = "(baseline)" if c is None else f"{win_figure(c)}  Δreward {c['mean_reward_delta']:+.3f}"
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
    if results and "judge" in results[0]["summary"]:
        lines.append(f"\n{'model':<{width}} {'judge mean±std':>16} {'corr(len)':>9}  {'win rate: reward':<22} "
                     "win rate: judge")
        for r, c in zip(results, wins):
            s = r["summary"]["judge"]
            corr = "n/a" if s["reward_length_correlation"] is None else f"{s['reward_length_correlation']:+.2f}"
            win = "(baseline)" if c is None else f"{win_figure(c):<22} {win_figure(c['judge'])}"
            lines.append(f"{r['model_path']:<{width}} {s['mean_reward']:>8.3f}±{s['std_reward']:<7.3f} {corr:>9}  "
                         f"{win}")
        lines += [line for line in map(disagreement, comparison) if line]
    return "\n".join(lines)


def scoring_record(rewards, weights, reward_model_dtype, judge=None):
    """What scored the completions: the reward functions and their weights, the reward model (path, and the dtype
    it loaded in), the verifier's settings, the judge; the report records it beside the models and sampling
    settings."""
    from rlhf.rewards import verifier

    record = {"reward_funcs": list(rewards.reward_funcs), "reward_weights": list(weights)}
    if "reward_model" in rewards.reward_funcs:
        record["reward_model"] = {"path": rewards.reward_model_name_or_path, "dtype": reward_model_dtype,
                                  "reward_model_dtype": rewards.reward_model_dtype}
    if "boxed_answer" in rewards.reward_funcs:
        correct, wrong, missing, unboxed_correct = rewards.boxed_rewards
        record["boxed_answer"] = {"correct": correct, "wrong": wrong, "missing": missing, "timeout": wrong,
                                  "cut_off": min(wrong, missing), "unboxed_correct": unboxed_correct,
                                  "time_limit_s": verifier.TIME_LIMIT, "max_answer_chars": verifier.MAX_ANSWER_CHARS}
    if judge is not None:
        record["judge"] = {"path": judge, "dtype": reward_model_dtype}
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
    report = _read_report(Path(output_file).expanduser())
    same = report is not None and report["config"] == json.loads(json.dumps(config, default=str))
    return report if same and not report["complete"] else None


def is_report(path):
    """True when `path` holds an evaluation report (an earlier run's, which a new one replaces)."""
    return _read_report(path) is not None


def _read_report(path):
    """The evaluation report in `path`, or None where there is none (no file, not JSON, not a report)."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    is_one = isinstance(report, dict) and {"complete", "config", "models", "comparison"} <= report.keys()
    return report if is_one else None


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
