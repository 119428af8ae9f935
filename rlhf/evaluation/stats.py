"""The statistics of this package, pure functions of lists of numbers (unit-tested on their own): summaries of a
model's completions, comparisons with a baseline (win rate under the reward and under a judge, verifier accuracy
gain) with bootstrap intervals over prompts, whether the judge agrees, and a correlation (the evaluation's
reward-length figure, the health check's length hacking).

The prompt is the unit every interval resamples: the completions of one prompt are not independent of each other.
"""

import math
import random
import statistics

TIE_TOLERANCE = 1e-6


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


def correlation(xs, ys):
    """Pearson correlation of two equal-length sequences; None when either does not vary (or fewer than 3 points)."""
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    var_x, var_y = sum((x - mean_x) ** 2 for x in xs), sum((y - mean_y) ** 2 for y in ys)
    if var_x <= 0 or var_y <= 0:
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
    `ended_with_eos`, `verdict` when the math verifier scored them, `judge_reward` when a judge did)."""
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
        "reward_length_correlation": correlation(lengths, rewards),
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
    if "judge_reward" in completions[0]:
        judged = [c["judge_reward"] for c in completions]
        summary["judge"] = {"mean_reward": statistics.fmean(judged), "std_reward": statistics.pstdev(judged),
                            "reward_length_correlation": correlation(lengths, judged)}
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
    - With a judge (`judge_reward`): `judge`, its win rate, interval and reward delta alike; `difference`, the judge's
      win rate minus the reward's with a paired 95% interval over prompts (`difference_ci_low`/`_high`: both scored
      the same completions); and its `agreement` with the reward's (`judge_agreement`).
    """
    result = win_rate(model_prompts, baseline_prompts, "reward", seed)
    if "verdict" in model_prompts[0][0]:
        deltas = [ours - theirs for ours, theirs in zip(prompt_shares(model_prompts, "correct"),
                                                         prompt_shares(baseline_prompts, "correct"), strict=True)]
        low, high = bootstrap_interval(deltas, seed=seed)
        result.update(accuracy_delta=statistics.fmean(deltas), accuracy_delta_ci_low=low, accuracy_delta_ci_high=high)
    if "judge_reward" in model_prompts[0][0]:
        judge = win_rate(model_prompts, baseline_prompts, "judge_reward", seed)
        differences = [judged - rewarded for judged, rewarded in zip(
            win_scores(model_prompts, baseline_prompts, "judge_reward"),
            win_scores(model_prompts, baseline_prompts, "reward"), strict=True)]
        low, high = bootstrap_interval(differences, seed=seed)
        judge.update(difference=statistics.fmean(differences), difference_ci_low=low, difference_ci_high=high)
        result["judge"] = {**judge, "agreement": judge_agreement(result, judge)}
    return result


def win_scores(model_prompts, baseline_prompts, key):
    """Per prompt, the share of (model, baseline) completion pairs the model wins under the score `key`."""
    def scores(prompts):
        return [[c[key] for c in cs] for cs in prompts]

    return prompt_win_scores(scores(model_prompts), scores(baseline_prompts))


def win_rate(model_prompts, baseline_prompts, key="reward", seed=0):
    """`win_rate` (ties half), its 95% bootstrap interval over prompts (`ci_low`, `ci_high`) and `mean_reward_delta`
    of a model against the baseline under the score `key` of each completion (`reward`, or the judge's)."""
    scores = win_scores(model_prompts, baseline_prompts, key)
    low, high = bootstrap_interval(scores, seed=seed)
    flat = [c[key] for cs in model_prompts for c in cs]
    flat_baseline = [c[key] for cs in baseline_prompts for c in cs]
    return {
        "win_rate": statistics.fmean(scores),
        "ci_low": low,
        "ci_high": high,
        "mean_reward_delta": statistics.fmean(flat) - statistics.fmean(flat_baseline),
    }


def interval_verdict(low, high):
    """What a win rate's interval shows: "win" when it lies wholly above 0.5, "loss" wholly below, else "not shown"
    (an interval that touches 0.5 shows nothing)."""
    if low > 0.5:
        return "win"
    if high < 0.5:
        return "loss"
    return "not shown"


def judge_agreement(reward, judge):
    """How the judge's win rate reads beside the reward's (each a dict with `ci_low` and `ci_high`; the judge's also
    with the paired interval of its difference, `difference_ci_low`/`_high`): "disagree" when one interval shows a win
    and the other a loss; "differ" when the paired difference is shown (its interval clears 0: a win of 0.75 under the
    reward beside 0.52 under the judge, whose two intervals alone would both read as one thing or nothing); else
    "agree"."""
    verdicts = {interval_verdict(reward["ci_low"], reward["ci_high"]),
                interval_verdict(judge["ci_low"], judge["ci_high"])}
    if verdicts == {"win", "loss"}:
        return "disagree"
    return "differ" if judge["difference_ci_low"] > 0 or judge["difference_ci_high"] < 0 else "agree"
