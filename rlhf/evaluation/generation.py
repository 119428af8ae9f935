"""Evaluation's work on models: held-out prompts, sampling completions, scoring (and judging) and ranking them.

The statistics over the scored completions are in `rlhf.evaluation.stats`, the report (table, JSON) in
`rlhf.evaluation.report`.
"""

import random

from rlhf.evaluation.stats import rank_labels

ROW = "_evaluation_row"  # the dataset row number of a prompt, carried through the length filter


def held_out_prompts(rows, tokenizer, train_samples, max_prompt_length, system_prompt=None, room=None,
                     append_system_prompt=None):
    """(prompt rows, their dataset row numbers, how many were dropped as over-long): the rows after the first
    `train_samples` (the rows training used), as `build_prompt_dataset` makes them. A prompt keeps the number of
    its row: counting after the filter would shift every number past a dropped prompt."""
    from rlhf.data import build_prompt_dataset

    held_out = rows.select(range(train_samples, len(rows)))
    held_out = held_out.add_column(ROW, list(range(train_samples, len(rows))))
    prompts, _, dropped = build_prompt_dataset(held_out, tokenizer, max_prompt_length, system_prompt, room,
                                               append_system_prompt)
    return prompts.remove_columns(ROW), prompts[ROW], dropped


def draw_prompts(rows, row_numbers, num_prompts, seed):
    """(picked rows, their row numbers): `num_prompts` of `rows` drawn (seeded), in their order; all of them when
    there are fewer. `rows` are prompt rows (a `prompt` column plus the dataset's others)."""
    picked = sorted(random.Random(seed).sample(range(len(rows)), min(num_prompts, len(rows))))
    return [rows[i] for i in picked], [row_numbers[i] for i in picked]


def generate(model, tokenizer, prompts, num_completions, max_new_tokens, temperature, top_p, batch_size, seed,
             progress=None, stop=None, stop_token_ids=None):
    """Sample `num_completions` completions per prompt (chat-templated conversations), batched.

    Returns, per prompt, a list of dicts with `text`, `num_tokens` and `ended_with_eos` (whether it ended at one of
    `stop_token_ids`; by default the model's, `rlhf.models.stop_token_ids`, as training stops). The RNG is seeded
    once before the first batch, and batches always hold the same prompts in the same order, so every model
    evaluated with the same arguments draws from the same random stream. `stop` (a `StopOnSignal`) is checked
    after each batch.
    """
    import torch

    from rlhf.data import render_prompt
    from rlhf.models import flags_sampling
    from rlhf.models import stop_token_ids as run_stop_token_ids

    texts = [render_prompt(tokenizer, p) for p in prompts]
    jobs = [(i, text) for i, text in enumerate(texts) for _ in range(num_completions)]
    results = [[] for _ in prompts]
    stops = run_stop_token_ids(tokenizer, model) if stop_token_ids is None else tuple(stop_token_ids)
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    model.eval()
    for start in range(0, len(jobs), batch_size):
        batch = jobs[start : start + batch_size]
        inputs = tokenizer([text for _, text in batch], return_tensors="pt", padding=True, padding_side="left",
                           add_special_tokens=False).to(device)
        with torch.inference_mode():
            output = model.generate(**inputs, **flags_sampling(model.generation_config, temperature=temperature,
                                                               top_p=top_p),
                                    max_new_tokens=max_new_tokens, eos_token_id=list(stops) or None,
                                    pad_token_id=tokenizer.pad_token_id)
        for (prompt_index, _), ids in zip(batch, output[:, inputs["input_ids"].shape[1] :].tolist()):
            end = next((i for i, token in enumerate(ids) if token in stops), None)  # the first stop token
            ended = end is not None
            ids = ids[: end + 1] if ended else ids
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
    ended = [c["ended_with_eos"] for _, c in flat]  # boxed_answer: a completion cut off earns less
    per_func = {func.__name__: func(prompts=prompts, completions=messages, ended=ended, **columns) for func in funcs}
    verifier = next((getattr(func, "func", func) for func in funcs if func.__name__ == "boxed_answer"), None)
    for i, (_, completion) in enumerate(flat):
        completion["rewards"] = {name: values[i] for name, values in per_func.items()}
        completion["reward"] = sum(w * values[i] for w, values in zip(weights, per_func.values()))
        if verifier is not None:
            completion["verdict"] = verifier.last_verdicts[i]
    for cs in completions:
        for completion, rank in zip(cs, rank_labels([c["reward"] for c in cs])):
            completion["rank"] = rank


def judge(scorer, rows, completions):
    """Give every completion its `judge_reward`: the judge's score of its prompt and text (`scorer`, a
    `RewardModelScorer`, which renders them with the judge's own tokenizer and chat template)."""
    flat = [(row, c) for row, cs in zip(rows, completions) for c in cs]
    messages = [[{"role": "assistant", "content": c["text"]}] for _, c in flat]
    scores = scorer([row["prompt"] for row, _ in flat], messages)
    for (_, completion), value in zip(flat, scores, strict=True):
        completion["judge_reward"] = value
