"""`run_report.json` and `run_report.md` in a training output_dir: what the run was, how fast, how it went.

Written by the main process at each log and save, and once more at the end (`TrainingRun.finish`), atomically: the
settings that matter, seconds per step and tokens per second, peak memory, the health alarms
(`rlhf/lifecycle/health.py`), the held-out evaluations (every `eval/*` value in the Trainer's log history) and the best
checkpoint by that held-out metric (transformers' `state.best_model_checkpoint`), never by the training reward, and
with `--end_on_best_checkpoint` the checkpoint the final model was taken from (`final_model`).
"""

import json
import statistics
import sys
import time
from pathlib import Path

REPORT_JSON, REPORT_MD = "run_report.json", "run_report.md"
# The settings a reader needs to tell runs apart, where the run's configs have them (GRPO, PPO, reward model).
SETTINGS = (
    "model_name_or_path", "dataset_name", "dataset_train_split", "max_samples", "reward_funcs",
    "reward_model_name_or_path", "use_peft", "dtype", "learning_rate", "lr_scheduler_type", "seed", "max_steps",
    "num_train_epochs", "total_episodes", "per_device_train_batch_size", "gradient_accumulation_steps",
    "prompts_per_step", "prompts_per_generation", "num_generations", "generation_batch_size", "prompts_per_rollout",
    "num_mini_batches", "num_ppo_epochs", "max_completion_length", "max_length", "temperature", "beta", "kl_coef",
    "target_kl",
)


def settings(configs, manifest):
    """{setting: value} from the configs (first config that has it), and the engine the manifest resolved."""
    found = {}
    for name in SETTINGS:
        for config in configs:
            if hasattr(config, name):
                value = getattr(config, name)
                found[name] = value if isinstance(value, (str, int, float, bool, list, type(None))) else str(value)
                break
    resolved = manifest.get("resolved", {})
    found["engine"] = {key: resolved.get(key) for key in ("device", "distributed_type", "num_processes")}
    if found["engine"]["num_processes"] is None and manifest.get("launches"):  # PPO's config sets it later
        found["engine"]["num_processes"] = manifest["launches"][-1].get("processes")
    return found


def peak_memory():
    """{'gb': peak memory, 'kind': what was measured}: CUDA memory allocated on a GPU, else the process's max RSS."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return {"gb": round(torch.cuda.max_memory_allocated() / 2**30, 3), "kind": "torch.cuda.max_memory_allocated"}
    try:
        import resource
    except ImportError:  # Windows: psutil where installed
        try:
            import psutil
        except ImportError:
            return {"gb": None, "kind": None}
        info = psutil.Process().memory_info()
        return {"gb": round(getattr(info, "peak_wset", info.rss) / 2**30, 3), "kind": "process peak working set"}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"gb": round(rss / (2**30 if sys.platform == "darwin" else 2**20), 3), "kind": "process max RSS"}


def evaluations(log_history):
    """Each log that holds held-out `eval/*` values: {'step', and those values}, in step order."""
    found = []
    for entry in log_history:
        values = {key: value for key, value in entry.items() if key.startswith("eval/")}
        if values:
            found.append({"step": entry.get("step"), **values})
    return found


class RunReport:
    """Gathers the timings as the run goes and writes both files. `health`: the run's `HealthMonitor`."""

    def __init__(self, output_dir, script, settings, health):
        self.folder = Path(output_dir)
        self.script, self.settings, self.health = script, settings, health
        self.step_times = []  # seconds of each optimizer step in this launch
        self.tokens = []  # (time, num_tokens) at each log that has it
        self._last_step = None
        self.final_model = None  # with --end_on_best_checkpoint: what `end_on_best_checkpoint` put in output_dir

    def step_ended(self):
        now = time.perf_counter()
        if self._last_step is not None:
            self.step_times.append(now - self._last_step)
        self._last_step = now

    def step_began(self):
        if self._last_step is None:
            self._last_step = time.perf_counter()

    def logged(self, logs):
        if "num_tokens" in logs:
            self.tokens.append((time.perf_counter(), logs["num_tokens"]))

    def build(self, state, finished=False):
        tokens_per_second = None
        if len(self.tokens) >= 2 and self.tokens[-1][0] > self.tokens[0][0]:
            tokens_per_second = round((self.tokens[-1][1] - self.tokens[0][1]) /
                                      (self.tokens[-1][0] - self.tokens[0][0]), 1)
        return {
            "script": self.script,
            "finished": finished,
            "global_step": state.global_step,
            "max_steps": state.max_steps,
            "settings": self.settings,
            "seconds_per_step": round(statistics.median(self.step_times), 3) if self.step_times else None,
            "steps_timed": len(self.step_times),
            "tokens_per_second": tokens_per_second,
            "peak_memory": peak_memory(),
            "health": [alarm.record() for alarm in self.health.alarms],
            "evaluations": evaluations(state.log_history),
            "best_checkpoint": state.best_model_checkpoint,
            "best_metric": state.best_metric,
            **({"final_model": self.final_model} if self.final_model else {}),  # --end_on_best_checkpoint
        }

    def write(self, state, finished=False):
        report = self.build(state, finished)
        write_report(self.folder, report)
        return report


def write_report(folder, report):
    """Write `run_report.json` and its markdown twin into `folder`, each replaced whole."""
    from rlhf.files import write_json

    write_json(Path(folder) / REPORT_JSON, report)
    tmp = Path(folder) / (REPORT_MD + ".tmp")
    tmp.write_text(markdown(report), encoding="utf-8")
    tmp.replace(Path(folder) / REPORT_MD)


def read_report(folder):
    """The `run_report.json` in `folder` as a dict; {} where it is missing or unreadable."""
    try:
        report = json.loads((Path(folder) / REPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def note_checkpoints_deleted(folder, deleted):
    """Say in the run's report that its best checkpoint is one of the `deleted` folders (quickstart.py deletes a
    finished stage's checkpoints), so that the report never points at a folder that is gone."""
    report = read_report(folder)
    best = report.get("best_checkpoint")
    if best and Path(best).name in {Path(checkpoint).name for checkpoint in deleted}:
        report["best_checkpoint_deleted"] = True
        write_report(folder, report)


def markdown(report):
    """A dozen lines a person reads: what ran, how fast, what went wrong, the held-out curve's last point."""
    s = report["settings"]
    engine = s.get("engine", {})
    memory = report["peak_memory"]
    lines = [
        f"# Run report: {report['script']} ({'finished' if report['finished'] else 'in progress'})",
        "",
        f"- model: {s.get('model_name_or_path')}; data: {s.get('dataset_name')}"
        + (f"; rewards: {', '.join(s['reward_funcs'])}" if s.get("reward_funcs") else ""),
        f"- steps: {report['global_step']} of {report['max_steps']}; learning rate {s.get('learning_rate')}; "
        f"seed {s.get('seed')}",
        f"- engine: {engine.get('distributed_type')} on {engine.get('device')}, {engine.get('num_processes')} "
        "process(es)",
        f"- speed: {report['seconds_per_step']} s/step (median of {report['steps_timed']})"
        + (f", {report['tokens_per_second']} tokens/s" if report["tokens_per_second"] else ""),
        f"- peak memory: {memory['gb']} GB ({memory['kind']})",
    ]
    alarms = report["health"]
    lines.append(f"- health: {len(alarms)} alarm(s)" if alarms else "- health: no alarm")
    lines += [f"  - step {alarm['step']}: {alarm['line'].removeprefix('health: ')}" for alarm in alarms]
    if report["evaluations"]:
        last = report["evaluations"][-1]
        values = ", ".join(f"{key} {value:.4g}" for key, value in last.items()
                           if key != "step" and isinstance(value, (int, float)))
        lines.append(f"- held-out evaluations: {len(report['evaluations'])}; last (step {last['step']}): {values}")
    else:
        lines.append("- held-out evaluations: none")
    if not report["best_checkpoint"]:
        lines.append("- best checkpoint: none (no held-out evaluation)")
    elif report.get("best_checkpoint_deleted"):
        lines.append(f"- best checkpoint: {report['best_checkpoint']} ({report['best_metric']}), deleted after "
                     "training; the folder keeps the final model")
    else:
        lines.append(f"- best checkpoint: {report['best_checkpoint']} ({report['best_metric']})")
    if report.get("final_model"):
        lines.append(f"- final model: {report['final_model']['line']}")
    return "\n".join(lines) + "\n"


def end_on_best_checkpoint(report, model, state, adapter=False, kept=""):
    """`--end_on_best_checkpoint`: put the best checkpoint's weights (by the held-out evaluation) into `model`, the one
    the script saves next (`adapter`: a PEFT model's adapter), say so in one line from the main process and record it
    in the run report (`final_model`). `kept`: what stays the last step's (PPO: its value model). In every process:
    each loads the same checkpoint, named alike in each (`rlhf.evaluation.heldout` shares it)."""
    from rlhf.evaluation.heldout import best_metric_name
    from rlhf.lifecycle.checkpoints import load_best_checkpoint
    from rlhf.processes import is_main_process

    checkpoint = load_best_checkpoint(model, state, adapter)
    if checkpoint is None:
        gone = state.best_model_checkpoint
        line = (f"the best checkpoint {gone} is gone: the final model is the last step's ({state.global_step})"
                if gone else "no checkpoint was evaluated (--eval_steps, --save_steps): the final model is the last "
                f"step's ({state.global_step})")
        record = {"checkpoint": None, "step": state.global_step, "metric": None, "value": None}
    else:
        step = state.best_global_step
        evaluation = next((entry for entry in state.log_history if entry.get("step") == step
                           and any(key.startswith("eval/") for key in entry)), {})
        metric = best_metric_name(evaluation) if evaluation else None
        line = (f"ended on the best checkpoint by the held-out evaluation, {checkpoint.name} ({metric} "
                f"{state.best_metric:.4g} at step {step} of {state.global_step}): the final model holds its weights"
                + (f"; {kept}" if kept else "") + no_better_than_the_start(state, metric))
        record = {"checkpoint": str(checkpoint), "step": step, "metric": metric, "value": state.best_metric}
    report.final_model = {**record, "last_step": state.global_step, "line": line}
    if is_main_process():
        print(line[0].upper() + line[1:], flush=True)
    return checkpoint


def no_better_than_the_start(state, metric):
    """Where no checkpoint beat the starting policy's held-out evaluation at step 0 (the first checkpoint comes later,
    so ending on the best cannot give the start back): the clause that says so, else ''."""
    start = next((entry[metric] for entry in state.log_history if entry.get("step") == 0 and metric in entry), None)
    if start is None or state.best_metric > start:
        return ""
    return (f". No checkpoint beat the starting policy ({metric} {start:.4g} at step 0): by this evaluation the "
            "model the run started from (--model_name_or_path) is at least as good")


def report_callback(report):
    """The `TrainerCallback` that times steps and rewrites the report at each log and save and at the end."""
    from transformers import TrainerCallback

    from rlhf.processes import is_main_process

    class ReportCallback(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            report.step_began()

        def on_step_end(self, args, state, control, **kwargs):
            report.step_ended()

        def on_log(self, args, state, control, logs=None, **kwargs):
            report.logged(logs or {})
            if is_main_process():
                report.write(state)

        def on_save(self, args, state, control, **kwargs):
            if is_main_process():
                report.write(state)

        def on_train_end(self, args, state, control, **kwargs):
            if is_main_process():
                report.write(state)

    return ReportCallback()
