"""Benchmark GRPO and PPO, and run TRL's own `trl grpo` at identical settings for the wall-time ratio.

A tool, not a test: it prints figures and writes them to a JSON file. For each run it reports seconds per
optimizer step (median over the measured steps, after warm-up steps), completion tokens per second, peak memory
(RSS; peak CUDA memory on a GPU) and the extrapolated time of a 10,000-prompt epoch; then the reward model's
scoring throughput, and ours-vs-TRL ratios.

    python bench/benchmark.py --model tiny                          # tiny random models, ~1.5 minutes: the wiring
    python bench/benchmark.py --model bundled --max_completion_length 64 --steps 3   # SmolLM2-135M on CPU
    python bench/benchmark.py --model bundled --runs grpo trl_grpo grpo_lora grpo_vllm grpo_vllm_lora ppo  # GPU

Runs: grpo, grpo_lora, grpo_vllm, grpo_vllm_lora (train_grpo.py), trl_grpo, trl_grpo_lora (`trl grpo`, TRL's
CLI), ppo, ppo_lora (train_ppo.py). Every GRPO run gets the same flags: the same prompts file, seed, group size,
batch, completion length, sampling, beta, learning rate and schedule, precision and gradient checkpointing.
Without `--reward_model`, the reward model is the policy's backbone with an untrained score head: its scores mean
nothing, its cost is that of a real one. Each step is timed from the TensorBoard log (`logging_steps 1`).
Peak CUDA memory is what PyTorch's allocator saw (`torch.cuda.max_memory_allocated`, and `..._reserved`);
memory vLLM takes through its own allocator is not in it, so check vLLM runs with nvidia-smi too.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROBE = Path(__file__).resolve().parent / "probe"  # sitecustomize.py: peak memory per process
RUNS = ("grpo", "grpo_lora", "grpo_vllm", "grpo_vllm_lora", "trl_grpo", "trl_grpo_lora", "ppo", "ppo_lora")
LORA = ["--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny, bundled (SmolLM2-135M-Instruct), or a path / Hub id")
    parser.add_argument("--reward_model", help="a reward model sharing the policy's tokenizer (default: see above)")
    parser.add_argument("--runs", nargs="+", choices=RUNS, help="default: grpo trl_grpo grpo_lora ppo")
    parser.add_argument("--steps", type=int, default=3, help="measured optimizer steps per run")
    parser.add_argument("--warmup_steps", type=int, default=1, help="steps run first and left out of the median")
    parser.add_argument("--repeats", type=int, default=1, help="run the list this many times, in turn")
    parser.add_argument("--prompts_per_step", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=4, help="GRPO group size")
    parser.add_argument("--per_device_train_batch_size", type=int, default=16, help="completions per pass")
    parser.add_argument("--max_completion_length", type=int, default=256)
    parser.add_argument("--gradient_checkpointing", choices=("true", "false"), default="true")
    parser.add_argument("--bf16", choices=("auto", "true", "false"), default="auto", help="auto: on with a CUDA GPU")
    parser.add_argument("--dtype", default="float32", help="dtype the weights load in")
    parser.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.3)
    parser.add_argument("--epoch_prompts", type=int, default=10_000, help="prompts of the extrapolated epoch")
    parser.add_argument("--work_dir", help="where models, prompts and runs go (default: a temporary folder)")
    parser.add_argument("--output", default="bench_results.json", help="JSON file for the figures")
    parser.add_argument("--threads", type=int, help="CPU threads of every run (default: what torch uses here)")
    args = parser.parse_args(argv)
    args.runs = args.runs or ["grpo", "trl_grpo", "grpo_lora", "ppo"]
    if args.steps < 1 or args.warmup_steps < 1:
        parser.error("--steps and --warmup_steps must be >= 1 (a step is timed from the previous one's end)")
    if (args.prompts_per_step * args.num_generations) % args.per_device_train_batch_size:
        parser.error("--per_device_train_batch_size must divide --prompts_per_step x --num_generations")
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    args.threads = args.threads or torch.get_num_threads()
    bf16 = {"auto": cuda, "true": True, "false": False}[args.bf16]
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rlhf_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    policy, reward_model = prepare_models(args, work)
    completions_per_step = args.prompts_per_step * args.num_generations
    total_steps = args.warmup_steps + args.steps
    prompts = write_prompts(work / "prompts", total_steps * completions_per_step)
    device = torch.cuda.get_device_name() if cuda else f"CPU ({os.cpu_count()} cores, {args.threads} threads per run)"
    print(f"benchmark on {device}; policy {policy}; {args.prompts_per_step} prompts x {args.num_generations} "
          f"completions = {completions_per_step} per step, up to {args.max_completion_length} tokens, "
          f"{args.warmup_steps} warm-up + {args.steps} measured steps, bf16={bf16}", flush=True)

    common = ["--model_name_or_path", policy, "--dataset_name", prompts, "--max_steps", total_steps,
              "--learning_rate", "5e-6", "--lr_scheduler_type", "cosine", "--logging_steps", "1",
              "--save_strategy", "no", "--report_to", "tensorboard", "--seed", "42", "--bf16", bf16,
              "--gradient_checkpointing", args.gradient_checkpointing, "--dtype", args.dtype,
              "--max_completion_length", args.max_completion_length]
    grpo_flags = [*common, "--num_generations", args.num_generations, "--temperature", "0.7", "--top_p", "0.9",
                  "--beta", "0.04", "--per_device_train_batch_size", args.per_device_train_batch_size,
                  "--gradient_accumulation_steps", completions_per_step // args.per_device_train_batch_size]
    results = []
    for repeat in range(args.repeats):
        for name in args.runs:
            command = build_command(name, args, grpo_flags, common, policy, reward_model, completions_per_step)
            result = measure(name, command, work / f"{name}_{repeat}", completions_per_step, args)
            result["repeat"] = repeat
            results.append(result)
            print(format_row(result), flush=True)

    # The frozen reward model in float32 (the default, like the policy) and in bfloat16 (half the memory).
    scoring = {dtype: scoring_throughput(reward_model, args.max_completion_length, dtype)
               for dtype in ("float32", "bfloat16")}
    report = summarize(results, scoring, args, device, bf16)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.output}; runs kept in {work}")


################
# Setup
################


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

        policy = ensure_bundled(ROOT / BUNDLED_NAME)
    if args.reward_model:
        return policy, args.reward_model
    reward_model = work / "reward_model_untrained_head"
    if not (reward_model / "config.json").exists():
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from rlhf.reward import ensure_distinct_pad

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


def build_command(name, args, grpo_flags, common, policy, reward_model, completions_per_step):
    """The command line of one run."""
    lora = name.endswith("_lora")
    if name.startswith("trl_grpo"):
        # `python -m trl.cli.main` is the `trl` command itself, found the same way on Linux and Windows.
        command = [sys.executable, "-m", "trl.cli.main", "grpo", *grpo_flags, "--reward_model_name_or_path",
                   reward_model, *(["--use_peft", *LORA] if lora else [])]
    elif name.startswith("grpo"):
        command = [sys.executable, str(ROOT / "train_grpo.py"), *grpo_flags, "--reward_model_path", reward_model,
                   "--prompts_per_step", "0", *(["--use_lora", *LORA] if lora else [])]
        if "_vllm" in name:
            command += ["--use_vllm", "--vllm_mode", "colocate",
                        "--vllm_gpu_memory_utilization", args.vllm_gpu_memory_utilization]
    else:  # ppo: one completion per prompt, so a batch of `completions_per_step` prompts is the same generation work
        command = [sys.executable, str(ROOT / "train_ppo.py"), *common, "--reward_model_path", reward_model,
                   "--total_episodes", (args.warmup_steps + args.steps) * completions_per_step,
                   "--per_device_train_batch_size", completions_per_step, "--gradient_accumulation_steps", "1",
                   "--num_sample_generations", "0", *(["--use_lora", *LORA] if lora else [])]
    return [str(part) for part in command]


################
# Measuring one run
################


def measure(name, command, run_dir, completions_per_step, args):
    stats_dir = run_dir / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    output_dir = run_dir / "output"
    command = [*command, "--output_dir", str(output_dir)]
    # The same CPU thread count for every run: `trl grpo` goes through `accelerate launch`, which otherwise sets
    # OMP_NUM_THREADS=1 for the training process on a machine without a GPU.
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "BENCH_STATS_DIR": str(stats_dir),
           "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(PROBE), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    with open(run_dir / "log.txt", "w", encoding="utf-8") as log:
        returncode = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    result = {"run": name, "command": command, "returncode": returncode, "wall_s": round(wall, 1)}
    if returncode != 0:
        tail = (run_dir / "log.txt").read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
        print(f"{name}: failed (exit code {returncode}); last lines of {run_dir / 'log.txt'}:\n  " + "\n  ".join(tail))
        return result

    processes = [json.loads(path.read_text()) for path in stats_dir.glob("*.json")]
    steps = logged_steps(output_dir)
    measured = [step for step in steps if step["step"] > args.warmup_steps]
    durations = [step["seconds"] for step in measured]
    tokens = [step["mean_length"] * completions_per_step for step in measured]
    seconds_per_step = statistics.median(durations)
    prompts_per_step = completions_per_step if name.startswith("ppo") else args.prompts_per_step
    result.update(
        steps_logged=len(steps),
        seconds_per_step=round(seconds_per_step, 3),
        step_seconds=[round(d, 3) for d in durations],
        completion_tokens_per_s=round(sum(tokens) / sum(durations), 1),
        mean_completion_tokens=round(sum(tokens) / len(tokens) / completions_per_step, 1),
        peak_rss_gb=_gb(max((p["peak_rss_bytes"] or 0) for p in processes)),
        peak_cuda_allocated_gb=_gb(max((p["cuda_max_allocated_bytes"] or 0) for p in processes)),
        peak_cuda_reserved_gb=_gb(max((p["cuda_max_reserved_bytes"] or 0) for p in processes)),
        epoch_hours=round(seconds_per_step * args.epoch_prompts / prompts_per_step / 3600, 2),
    )
    return result


def logged_steps(output_dir):
    """Per optimizer step, from the TensorBoard log: how long it took and its mean completion length.

    A step's duration is the time between its log entry and the previous step's (all entries are written at the
    end of their step), so the first step, which also holds the start-up, has none and is never measured.
    """
    from rlhf.metrics import event_files, read_scalars

    scalars = read_scalars(event_files(output_dir))
    clock = scalars.get("train/loss") or scalars["train/loss/policy_avg"]
    lengths = scalars.get("train/completions/mean_length", {})
    steps = sorted(clock)
    return [{"step": step, "seconds": clock[step][0] - clock[prev][0], "mean_length": lengths.get(step, (0, None))[1]}
            for prev, step in zip(steps, steps[1:])]


def scoring_throughput(reward_model, completion_tokens, dtype, count=64, batch_size=16):
    """Sequences per second the reward model scores, on prompts with answers cut to `completion_tokens` tokens.

    The same `score_conversations` GRPO's reward function uses, at its batch size; best of 3 passes.
    """
    import torch

    from rlhf.data import to_conversation
    from rlhf.reward import load_reward_model, render_for_reward, score_conversations

    model, tokenizer = load_reward_model(str(reward_model), dtype)
    if torch.cuda.is_available():
        model = model.cuda()
    rows = shipped_rows()
    conversations = []
    for i in range(count):
        row = rows[i % len(rows)]
        long_answer = " ".join([row["chosen"]] * 8)
        answer_ids = tokenizer(long_answer, add_special_tokens=False, truncation=True, max_length=completion_tokens)
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
    return {"sequences": count, "mean_tokens": round(tokens / count, 1), "batch_size": batch_size,
            "sequences_per_s": round(count / best, 1), "tokens_per_s": round(tokens / best, 1)}


################
# Report
################


def _gb(value):
    return round(value / 1e9, 2) if value else None


def format_row(result):
    if result["returncode"] != 0:
        return f"{result['run']:<15} failed"
    memory = f"{result['peak_rss_gb']} GB RSS" if result["peak_rss_gb"] else "RSS n/a (Windows)"
    if result["peak_cuda_allocated_gb"]:
        memory += f", {result['peak_cuda_allocated_gb']} GB CUDA"
    return (f"{result['run']:<15} {result['seconds_per_step']:>8.2f} s/step  {result['completion_tokens_per_s']:>8.1f} "
            f"tok/s  {result['mean_completion_tokens']:>6.1f} tok/completion  {memory}  wall {result['wall_s']:.0f} s")


def summarize(results, scoring, args, device, bf16):
    ok = [r for r in results if r["returncode"] == 0]
    by_run = {}
    for result in ok:
        by_run.setdefault(result["run"], []).append(result)
    medians = {
        run: {
            "seconds_per_step": statistics.median(s for r in rs for s in r["step_seconds"]),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "completion_tokens_per_s": statistics.median(r["completion_tokens_per_s"] for r in rs),
            "epoch_hours": statistics.median(r["epoch_hours"] for r in rs),
        }
        for run, rs in by_run.items()
    }
    print()
    for dtype, figures in scoring.items():
        print(f"reward model scoring ({dtype}): {figures['sequences_per_s']} sequences/s ({figures['tokens_per_s']} "
              f"tokens/s), {figures['sequences']} sequences of ~{figures['mean_tokens']} tokens in batches of "
              f"{figures['batch_size']}")
    ratios = {}
    for ours, theirs in (("grpo", "trl_grpo"), ("grpo_lora", "trl_grpo_lora")):
        if ours in medians and theirs in medians:
            ratios[f"{ours}/{theirs}"] = {
                "seconds_per_step": round(medians[ours]["seconds_per_step"] / medians[theirs]["seconds_per_step"], 3),
                "wall": round(medians[ours]["wall_s"] / medians[theirs]["wall_s"], 3),
            }
            r = ratios[f"{ours}/{theirs}"]
            print(f"{ours} vs {theirs}: s/step ratio {r['seconds_per_step']:.2f}, whole-command wall ratio "
                  f"{r['wall']:.2f} (<= 1.0: ours costs no more)")
    for run, m in medians.items():
        print(f"{run}: {args.epoch_prompts:,}-prompt epoch ~ {m['epoch_hours']:.2f} h at the median "
              f"{m['seconds_per_step']:.2f} s/step")
    failed = [r["run"] for r in results if r["returncode"] != 0]
    if failed:
        print(f"failed runs: {', '.join(failed)} (see log.txt in their run folders)")
    return {"device": device, "bf16": bf16, "settings": vars(args), "results": results, "medians": medians,
            "ratios": ratios, "reward_model_scoring": scoring}


if __name__ == "__main__":
    main()
