"""Evaluation: sampling completions, ranking them, summary statistics, win rate with a bootstrap interval.

The statistics are pure functions of lists of numbers, so they are unit-tested on their own.
"""

import math
import random
import statistics

RANKS = ("BEST", "MEDIUM", "WORST")
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


def summarize(completions):
    """Summary of one model's completions (dicts with `reward`, `num_tokens`, `ended_with_eos`)."""
    rewards = [c["reward"] for c in completions]
    lengths = [c["num_tokens"] for c in completions]
    return {
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


def prompt_win_scores(model_rewards, baseline_rewards):
    """Per prompt, the share of (model, baseline) completion pairs the model wins; a tie counts half.

    Both arguments are lists (one entry per prompt) of the rewards of that prompt's completions.
    """
    scores = []
    for ours, theirs in zip(model_rewards, baseline_rewards, strict=True):
        pairs = [(a, b) for a in ours for b in theirs]
        scores.append(sum(0.5 if abs(a - b) <= TIE_TOLERANCE else float(a > b) for a, b in pairs) / len(pairs))
    return scores


def bootstrap_interval(values, num_resamples=2000, confidence=0.95, seed=0):
    """Percentile bootstrap interval of the mean of `values`, resampling them with replacement."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(num_resamples))
    tail = (1.0 - confidence) / 2.0
    low = means[int(math.floor(tail * (num_resamples - 1)))]
    high = means[int(math.ceil((1.0 - tail) * (num_resamples - 1)))]
    return low, high


def compare(model_rewards, baseline_rewards, seed=0):
    """Win rate of a model against the baseline, its 95% bootstrap interval over prompts, and the reward delta.

    The prompt is the unit that is resampled: completions of one prompt are not independent of each other.
    """
    scores = prompt_win_scores(model_rewards, baseline_rewards)
    low, high = bootstrap_interval(scores, seed=seed)
    flat = [r for rewards in model_rewards for r in rewards]
    flat_baseline = [r for rewards in baseline_rewards for r in rewards]
    return {
        "win_rate": statistics.fmean(scores),
        "ci_low": low,
        "ci_high": high,
        "mean_reward_delta": statistics.fmean(flat) - statistics.fmean(flat_baseline),
    }


def generate(model, tokenizer, prompts, num_completions, max_new_tokens, temperature, top_p, batch_size, seed,
             progress=None):
    """Sample `num_completions` completions per prompt (chat-templated conversations), batched.

    Returns, per prompt, a list of dicts with `text`, `num_tokens` and `ended_with_eos`. The RNG is seeded once
    before the first batch, and batches always hold the same prompts in the same order, so every model
    evaluated with the same arguments draws from the same random stream.
    """
    import torch

    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
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
    return results
