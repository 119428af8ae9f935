"""bench/benchmark.py: the suites are what docs/performance.md says, the timing window is whole generation cycles,
and on tiny models every figure comes out (the figures themselves are not judged)."""

import json
import os
import re
import sys
import tempfile
import time

import pytest

from bench import benchmark, gpu_check
from bench.measure import run_until, whole_cycles
from bench.plan import RUNS, plan_run, run_flags
from conftest import ROOT, run_script

PATHS = {"policy": "P", "reward_model": "R", "prompts": "D"}
# The GPU check's test: the budget of each part it cuts short, just over the time a run needs left to start.
CUT_PART_S = gpu_check.START_S + 5


def flags_after(command, flag):
    """The values after `flag` in a command (several for a list flag), or None without it."""
    if flag not in command:
        return None
    rest = command[command.index(flag) + 1:]
    return rest[: next((i for i, part in enumerate(rest) if part.startswith("--")), len(rest))]


def readme_suites():
    """{suite: (runs, settings cell)} from the suites table of docs/performance.md."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `--suite (\w+)` \| ([^|]+) \| ([^|]+) \|", text, flags=re.MULTILINE)
    return {suite: (re.findall(r"`(\w+)`", runs), settings) for suite, runs, settings in rows}


@pytest.mark.parametrize("suite", ["gpu", "gpu_ppo", "cpu"])
def test_each_suite_runs_what_the_readme_says(suite):
    args = benchmark.parse_args(["--suite", suite])
    runs, settings = readme_suites()[suite]
    assert args.runs == runs == benchmark.SUITES[suite]["runs"]
    assert args.model == "bundled" and (args.prompts_per_step, args.num_generations) == (4, 4)
    assert f"up to {args.max_completion_length} tokens" in settings
    assert f"at least {args.steps} measured step" in settings
    # the GPU suites compare a pair each (ours and trl grpo; PPO's two generation chunks); the CPU suite runs the lot
    pairs = {"gpu": ["grpo_trl_settings", "trl_grpo"], "gpu_ppo": ["ppo_chunk16", "ppo_chunk64"]}
    assert pairs.get(suite, runs) == runs
    assert suite != "cpu" or {"grpo_trl_settings", "trl_grpo", "ppo"} <= set(runs)
    # A flag given on the command line still wins over the suite's.
    assert benchmark.parse_args(["--suite", suite, "--max_completion_length", "32"]).max_completion_length == 32


@pytest.mark.parametrize("cuda", [True, False])
def test_trl_settings_runs_share_trl_grpo_flags_and_ours_keep_the_package_defaults(cuda):
    args = benchmark.parse_args(["--suite", "gpu" if cuda else "cpu"])
    command = {name: run_flags(name, args, PATHS, cuda) for name in RUNS}
    ours, trl = command["grpo_trl_settings"], command["trl_grpo"]
    assert trl[1:4] == ["-m", "trl.cli.main", "grpo"] and ours[1].endswith("train_grpo.py")
    # Identical settings: every flag of `trl grpo` has the same value in ours (which adds only its own names).
    for flag in (part for part in trl[4:] if part.startswith("--") and part != "--reward_model_name_or_path"):
        assert flags_after(ours, flag) == flags_after(trl, flag), flag
    assert flags_after(ours, "--prompts_per_step") == ["0"]  # TRL's batch flags as they are: 1 generation per step
    assert flags_after(trl, "--gradient_accumulation_steps") == ["1"]
    assert flags_after(trl, "--bf16") == [str(cuda).lower()]  # TRL's default precision (refused on a CPU)
    assert flags_after(trl, "--tf32") == (["false"] if cuda else None)
    # Our defaults: no precision or generation-batching flag, so the package decides for the device.
    for name in ("grpo", "grpo_lora", "grpo_vllm", "ppo", "ppo_lora"):
        for flag in ("--bf16", "--tf32", "--prompts_per_generation", "--gradient_accumulation_steps"):
            assert flag not in command[name], (name, flag)
    assert flags_after(command["grpo"], "--prompts_per_step") == ["4"]
    assert "--use_peft" in command["grpo_lora"] and "--use_peft" in command["trl_grpo_lora"]
    assert flags_after(command["grpo_vllm"], "--vllm_mode") == ["colocate"]
    assert "--per_device_train_batch_size" not in command["ppo"]  # PPO's micro-batch and rollout: the package's


def test_our_runs_are_planned_in_whole_generation_cycles_and_vllm_is_skipped_where_missing(monkeypatch):
    monkeypatch.setattr("bench.plan.vllm_importable", lambda: False)
    args = benchmark.parse_args(["--steps", "3", "--prompts_per_generation", "8"])
    plan = plan_run("grpo", "", [], args, PATHS, cuda=False)
    # 8 prompts per generation = 2 optimizer steps of 4 prompts: warm-up 1 cycle, 3 steps rounded up to 2 cycles.
    assert (plan["steps_per_generation"], plan["warmup"], plan["measured"]) == (2, 2, 4)
    assert flags_after(plan["command"], "--max_steps") == ["6"]
    trl = plan_run("trl_grpo", "", [], args, PATHS, cuda=False)
    assert (trl["steps_per_generation"], trl["warmup"], trl["measured"]) == (1, 1, 3)
    assert plan_run("grpo_vllm", "", [], args, PATHS, cuda=False)["skipped"] == "vllm not installed"
    variant = plan_run("grpo", "prompts_per_generation=16", ["--prompts_per_generation", "16"], args,
                                 PATHS, cuda=False)
    assert (variant["run"], variant["steps_per_generation"], variant["measured"]) == (
        "grpo[prompts_per_generation=16]", 4, 4)


def test_repeats_run_in_abba_order_and_each_pair_gives_its_own_ratio(monkeypatch):
    from bench.report import pair_ratios

    args = benchmark.parse_args(["--suite", "gpu", "--dry_run"])
    assert (args.repeats, args.warmup_steps, args.steps, args.warmup_run) == (3, 2, 5, True)
    order = []
    monkeypatch.setattr("bench.plan.plan_run", lambda name, *_: order.append(name) or {"run": name})
    monkeypatch.setattr(benchmark, "print_plans", lambda *_: None)
    benchmark.main(["--runs", "grpo_trl_settings", "trl_grpo", "--repeats", "4", "--dry_run"])
    assert order == ["grpo_trl_settings", "trl_grpo", "trl_grpo", "grpo_trl_settings"] * 2  # A B B A A B B A

    def run(repeat, seconds):  # 10 steps of 100 tokens in all
        return {"repeat": repeat, "returncode": 0, "seconds_per_step": seconds, "measured": 10,
                "completion_tokens": 1000}

    ours = [run(0, 1.0), run(1, 1.2), {"repeat": 2, "returncode": 1}]
    theirs = [run(0, 2.0), run(1, 1.0), run(2, 1.0)]
    assert pair_ratios(ours, theirs) == [0.5, 1.2]  # repeat by repeat; a failed run's pair is left out


def test_the_measured_window_is_whole_generation_cycles():
    clock = {step: 10.0 * step for step in range(1, 9)}
    clock.update({5: 49.0})  # step 5 generates for steps 5-8
    lengths = {1: 30.0, 5: 20.0}  # mean completion lengths, logged at the steps that generated
    window = whole_cycles(clock, lengths, warmup=4, measured=4, steps_per_cycle=4)
    assert window["seconds"] == 40.0 and window["steps"] == 4 and window["cycle_seconds"] == [40.0]
    assert (window["generations"], window["tokens"], window["aligned"]) == (1, 20.0, True)
    assert window["step_seconds"] == [9.0, 11.0, 10.0, 10.0]
    assert whole_cycles(clock, {1: 1.0, 6: 1.0}, 4, 4, 4)["aligned"] is False
    with pytest.raises(RuntimeError, match=r"steps \[9\] were not logged"):
        whole_cycles(clock, lengths, warmup=5, measured=4, steps_per_cycle=4)


@pytest.mark.slow
def test_benchmark_reports_each_run_and_the_ratio_to_trl_grpo(tmp_path):
    output = tmp_path / "bench.json"
    result = run_script("bench/benchmark.py", "--model", "tiny", "--runs", "grpo_trl_settings", "trl_grpo", "grpo",
                        "ppo", "--steps", "1", "--prompts_per_generation", "8", "--max_completion_length", "8",
                        "--scoring_sequences", "4", "--work_dir", tmp_path / "work", "--output", output)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    runs = {r["run"]: r for r in report["results"]}
    assert set(runs) == {"grpo_trl_settings", "trl_grpo", "grpo", "ppo"}
    for run in runs.values():
        assert run["returncode"] == 0 and run["cycles_aligned"]
        assert len(run["step_seconds"]) == run["measured"] and run["seconds_per_step"] > 0  # warm-up left out
        assert 0 < run["mean_completion_tokens"] <= 8
        assert run["completion_tokens_per_s"] > 0 and run["peak_rss_gb"] > 0.1 and run["epoch_hours"] > 0
    # Our defaults with 8 prompts per generation: 2 optimizer steps per generation, measured in whole cycles.
    assert (runs["grpo"]["steps_per_generation"], runs["grpo"]["warmup"], runs["grpo"]["measured"]) == (2, 2, 2)
    assert runs["trl_grpo"]["steps_per_generation"] == runs["grpo_trl_settings"]["steps_per_generation"] == 1
    assert report["ratios"]["grpo_trl_settings/trl_grpo"]["seconds_per_token"] > 0
    assert all(report["reward_model_scoring"][dtype]["sequences_per_s"] > 0 for dtype in ("float32", "bfloat16"))
    assert {"torch", "transformers", "trl", "peft", "cuda"} <= set(report["versions"]) and report["device"]
    assert "grpo_trl_settings / trl_grpo (identical settings), seconds per generated token:" in result.stdout
    assert re.search(r"^grpo +[\d.]+ +4 +2 ", result.stdout, flags=re.MULTILINE)  # the table's row


def test_a_dry_run_of_the_gpu_suite_prints_a_gpus_plan_on_a_machine_without_one(tmp_path, monkeypatch, capsys):
    from rlhf.batches import GPU_PROMPTS_PER_GENERATION

    no_cuda(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a temporary work folder would go
    benchmark.main(["--suite", "gpu", "--dry_run"])
    stdout = capsys.readouterr().out
    assert "no GPU here" in stdout
    commands = {}
    for block in stdout.split("\n\n")[1:]:
        head, counts, command = block.strip().splitlines()
        commands[head.split(":")[0]] = (counts.strip(), command.split())
    assert list(commands) == benchmark.SUITES["gpu"]["runs"]
    assert flags_after(commands["trl_grpo"][1], "--bf16") == ["true"]  # TRL's precision on a GPU, refused on a CPU
    # the same work: ours scores in the dtype trl grpo loads the reward model in (float32), not bfloat16
    assert flags_after(commands["grpo_trl_settings"][1], "--reward_model_dtype") == ["float32"]
    # TRL's settings generate once per step: 2 warm-up steps and 5 measured
    assert commands["trl_grpo"][0].startswith("2 warm-up + 5 measured")
    assert flags_after(commands["trl_grpo"][1], "--max_steps") == ["7"]
    # A GPU's PPO rollout is 64 prompts, generated 16 or 64 at a time: one rollout of warm-up, one measured
    benchmark.main(["--suite", "gpu_ppo", "--dry_run"])
    blocks = [block.strip().splitlines() for block in capsys.readouterr().out.split("\n\n")[1:]]
    commands = {head.split(":")[0]: command.split() for head, _, command in blocks}
    assert list(commands) == ["ppo_chunk16", "ppo_chunk64"]
    for chunk in (16, 64):
        assert flags_after(commands[f"ppo_chunk{chunk}"], "--local_rollout_forward_batch_size") == [str(chunk)]
        assert flags_after(commands[f"ppo_chunk{chunk}"], "--total_episodes") == [str(2 * GPU_PROMPTS_PER_GENERATION)]
    assert not list(tmp_path.glob("rlhf_bench_*"))  # a dry run makes no work folder, not even a temporary one


def test_an_output_that_cannot_be_written_is_refused_before_any_run(tmp_path, capsys):
    for output in (tmp_path, tmp_path / "no_such_folder" / "bench.json"):
        with pytest.raises(SystemExit) as stop:
            benchmark.parse_args(["--output", str(output)])
        assert stop.value.code == 2 and f"--output {output} is a folder or in a folder that does not exist" in (
            capsys.readouterr().err)
    assert benchmark.parse_args(["--output", str(tmp_path / "bench.json")]).output == str(tmp_path / "bench.json")


def test_a_work_dir_holding_earlier_runs_is_refused_not_reported_again(tmp_path, capsys):
    earlier = tmp_path / "work" / "grpo_0" / "output"  # a finished run there would have nothing to do
    earlier.mkdir(parents=True)
    with pytest.raises(SystemExit) as stop:
        benchmark.main(["--model", "tiny", "--runs", "grpo", "--work_dir", str(tmp_path / "work"),
                        "--output", str(tmp_path / "bench.json")])
    assert stop.value.code == 2
    assert f"--work_dir {tmp_path / 'work'} already holds runs of an earlier benchmark (grpo_0)" in (
        capsys.readouterr().err)
    assert not (tmp_path / "bench.json").exists() and not (tmp_path / "work" / "prompts").exists()


def test_a_benchmark_stopped_part_way_keeps_the_runs_it_finished(tmp_path, monkeypatch, capsys):
    # A GPU lease ends at a time limit: the runs measured before it must be in the JSON, with their memory.
    finished = {"run": "grpo", "returncode": 0, "seconds_per_step": 0.5, "measured": 3, "cycle_seconds": [1.5],
                "completion_tokens_per_s": 100.0, "peak_rss_gb": 2.5, "peak_cuda_allocated_gb": 1.2,
                "peak_cuda_reserved_gb": 1.5, "wall_s": 30.0}
    calls = []

    def measure(plan, folder, args):
        calls.append(plan["run"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a time limit's SIGTERM or Ctrl-C does to the second run
        return dict(finished, run=plan["run"])

    monkeypatch.setattr(benchmark, "prepare_models", lambda args, work: ("P", "R"))
    monkeypatch.setattr(benchmark, "write_prompts", lambda path, count: None)
    monkeypatch.setattr(benchmark, "measure", measure)
    output = tmp_path / "bench.json"
    with pytest.raises(SystemExit):
        benchmark.main(["--runs", "grpo", "trl_grpo", "--work_dir", str(tmp_path / "work"), "--output", str(output)])
    report = json.loads(output.read_text())
    assert calls == ["grpo", "trl_grpo"] and report["finished"] == "1 of 2 runs"
    assert [r["run"] for r in report["results"]] == ["grpo"] and report["results"][0]["peak_cuda_reserved_gb"] == 1.5
    assert "grpo: 0.50 s/step" in capsys.readouterr().out and "1.2 GB allocated / 1.5 GB reserved on the GPU" in \
        benchmark.format_progress(dict(finished))


def no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_gpu_checks_dry_run_prints_a_gpus_plan_that_fits_9_minutes_on_one_h100(tmp_path, monkeypatch, capsys):
    no_cuda(monkeypatch)
    gpu_check.main(["--dry_run", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    estimated = int(re.search(r"budget 540 s; estimated (\d+) s", out).group(1))
    budgets = {name: budget for name, (_, budget) in gpu_check.PARTS.items()}
    # Every part within its budget fills at most the 9 minutes: the quickstarts and the memory runs share a window.
    assert estimated <= gpu_check.SETUP_S + max(budgets["quickstarts"], budgets["memory"]) + budgets["grpo_vs_trl"] \
        + budgets["ppo_chunks"] + gpu_check.RESERVE_S <= 540
    blocks = {block.split(":")[0].split(" ")[1]: block for block in out.split("\n\n")[1:5]}
    assert list(blocks) == ["quickstarts", "memory", "grpo_vs_trl", "ppo_chunks"]  # the order they run in
    for name, block in blocks.items():
        assert int(re.search(r"estimated (\d+) s", block).group(1)) <= budgets[name], name
    commands = {name: [line.strip().split(": ", 1) for line in block.splitlines()[1:]]
                for name, block in blocks.items()}
    assert [run for run, _ in commands["quickstarts"]] == ["rm seed 42", "math seed 42", "rm seed 1", "math seed 1"]
    assert all("quickstart.py --task " in command for _, command in commands["quickstarts"])
    runs = [run.split(" ")[0] for run, _ in commands["grpo_vs_trl"]]
    assert runs == ["grpo_trl_settings", "trl_grpo", "trl_grpo", "grpo_trl_settings"]  # A B B A
    for _, command in commands["grpo_vs_trl"]:
        assert "--bf16 true" in command and "--max_completion_length 64" in command and "--max_steps 4" in command
    # PPO: 2 rollouts of a GPU's 64 prompts (one untimed), generated 16 at a time or all at once
    chunks = [re.search(r"--local_rollout_forward_batch_size (\d+)", command).group(1)
              for _, command in commands["ppo_chunks"]]
    assert chunks == ["16", "64"]
    assert all("--total_episodes 128" in command for _, command in commands["ppo_chunks"])
    # memory: the package's defaults (no chunk, batch or precision flag), one generation and two optimizer steps
    memory = dict(commands["memory"])
    assert [run.split(" ")[0] for run in memory] == ["grpo", "ppo", "grpo_lora", "ppo_lora"]
    for run, command in memory.items():
        assert "--max_completion_length 256" in command and "--bf16" not in command
        assert ("--total_episodes 64" if run.startswith("ppo") else "--max_steps 2") in command
    assert "the check would stop here, missing: a CUDA GPU" in out
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_the_gpu_check_names_what_is_missing_in_one_line_before_spending_time(tmp_path, monkeypatch, capsys):
    no_cuda(monkeypatch)
    monkeypatch.setattr(gpu_check, "NEEDED", (*gpu_check.NEEDED, "no_such_package"))
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(["--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: the GPU check cannot run here; missing: no_such_package (No module named")
    assert "; a CUDA GPU (torch " in err and not (tmp_path / "out").exists()
    for argv, message in ((["--allow_cpu", "--out", "x"], "--allow_cpu checks the wiring on tiny models: add --model "
                           "tiny"), (["--part_budget", "memory:60", "--dry_run"], "--part_budget memory:60: write "
                                     "PART=SECONDS"), ([], "give --out DIR")):
        with pytest.raises(SystemExit) as stop:
            gpu_check.main(argv)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and err.startswith(f"error: {message}") and len(err.splitlines()) == 1


def test_the_gpu_checks_ratios_use_the_runs_that_finished_pair_by_pair():
    def run(name, repeat, seconds, **extra):  # 4 measured steps of 100 tokens each
        return {"run": name, "repeat": repeat, "returncode": 0, "seconds_per_step": seconds, "measured": 4,
                "completion_tokens": 400, "completion_tokens_per_s": 400 / (4 * seconds), "epoch_hours": 1.0,
                "wall_s": 30.0, "peak_rss_gb": 1.0, "peak_cuda_allocated_gb": None, "peak_cuda_reserved_gb": None,
                "about": "", "prompts_per_step": 4, "steps_per_generation": 1, **extra}

    results = [run("grpo_trl_settings", 0, 2.0), run("trl_grpo", 0, 1.0), run("trl_grpo", 1, 4.0),
               run("grpo_trl_settings", 1, 3.0, returncode=130, stopped=True),  # cut short: in no ratio
               {"run": "grpo_trl_settings", "repeat": 2, "not_started": "no time left in the part"}]
    ratio = gpu_check.ratio(results, "grpo_trl_settings", "trl_grpo")
    # medians 2.0 and 2.5 s a step over the same tokens; the one pair that finished: 2.0 / 1.0
    assert ratio == {"runs": "grpo_trl_settings / trl_grpo", "seconds_per_token": 0.8, "per_pair": [2.0]}
    assert gpu_check.ratio(results[1:], "grpo_trl_settings", "trl_grpo") is None  # no finished run of one side
    chunks = [run("ppo_chunk16[num_ppo_epochs=1]", 0, 3.0), run("ppo_chunk64[num_ppo_epochs=1]", 0, 1.5)]
    assert gpu_check.ratio(chunks, "ppo_chunk64", "ppo_chunk16")["per_pair"] == [0.5]  # matched by name, variant aside


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="a process group is stopped as a whole on POSIX")
def test_a_run_past_its_deadline_is_stopped_with_everything_it_started(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.measure.STOP_GRACE_S", 1)
    # It ignores Ctrl-C and starts a process of its own: both are killed a grace period after the stop.
    script = ("import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print(child.pid, flush=True); time.sleep(60)")
    began = time.monotonic()
    code, stopped = run_until([sys.executable, "-c", script], tmp_path / "log.txt", dict(os.environ),
                              deadline=time.monotonic() + 3)
    assert stopped and code == -9 and time.monotonic() - began < 20
    child = int((tmp_path / "log.txt").read_text().split()[0])
    for _ in range(50):  # the orphan is reaped by init once killed
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {child}, started by the stopped run, is still running")
    # A run that ends in time is not stopped: its own exit code.
    code, stopped = run_until([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "log.txt", dict(os.environ),
                              deadline=time.monotonic() + 60)
    assert (code, stopped) == (3, False)


@pytest.mark.slow
def test_the_gpu_check_on_tiny_models_writes_each_parts_figures_and_keeps_what_a_cut_part_measured(
        tmp_path, tiny_quickstarts):
    out = tmp_path / "out"
    # The quickstarts it starts are the session's, finished in its --work_dir (nothing left to do: what they trained
    # is tests/test_quickstart.py's to check). --steps 1000: the timed runs would take minutes; their parts' budgets
    # stop the first run of each part mid-way (a tiny run starts in ~6 s, then logs a GRPO step each 0.07 s, a PPO
    # step each 0.3 s, on a 2-core Xeon).
    result = run_script("bench/gpu_check.py", "--allow_cpu", "--model", "tiny", "--seeds", "42", "--steps", "1000",
                        "--max_completion_length", "8", "--part_budget", f"grpo_vs_trl={CUT_PART_S}",
                        f"ppo_chunks={CUT_PART_S}", "--out", out, "--work_dir", tiny_quickstarts["work"], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    markdown = (out / "gpu_check.md").read_text()
    assert list(report["parts"]) == ["quickstarts", "grpo_vs_trl", "ppo_chunks", "memory"]  # in order of value
    assert {"torch", "transformers", "trl", "peft", "accelerate", "datasets"} <= set(report["versions"])
    assert report["device"] in markdown and report["commit"] in markdown
    quickstarts = report["parts"]["quickstarts"]
    assert quickstarts["status"] == "done"
    runs = [(r["task"], r["seed"], r["returncode"]) for r in quickstarts["results"]]
    assert runs == [("rm", 42, 0), ("math", 42, 0)]
    for r in quickstarts["results"]:
        assert [c["model"] for c in r["comparison"]] == ["grpo", "ppo"] and r["timings_s"]["total"] > 0
        assert all(stage["finished"] and stage["peak_memory"]["gb"] > 0 for stage in r["stages"].values())
    assert re.search(r"^\| rm \| 42 \| reward model accuracy [\d.]+; grpo vs base: win rate", markdown, re.MULTILINE)
    assert re.search(r"^\| math \| 42 \| grpo accuracy [\d.]+% \(base", markdown, re.MULTILINE)
    memory = report["parts"]["memory"]
    assert memory["status"] == "done" and [r["run"] for r in memory["results"]] == list(gpu_check.MEMORY_RUNS)
    for r in memory["results"]:
        assert r["returncode"] == 0 and r["peak_rss_gb"] > 0.1 and "seconds_per_step" not in r
        assert re.search(rf"^\| {r['run']} \| 0 \| - \| - \| - \| {r['peak_rss_gb']} \|", markdown, re.MULTILINE)
    for name, first, rest in (("grpo_vs_trl", "grpo_trl_settings", 3), ("ppo_chunks", "ppo_chunk16", 1)):
        part = report["parts"][name]
        assert part["status"] == f"cut short at its budget: 0 of {rest + 1} runs finished"
        assert part["wall_s"] <= CUT_PART_S + gpu_check.STOP_GRACE_S + 5 and part["ratio"] is None
        stopped = next(r for r in part["results"] if r.get("stopped"))
        after = part["results"][part["results"].index(stopped) + 1:]
        # What the stopped run measured is kept: its time over the whole cycles it logged, and its peak memory.
        assert stopped["run"].startswith(first) and stopped["measured"] > 0
        assert stopped["seconds_per_step"] > 0 and stopped["peak_rss_gb"] > 0.1
        assert len(stopped["step_seconds"]) == stopped["measured"]
        assert after and all(r["not_started"] for r in after)
        assert f"stopped at its part's end: {stopped['measured']} steps measured" in markdown
