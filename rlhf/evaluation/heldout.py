"""Held-out evaluation during GRPO and PPO training (`--eval_prompts`, `--eval_steps`).

Every `eval_steps` steps and at the last one, the policy samples completions for held-out prompts (never trained on:
the rule of `evaluate_generations.py`), which are scored by the training's own reward functions and compared with the
starting policy's completions (generated once, before the first step, and cached in the output folder for a resumed
run): the win rate under the reward, and with the verifier (`boxed_answer`) the accuracy and its gain, each with a
95% bootstrap interval over prompts (`rlhf.evaluation.stats`). They are logged under `eval/` in TensorBoard and in
`state.log_history`, printed in one line, and name the best checkpoint (`state.best_model_checkpoint`, which
transformers' checkpoint rotation never deletes) among the checkpoints saved at an evaluation.

Sampling, not greedy decoding: greedy gives one completion per prompt and hides how often a policy gets it right.
Each evaluation draws from the same seed, so the starting and the current policy are compared on the same random
stream (as `evaluate_generations.py` compares models), and the random state of training is put back afterwards: a run
with evaluation trains the same weights as one without.
"""

import contextlib
import json
import math
import os
import time
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rlhf.errors import UserError
from rlhf.evaluation.generation import draw_prompts, generate, held_out_prompts, score
from rlhf.evaluation.stats import compare, summarize
from rlhf.processes import is_main_process, share_from_main_process

BASELINE_FILE = "heldout_baseline.json"  # the starting policy's scored completions, for a resumed run
GENERATION_BATCH = 64  # sequences generated at once


def held_out_rows(training_args, data_args, tokenizer, reward_funcs, room=None):
    """(prompt rows, their dataset row numbers, where they come from): `--eval_prompts` of them, drawn (seeded) from
    `--eval_dataset_name`, else from the rows of `--dataset_name` after the first `--max_samples` (those training
    uses). Call it before the models load: a dataset without held-out rows is a `UserError` costing seconds."""
    from rlhf.data import load_rows
    from rlhf.rewards.functions import check_reward_columns

    source, train_samples = training_args.eval_dataset_name, 0
    if source is None:
        source, train_samples = data_args.dataset_name, data_args.max_samples or 0
        if not train_samples:
            raise UserError(f"--eval_prompts {training_args.eval_prompts} needs prompts that training does not use, "
                            f"but --max_samples {data_args.max_samples} trains on every row of {source}; pass "
                            "--eval_dataset_name (e.g. a test file), or a --max_samples below its row count")
        split = data_args.dataset_train_split
    else:
        split = "train" if Path(source).is_file() else data_args.dataset_test_split  # a file has one split
    rows = load_rows(source, split)
    check_reward_columns(reward_funcs, source, rows.column_names)
    if len(rows) <= train_samples:
        raise UserError(f"--eval_prompts {training_args.eval_prompts}: {source} has {len(rows)} rows, all among the "
                        f"first --max_samples {train_samples} that training uses; lower --max_samples, or pass "
                        "--eval_dataset_name")
    prompts, numbers, dropped = held_out_prompts(rows, tokenizer, train_samples, data_args.max_prompt_length,
                                                 data_args.system_prompt, room, data_args.append_system_prompt)
    if not len(prompts):
        raise UserError(f"--eval_prompts: all {dropped} held-out prompts of {source} are longer than "
                        f"--max_prompt_length {data_args.max_prompt_length}; raise it, or pass --eval_dataset_name")
    picked, row_numbers = draw_prompts(prompts, numbers, training_args.eval_prompts, training_args.seed)
    where = f"{source}, rows after the first {train_samples}" if train_samples else source
    return picked, row_numbers, where


def eval_interval(eval_steps, max_steps):
    """Steps between evaluations: `eval_steps`, or below 1 a ratio of `max_steps` (as transformers reads it)."""
    return max(1, math.ceil(max_steps * eval_steps)) if eval_steps < 1 else int(eval_steps)


def heldout_metrics(completions, baseline, seed):
    """The `eval/` scalars of a policy's scored completions against the starting policy's, per prompt (as
    `rlhf.evaluation.stats.compare` takes them): the win rate under the reward (ties half) and, where the verifier
    scored them, the accuracy and its gain over the starting policy; each with its 95% bootstrap interval (`_low`,
    `_high`).
    """
    comparison = compare(completions, baseline, seed=seed)
    metrics = {"eval/win_rate": comparison["win_rate"], "eval/win_rate_low": comparison["ci_low"],
               "eval/win_rate_high": comparison["ci_high"]}
    if "accuracy_delta" in comparison:
        summary = summarize(completions, seed=seed)
        metrics.update({
            "eval/accuracy": summary["verifier_accuracy"],
            "eval/accuracy_low": summary["verifier_accuracy_ci_low"],
            "eval/accuracy_high": summary["verifier_accuracy_ci_high"],
            "eval/accuracy_gain": comparison["accuracy_delta"],
            "eval/accuracy_gain_low": comparison["accuracy_delta_ci_low"],
            "eval/accuracy_gain_high": comparison["accuracy_delta_ci_high"],
        })
    return metrics


def best_metric_name(metrics):
    """What names the best checkpoint: the verifier's accuracy where it scores, else the win rate."""
    return "eval/accuracy" if "eval/accuracy" in metrics else "eval/win_rate"


def describe(step, metrics):
    """The console line of one evaluation."""
    from rlhf.evaluation.report import gain_interval, win_interval

    m = metrics
    line = (f"held-out eval, step {step}: win rate {m['eval/win_rate']:.2f} "
            f"[{win_interval(m['eval/win_rate_low'], m['eval/win_rate_high'])}] vs the starting policy")
    if "eval/accuracy" in m:
        line += (f"; accuracy {m['eval/accuracy']:.1%} [{m['eval/accuracy_low']:.1%}, {m['eval/accuracy_high']:.1%}], "
                 f"gain {m['eval/accuracy_gain']:+.1%} "
                 f"[{gain_interval(m['eval/accuracy_gain_low'], m['eval/accuracy_gain_high'])}]")
    return line


def say(line):
    """One console line, above the training progress bar rather than through it."""
    from tqdm.auto import tqdm

    tqdm.write(line)


class HeldOutEvaluation(TrainerCallback):
    """Evaluates the policy on held-out prompts at step 0 (the starting policy, the baseline), every `eval_steps`
    steps (past PPO's critic warm-up) and at the last step, in `on_step_end`: before a checkpoint of that step is
    saved, so that it holds the evaluated weights. On the main process only (the others go on to the next step and
    wait for it there)."""

    def __init__(self, trainer, policy, tokenizer, rows, row_numbers, reward_funcs, reward_weights, where,
                 temperature, top_p, resumed_from=None, aside=contextlib.nullcontext, stop_token_ids=None):
        args = trainer.args
        self.trainer, self.policy, self.tokenizer, self.aside = trainer, policy, tokenizer, aside
        self.stop_token_ids = stop_token_ids  # the run's: where its completions end in training
        self.rows, self.row_numbers, self.where = rows, row_numbers, where
        self.funcs, self.weights = reward_funcs, reward_weights or [1.0] * len(reward_funcs)
        self.sampling = {"num_completions": args.eval_completions, "max_new_tokens": args.max_completion_length,
                         "temperature": temperature, "top_p": top_p, "seed": args.seed}
        self.resumed_from = resumed_from  # the checkpoint this launch resumes from, if any
        self.baseline = None

    # ---- When ----

    def on_train_begin(self, args, state, control, **kwargs):
        if not is_main_process():
            return
        self.baseline, seconds = self._cached_baseline(args.output_dir), 0.0
        if self.baseline is None:
            if self.resumed_from:
                say(f"note: held-out evaluation compares with the policy at step {state.global_step}, where this "
                    f"launch resumes: the starting policy's completions are not in {BASELINE_FILE}")
            self.baseline, seconds = self._completions()
            self._save_baseline(args.output_dir)
        say(f"held-out evaluation: {len(self.rows)} prompts x {self.sampling['num_completions']} completions from "
            f"{self.where}, every {eval_interval(args.eval_steps, state.max_steps)} steps and at the end")
        if not self.resumed_from:
            self._log(args, state, heldout_metrics(self.baseline, self.baseline, args.seed), seconds)

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        due = step % eval_interval(args.eval_steps, state.max_steps) == 0 or step >= state.max_steps
        # PPO's critic warm-up holds the policy still: it is the starting policy, evaluated at step 0
        if not due or step <= getattr(args, "critic_warmup", 0):
            return
        best = None
        if is_main_process():  # one process generates and scores
            completions, seconds = self._completions()
            metrics = heldout_metrics(completions, self.baseline, args.seed)
            self._log(args, state, metrics, seconds)
            name = best_metric_name(metrics)
            if control.should_save and (state.best_metric is None or metrics[name] > state.best_metric):
                # The checkpoint this step is about to save holds the weights just evaluated.
                best = metrics[name], step, os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        # Every process takes the main process's decision: transformers' `_save_checkpoint` waits in a barrier where
        # `state.best_global_step` is set, so a best checkpoint known to one process alone hangs the run.
        best = share_from_main_process(best)
        if best is not None:
            state.best_metric, state.best_global_step, state.best_model_checkpoint = best

    # ---- What ----

    def _completions(self):
        """(The policy's scored completions of the held-out prompts, seconds taken); training's random state is left
        as it was."""
        import torch

        start = time.perf_counter()
        policy = self.policy()
        training = policy.training
        prompts = [row["prompt"] for row in self.rows]
        s = self.sampling
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices), self.aside():
            completions = generate(policy, self.tokenizer, prompts, s["num_completions"], s["max_new_tokens"],
                                   s["temperature"], s["top_p"], GENERATION_BATCH, s["seed"],
                                   stop_token_ids=self.stop_token_ids)
        policy.train(training)
        score(self.funcs, self.weights, self.rows, completions)
        return completions, time.perf_counter() - start

    def _log(self, args, state, metrics, seconds):
        """Into `state.log_history` (with the step), the reporting integrations (TensorBoard: `eval/...`), and one
        console line."""
        from rlhf.trl_compat import log_to_reporters

        state.log_history.append({**metrics, "step": state.global_step})
        # transformers' reporters write a key `eval_x` as `eval/x` (the Trainer's own evaluation metrics).
        logs = {f"eval_{name.removeprefix('eval/')}": value for name, value in metrics.items()}
        log_to_reporters(self.trainer, args, state, logs)
        say(f"{describe(state.global_step, metrics)}" + (f" ({seconds:.1f} s)" if seconds else ""))

    # ---- The starting policy's completions, kept for a resumed run ----

    def _record(self):
        return {"prompt_rows": self.row_numbers, "where": self.where, "sampling": self.sampling,
                "reward_funcs": [func.__name__ for func in self.funcs], "reward_weights": self.weights}

    def _cached_baseline(self, output_dir):
        try:
            cached = json.loads((Path(output_dir) / BASELINE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return cached["completions"] if cached.get("record") == json.loads(json.dumps(self._record())) else None

    def _save_baseline(self, output_dir):
        from rlhf.files import write_json

        write_json(Path(output_dir) / BASELINE_FILE, {"record": self._record(), "completions": self.baseline})


def attach(trainer, policy, tokenizer, held_out, reward_funcs, reward_weights, temperature, top_p, resumed_from,
           aside=contextlib.nullcontext, stop_token_ids=None):
    """Add a `HeldOutEvaluation` of `held_out` (from `held_out_rows`) to `trainer`; `policy()` returns the model that
    generates (unwrapped; with LoRA, its adapter active), within `aside()` (PPO: not recorded as a rollout), stopping
    at the run's `stop_token_ids` (`rlhf.models.stop_token_ids`). Refused where the weights are sharded (FSDP,
    ZeRO-3): one process alone cannot generate from them."""
    accelerator_state = trainer.accelerator.state
    plugin = getattr(accelerator_state, "deepspeed_plugin", None)
    if getattr(accelerator_state, "fsdp_plugin", None) is not None or (plugin is not None and plugin.zero_stage == 3):
        raise UserError("--eval_prompts is not supported with FSDP or DeepSpeed ZeRO-3 (the weights are sharded "
                        "across processes); drop it and evaluate the checkpoints with evaluate_generations.py")
    rows, row_numbers, where = held_out
    trainer.add_callback(HeldOutEvaluation(trainer, policy, tokenizer, rows, row_numbers, reward_funcs,
                                           reward_weights, where, temperature, top_p, resumed_from, aside,
                                           stop_token_ids))
