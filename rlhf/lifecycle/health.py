"""Health checks while a run trains: a run that cannot learn says so, once, in one line, while it runs.

Every check reads the metrics the trainers already log (`on_log`): no extra generation, no extra forward pass.
Each alarm is raised at most once per run, printed by the main process as one `health:` line that names the metric,
its value, the threshold, the step and the flags to change, logged to TensorBoard as `health/<name>` = 1 (the tag
reads `train/health/<name>`, as every training scalar), and listed in `run_report.json` (`rlhf/lifecycle/report.py`).

The thresholds come from the bundled SmolLM2-135M-Instruct's math quickstart (`python quickstart.py --task math`,
CPU, seed 42; a healthy run that lifts verifier accuracy from ~1% to 20-35%): its range is written beside each
threshold, and it raises no alarm. docs/health.md says what each alarm means and what to do.
"""

import dataclasses
import math

from rlhf.evaluation.metrics import reward_function
from rlhf.evaluation.stats import correlation
from rlhf.rewards.functions import MISSING_EOS_PENALTY

# How many consecutive logs a level must hold before it counts: one noisy batch is not a trend.
WINDOW = 3
# Completions cut off: share of completions that reached --max_completion_length without EOS
# (`completions/clipped_ratio`). Measured (math quickstart, 48 tokens): GRPO 0.19-0.41 per log, PPO 0.31-0.56. TRL
# #5697: 0.97-0.99 at the default 256 tokens, where the gradient vanished. A share that fell by CUT_OFF_FALL or more
# over those logs is a run learning to end its completions, not one stuck: the reward-model quickstart's PPO (64
# tokens, seed 42) went 1.0, 0.88, 0.69, 0.69 as its score rose, while its GRPO stayed at 0.94-1.0 for 9 logs.
CUT_OFF_RATIO = 0.6
CUT_OFF_FALL = 0.1
# No learning signal: share of GRPO groups whose completions all got the same reward (`frac_reward_zero_std`): their
# advantage is 0, so they teach nothing. Measured (4 groups of 8 a step): 0.00-1.00 per log, 1.0 once (step 6),
# never 2 logs in a row above 0.5. With 4 groups the fraction moves in quarters: hence ZERO_STD_WINDOW logs.
# PPO has no groups: the same alarm when every completion of a rollout (every process's) scored the same, the
# condition that zeroes its advantages (`objective/rollout_without_signal`), in each of ZERO_STD_WINDOW rollouts.
# Replayed on 7 math/reward-model PPO runs (docs/results.md): only the one that boxed nothing for 5
# rollouts raises it; seed 1's shipped run (std 0 at rollouts 1, 2 and 4; at 1 and 6 before such rollouts got
# advantages of 0) does not.
# With --use_dynamic_sampling, frac_reward_zero_std describes the groups trained on (those of one reward are dropped):
# the same alarm then reads the groups drawn (`dynamic_sampling/groups_one_reward` / `groups_drawn`), where a share
# of 0.9 costs ten generation batches per step.
ZERO_STD_FRACTION = 0.9
ZERO_STD_WINDOW = 5
# Dynamic sampling that reached --dynamic_sampling_max_gen_batches (`dynamic_sampling/cap_reached`, the share of
# generations) in more than half the generations of each of WINDOW logs: those steps trained on groups of one reward.
CAP_REACHED_SHARE = 0.5
# A reward function that has given every completion the same score at every log since the run began (its
# `rewards/<f>/std` is 0) cannot score them. Measured: boxed_answer's std 0.00-0.98 (0 at one log); boxed_format's
# 0.00-0.49, then 0 from step 6 on, once every completion was boxed: it varied first, so no alarm.
# Reward hacking by length, over the last LENGTH_WINDOW logs: the reward and the mean completion length correlate
# (Pearson) above LENGTH_CORRELATION while both rise, the length by at least LENGTH_RISE of where the window began.
# Measured: correlation 0.40 over the quickstart's 8 logs, the length without trend (25-38 tokens).
LENGTH_WINDOW = 8
LENGTH_CORRELATION = 0.9
LENGTH_RISE = 0.5
# KL from the reference per completion token (GRPO `kl`; PPO `objective/kl` divided by the mean completion length,
# since PPO logs a sum over the completion's tokens), above KL_MAX for WINDOW logs. Measured (beta 0.04, learning
# rate 3e-5): 0.00-0.37 (0, 0.064, 0.19, 0.27, 0.32, 0.30, 0.37, 0.30); PPO (kl_coef 0.05, learning rate 3e-5, 6
# rollouts): 0.00-0.07. No "growing fast" rule: KL triples from one log to the next at that healthy start, so a
# growth rule would fire on every run.
KL_MAX = 1.0
# Entropy collapse: mean entropy per completion token, in nats (GRPO `entropy`; PPO `objective/entropy` divided by
# the mean completion length). Measured (temperature 0.7): GRPO 0.33-0.78, falling; PPO 0.62-0.93. Below ENTROPY_MIN
# the policy samples nearly the same completion every time: GRPO's groups stop varying and PPO stops exploring.
ENTROPY_MIN = 0.05
# A reward being gamed: what one paid reward function pays (its weight x its mean, `rewards/<f>/mean`) falls by
# GAMED_FALL or more between the run's first GAMED_WINDOW logs and its last GAMED_WINDOW while the weighted total
# rises, or while another function moves by as much the way its weight pays (a format term saturating while accuracy
# falls; a penalty falling). A penalty that falls pays more: no alarm. The rule-based rewards score on a 0-1 or -1..1
# scale; at weight 1 what a function pays is its mean. Measured (math quickstart, the seeds' 1 / -1 / -0.5 with
# boxed_format paid at weight 1): healthy runs' boxed_answer fell by at most 0.08 between their first and last 3
# logs (CPU seeds 1, 7; H200 seed 42; the PPO runs); the gamed H200 run at seed 1 by 0.28 (-0.52 -> -1.0 while
# boxed_format rose to 1.0).
# A move counts only where it also exceeds GAMED_NOISE standard errors of the difference of two GAMED_WINDOW-log means,
# the per-log noise estimated from the series' successive differences (von Neumann's estimator). A reward model's
# mean per log jumps with the prompts drawn: the reward-model quickstart's GRPO (4 prompts a step, scores of spread
# ~1.2) moved 0.2-1.1 from one log to the next. Without this, it fired with --missing_eos_penalty 3 at seeds 3, 11 and
# 2 (the reward model's mean 0.17 lower, or the penalty's 0.25 lower, against 2 standard errors of 0.68-0.98) and with
# a penalty of 2 at 11 (the penalty's 0.33 lower, against 0.72), runs that ended more answers than the base and won.
# Replayed on the 30 training logs kept from this runs (both tasks), only those four go. The calibrated runs
# above move smoothly: their noise is below GAMED_FALL, which decides as before (docs/results.md, "A cut-off answer
# costs 3").
GAMED_WINDOW = 3
GAMED_FALL = 0.15
GAMED_NOISE = 2.0
# Held-out evaluation falling (`--eval_prompts`): the latest evaluation's metric (the verifier's `eval/accuracy`, else
# `eval/win_rate`) below the 95% lower bound of the best evaluation's (`eval/accuracy_low`, `eval/win_rate_low`), a
# fall beyond that evaluation's own noise over prompts. Among the trained policy's evaluations (after step 0): the
# starting policy is no checkpoint to end on, and its win rate against itself is 0.5 with no interval. Measured: the
# math quickstart's PPO (16 prompts x 2, seed 42) went 9% -> 31% at rollout 3, then 19%, 12%, 6% by rollout 10, and
# ended on its last policy.
HELD_OUT_METRICS = ("eval/accuracy", "eval/win_rate")
# Under GRPO's --use_dynamic_sampling, TRL's names describe the groups trained on, which leave out the groups of one
# reward (every completion cut off, say); what the policy generates, every group drawn, is logged under these. The
# alarms on what it generates (cut off, the reward rising with length) read them where they are logged.
DRAWN = {"completions/clipped_ratio": "dynamic_sampling/drawn_clipped_ratio",
         "reward": "dynamic_sampling/drawn_reward", "completions/mean_length": "dynamic_sampling/drawn_mean_length"}
# Reward model: held-out pairwise accuracy at or below this is near chance (0.5). Measured: the reward-model
# quickstart reaches 1.00 on 40 held-out pairs (seeds 1-3, docs/results.md).
REWARD_ACCURACY_MIN = 0.6


@dataclasses.dataclass
class Alarm:
    """One health alarm: what `health` lists in run_report.json."""

    name: str
    metric: str
    value: float
    threshold: float
    step: int
    advice: str
    line: str  # the one line printed

    def record(self):
        return {"name": self.name, "metric": self.metric, "value": self.value, "threshold": self.threshold,
                "step": self.step, "advice": self.advice, "line": self.line}


# ---- pure detection functions (unit-tested in tests/test_health.py) ----

def sustained(values, threshold, window, below=False):
    """True when each of the last `window` values is above `threshold` (below it with `below`)."""
    if len(values) < window:
        return False
    last = values[-window:]
    return all(v < threshold for v in last) if below else all(v > threshold for v in last)


def slope(values):
    """Least-squares slope of `values` against their index (per log)."""
    n = len(values)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(values) / n
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / sum((i - mx) ** 2 for i in range(n))


def window_noise(values, window=GAMED_WINDOW):
    """The standard error of the difference between the means of a series' first and last `window` values, its
    per-value noise estimated from successive differences (von Neumann: a trend adds little to it)."""
    if len(values) < 2:
        return 0.0
    variance = sum((b - a) ** 2 for a, b in zip(values, values[1:])) / (2 * (len(values) - 1))
    return math.sqrt(2 * variance / window)


def gamed_reward(means, total, weights, window=GAMED_WINDOW, min_fall=GAMED_FALL, noise=GAMED_NOISE):
    """(the function that fell, how much less it pays, what rose) when a paid reward function's contribution to the
    total (its weight x its mean) fell by `min_fall` or more between the first and the last `window` logs while the
    total rose, or another function moved by `min_fall` or more (in its own units) the way its weight pays: a bonus
    rising, a penalty (a negative weight) falling, a function of weight 0 (logged, not paid) rising. Else None.
    Each move must also exceed `noise` standard errors of its series' window means (`window_noise`): a reward model's
    mean per log jumps with the prompts drawn.
    `means`: {function: [its mean per log]}, `total`: the weighted total per log, `weights`: {function: weight}.
    A penalty that falls pays more, as intended: no alarm."""
    def change(values):
        return sum(values[-window:]) / window - sum(values[:window]) / window

    def weight(name):
        return weights.get(name, 1.0)

    changes = {name: change(values) for name, values in means.items() if len(values) >= 2 * window}
    floor = {name: noise * window_noise(means[name], window) for name in changes}  # a smaller move is noise
    for name, moved in sorted(changes.items(), key=lambda item: weight(item[0]) * item[1]):
        fall = -weight(name) * moved  # how much less it pays (0 for a function of weight 0)
        if fall < min_fall or abs(moved) < floor[name]:
            continue
        risers = [other for other, rise in changes.items()
                  if other != name and (-rise if weight(other) < 0 else rise) >= max(min_fall, floor[other])]
        if risers:
            return name, fall, risers[0]
        if len(total) >= 2 * window and change(total) > 0:
            return name, fall, "the total reward"
    return None


def length_hacking(rewards, lengths, window=LENGTH_WINDOW, min_correlation=LENGTH_CORRELATION, min_rise=LENGTH_RISE):
    """The correlation of reward and completion length over the last `window` logs when both rise together (the
    length by `min_rise` of its value where the window began, and the correlation above `min_correlation`); else
    None."""
    if len(rewards) < window or len(lengths) < window:
        return None
    rewards, lengths = rewards[-window:], lengths[-window:]
    r = correlation(rewards, lengths)
    if r is None or r <= min_correlation or slope(rewards) <= 0 or slope(lengths) <= 0:
        return None
    if lengths[-1] < lengths[0] * (1 + min_rise):
        return None
    return r


def held_out_fell(evaluations):
    """(best, latest) when the latest held-out evaluation's value is below the best one's 95% lower bound, else None.
    `evaluations`: [(step, value, low)] in step order; the starting policy's (step 0) is no candidate for the best,
    and of equal values the earliest is the best."""
    trained = [evaluation for evaluation in evaluations if evaluation[0] > 0]
    if len(trained) < 2:
        return None
    best, latest = max(trained, key=lambda evaluation: evaluation[1]), trained[-1]
    return (best, latest) if latest[1] < best[2] else None


# ---- the monitor: metrics in, alarms out ----

def _per_token(logs, key):
    """GRPO's per-token value of a quantity, or PPO's per-completion sum divided by the mean completion length."""
    if key in logs:
        return logs[key]
    total, length = logs.get(f"objective/{key}"), logs.get("completions/mean_length")
    if total is None or not length:
        return None
    return total / length


class HealthMonitor:
    """Keeps the series the checks need and raises each alarm once. `flags`: the flag values the advice names
    (`max_completion_length`, `kind`: "grpo", "ppo" or "reward")."""

    def __init__(self, flags, raised=()):
        self.flags = flags
        self.series = {}  # metric -> [values, in log order]
        self.alarms = []
        self.raised = set(raised)  # names raised earlier in this run (a resumed launch does not repeat them)
        self.evaluations = []  # the held-out evaluations: (step, value, low) of HELD_OUT_METRICS' first logged
        self.held_out_metric = None

    def observe(self, logs, step):
        """Take one log's metrics; return the alarms this log raises (each name at most once per run). A held-out
        evaluation's entry of the log history (its `eval/` values) goes to `observe_evaluation`."""
        if any(name in logs for name in HELD_OUT_METRICS):
            return self.observe_evaluation(logs, step)
        def add(name, value):
            if value is not None and isinstance(value, (int, float)) and math.isfinite(value):
                self.series.setdefault(name, []).append(float(value))
                return True
            return False

        for key in ("completions/clipped_ratio", "frac_reward_zero_std", "reward", "objective/scores",
                    "completions/mean_length", *DRAWN.values()):
            add(key, logs.get(key))
        per_function = {key: value for key, value in logs.items()
                        if reward_function(key) is not None and isinstance(value, (int, float))}
        for key, value in per_function.items():
            add(key, value)
        add("objective/rollout_without_signal", logs.get("objective/rollout_without_signal"))  # PPO's
        drawn = logs.get("dynamic_sampling/groups_drawn")
        if drawn:  # GRPO's --use_dynamic_sampling: the share of the groups drawn that got one reward
            add("dynamic_sampling/one_reward_share", logs.get("dynamic_sampling/groups_one_reward", 0) / drawn)
            add("dynamic_sampling/cap_reached", logs.get("dynamic_sampling/cap_reached"))
        new_kl = add("kl_per_token", _per_token(logs, "kl"))
        new_entropy = add("entropy_per_token", _per_token(logs, "entropy"))
        fresh = []
        for alarm in self._check(step, new_kl, new_entropy):
            if alarm is not None and alarm.name not in self.raised:
                self.raised.add(alarm.name)
                self.alarms.append(alarm)
                fresh.append(alarm)
        return fresh

    def observe_evaluation(self, metrics, step, best_checkpoint=None, ending_on_best=False):
        """Take one held-out evaluation (its `eval/` values, `rlhf.evaluation.heldout`); return the alarm it raises,
        if any, in a list. `best_checkpoint`: the run's best checkpoint so far (`state.best_model_checkpoint`), named
        in the advice; `ending_on_best`: whether the run ends on it (`--end_on_best_checkpoint`)."""
        name = next(name for name in HELD_OUT_METRICS if name in metrics)
        value, low = metrics[name], metrics.get(f"{name}_low", metrics[name])
        if self.held_out_metric not in (None, name) or not all(map(math.isfinite, (value, low))):
            return []
        self.held_out_metric = name
        self.evaluations.append((int(step), float(value), float(low)))
        fell = held_out_fell(self.evaluations)
        if fell is None or "held_out_fell" in self.raised:
            return []
        (best_step, best, best_low), (step, value, _) = fell
        percent = name == "eval/accuracy"

        def shown(x):
            return f"{x:.1%}" if percent else f"{x:.2f}"

        at_best = best_checkpoint is not None and best_checkpoint.rstrip("/").endswith(f"checkpoint-{best_step}")
        if at_best and ending_on_best:
            advice = f"the run ends on {best_checkpoint} (--end_on_best_checkpoint)"
        elif at_best:
            advice = (f"{best_checkpoint} holds it (checkpoint rotation keeps it): end on it with "
                      f"--end_on_best_checkpoint, or evaluate it with evaluate_generations.py --model_path "
                      f"{best_checkpoint}")
        else:
            advice = (f"step {best_step} was saved in no checkpoint: give --save_steps equal to --eval_steps to keep "
                      "each evaluated policy, with --end_on_best_checkpoint to end on the best"
                      + (f" (the best saved one so far: {best_checkpoint})" if best_checkpoint else ""))
        alarm = self._alarm(
            "held_out_fell", name, value, round(best_low, 6), step,
            f"{advice}; a lower --learning_rate or fewer steps may keep what the policy learnt",
            f"held-out {name.removeprefix('eval/').replace('_', ' ')} fell to {shown(value)}, below the best "
            f"evaluation's 95% interval ({shown(best)} at step {best_step}, lower bound {shown(best_low)})",
            comparison="<", logs=1,
        )
        self.raised.add(alarm.name)
        self.alarms.append(alarm)
        return [alarm]

    def replay(self, log_history):
        """Take the logs of the run before this launch (a resumed run's checkpoint) without raising anything, so that
        the series cover the whole run as an uninterrupted run's do: a check over "every log since the run began" or
        over the last logs then judges the run, not this launch alone."""
        raised, alarms = set(self.raised), list(self.alarms)
        for entry in log_history:
            self.observe(entry, entry.get("step", 0))
        self.raised, self.alarms = raised, alarms

    def _generated(self, key):
        """The series of `key` over what the policy generated: under dynamic sampling, every group drawn (`DRAWN`)."""
        return self.series.get(DRAWN[key]) or self.series.get(key, [])

    def _check(self, step, new_kl, new_entropy):
        s, flags = self.series, self.flags
        clipped = self._generated("completions/clipped_ratio")
        if sustained(clipped, CUT_OFF_RATIO, WINDOW) and clipped[-WINDOW] - clipped[-1] < CUT_OFF_FALL:
            length = flags.get("max_completion_length")
            yield self._alarm(
                "completions_cut_off", "completions/clipped_ratio", clipped[-1], CUT_OFF_RATIO, step,
                "raise --max_completion_length or --missing_eos_penalty",
                f"{clipped[-1]:.0%} of completions hit --max_completion_length {length} without EOS",
            )
        drawn = "dynamic_sampling/one_reward_share"
        zero = s.get(drawn) or s.get("frac_reward_zero_std", [])
        if sustained(zero, ZERO_STD_FRACTION, ZERO_STD_WINDOW):
            yield self._alarm(
                "no_learning_signal", "groups_one_reward / groups_drawn" if drawn in s else "frac_reward_zero_std",
                zero[-1], ZERO_STD_FRACTION, step,
                "use a reward that varies within a group (--reward_funcs), or raise --num_generations or "
                "--temperature",
                f"in {zero[-1]:.0%} of {'the groups drawn' if drawn in s else 'groups'} every completion got the "
                "same reward, so their advantage is 0 and they teach nothing", logs=ZERO_STD_WINDOW,
            )
        cap = s.get("dynamic_sampling/cap_reached", [])
        if sustained(cap, CAP_REACHED_SHARE, WINDOW):
            limit = flags.get("dynamic_sampling_max_gen_batches")
            yield self._alarm(
                "dynamic_sampling_cap_reached", "dynamic_sampling/cap_reached", cap[-1], CAP_REACHED_SHARE, step,
                "raise --dynamic_sampling_max_gen_batches, or make rewards differ within more groups (the advice of "
                "no_learning_signal)",
                f"dynamic sampling found too few groups whose rewards differ in {limit} generation batches in "
                f"{cap[-1]:.0%} of generations, so those steps trained on groups of one reward",
            )
        if sustained(s.get("objective/rollout_without_signal", []), 0.5, ZERO_STD_WINDOW):  # PPO's: no groups
            yield self._alarm(
                "no_learning_signal", "objective/rollout_without_signal", 1.0, 1.0, step,
                "use a reward that varies across completions (--reward_funcs), or more --prompts_per_rollout or a "
                "higher --temperature",
                "in each rollout every completion got the same score, so the rollout gives no advantage",
                comparison="==", logs=ZERO_STD_WINDOW,
            )
        for key, values in s.items():
            # Constant since the run began: it cannot score these completions. A reward that every completion has
            # come to earn in full (a format learnt) varied before it saturated, and is no alarm.
            constant = sustained(values, 1e-8, max(WINDOW, len(values)), below=True)
            function = reward_function(key, "std")
            # --missing_eos_penalty's is 0 wherever nothing was cut off: a penalty not taken, not a reward that
            # cannot score.
            if function is not None and constant and function != MISSING_EOS_PENALTY:
                yield self._alarm(
                    f"reward_constant/{function}", key, values[-1], 0.0, step,
                    f"check that --reward_funcs {function} can score these completions (its data columns, the "
                    "prompt's instructions), or drop it",
                    f"reward function {function} gave every completion the same score",
                    comparison="==",
                )
        reward = s.get("reward") or s.get("objective/scores", [])
        means = {reward_function(key, "mean"): values for key, values in s.items()
                 if reward_function(key, "mean") is not None}
        weights = flags.get("reward_weights") or {}
        gamed = gamed_reward(means, reward, weights)
        if gamed is not None:
            function, fall, riser = gamed
            weight = weights.get(function, 1.0)  # the fall is of what it pays: its weight x its mean
            moved, metric = f"fell by {fall:.2f}", f"rewards/{function}/mean"
            if weight != 1:
                direction = "rose" if weight < 0 else "fell"
                moved = f"{direction} by {fall / abs(weight):.2f} ({fall:.2f} at weight {weight:g})"
                metric = f"{weight:g} x {metric}"
            rose = f"(weight {weights[riser]:g}) fell" if weights.get(riser, 0.0) < 0 else "rose"
            yield self._alarm(
                "reward_gamed", f"fall of {metric}", fall, GAMED_FALL, step,
                "check completions by hand (--log_completions) and what each outcome earns (docs/rewards.md): pay a "
                "format term only with a correct answer, a wrong answer no more than a missing one",
                f"reward function {function} {moved} since the run began while {riser} {rose}: the "
                "policy may be earning the reward without doing what it measures", logs=1,
            )
        generated, length = self._generated("reward") or s.get("objective/scores", []), self._generated(
            "completions/mean_length")
        r = length_hacking(generated, length)
        if r is not None:
            yield self._alarm(
                "reward_hacking_length", "correlation(reward, completions/mean_length)", r, LENGTH_CORRELATION, step,
                "check completions by hand (--log_completions); lower --max_completion_length or add a length "
                "penalty to the reward",
                f"the reward rises with completion length ({length[-LENGTH_WINDOW]:.0f} -> {length[-1]:.0f} "
                f"tokens over {LENGTH_WINDOW} logs): the policy may be exploiting length rather than quality",
                logs=1,
            )
        kl = s.get("kl_per_token", [])
        if new_kl and sustained(kl, KL_MAX, WINDOW):
            control = "--beta" if flags.get("kind") == "grpo" else "--kl_coef (or set --target_kl)"
            yield self._alarm(
                "kl_runaway", "kl per token", kl[-1], KL_MAX, step, f"lower --learning_rate or raise {control}",
                "the policy has drifted far from the reference model",
            )
        entropy = s.get("entropy_per_token", [])
        if new_entropy and sustained(entropy, ENTROPY_MIN, WINDOW, below=True):
            yield self._alarm(
                "entropy_collapse", "entropy per token", entropy[-1], ENTROPY_MIN, step,
                "lower --learning_rate, raise --temperature, or resume from an earlier checkpoint",
                "the policy samples nearly the same tokens every time (entropy collapse)",
                comparison="<",
            )

    def reward_accuracy(self, accuracy, num_pairs, step):
        """The reward model's held-out pairwise accuracy, checked once at the end: near chance is an alarm."""
        if accuracy is None or accuracy > REWARD_ACCURACY_MIN or "reward_accuracy_near_chance" in self.raised:
            return None
        alarm = self._alarm(
            "reward_accuracy_near_chance", "held-out pairwise accuracy", accuracy, REWARD_ACCURACY_MIN, step,
            "train longer (--max_steps, --num_train_epochs) or on more pairs (--max_samples), or check that chosen "
            "and rejected are not swapped in the data",
            f"the reward model ranks {accuracy:.0%} of {num_pairs} held-out pairs right: no better than chance (50%)",
            comparison="<=", logs=1,
        )
        self.raised.add(alarm.name)
        self.alarms.append(alarm)
        return alarm

    def _alarm(self, name, metric, value, threshold, step, advice, what, comparison=">", logs=WINDOW):
        window = f" for {logs} logs" if logs > 1 else ""
        line = f"health: {what} ({metric} {value:.3g} {comparison} {threshold:g}{window}, step {step}): {advice}"
        return Alarm(name, metric, round(float(value), 6), threshold, int(step), advice, line)


def health_callback(flags, raised=()):
    """The `TrainerCallback` that feeds each log to a `HealthMonitor`, prints each new alarm (main process) and adds
    `health/<name>` = 1 to the log, which the reporting callbacks placed after it (TensorBoard) then write."""
    from transformers import TrainerCallback

    from rlhf.processes import is_main_process
    from rlhf.trl_compat import say

    class HealthCallback(TrainerCallback):
        def __init__(self):
            self.monitor = HealthMonitor(flags, raised)
            self.reporters = []  # the reporting callbacks after it (log_after_training writes beside them)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs:
                return
            alarms = self.monitor.observe(logs, state.global_step) + self._evaluations(args, state)
            for alarm in alarms:
                logs[f"health/{alarm.name}"] = 1.0
                if is_main_process():
                    say(alarm.line)

        # The held-out evaluation (`rlhf.evaluation.heldout`) appends its entries to the log history from its own
        # on_step_end, without an on_log: they are read from there at the next log, step end or the end of training.
        def on_step_end(self, args, state, control, **kwargs):
            self._report(args, state, control, self._evaluations(args, state))

        def on_train_end(self, args, state, control, **kwargs):
            self._report(args, state, control, self._evaluations(args, state))

        def _evaluations(self, args, state):
            """The alarms of the held-out evaluations logged since the last one this monitor took."""
            taken = self.monitor.evaluations[-1][0] if self.monitor.evaluations else -1
            new = []
            for entry in reversed(state.log_history):  # the newest first, back to the last one taken
                if any(name in entry for name in HELD_OUT_METRICS):
                    if entry.get("step", 0) <= taken:
                        break
                    new.append(entry)
            return [alarm for entry in reversed(new) for alarm in self.monitor.observe_evaluation(
                entry, entry["step"], state.best_model_checkpoint, getattr(args, "end_on_best_checkpoint", False))]

        def _report(self, args, state, control, alarms):
            """Print the alarms and write `health/<name>` = 1 through the reporting callbacks (not in a log)."""
            for alarm in alarms:
                if is_main_process():
                    say(alarm.line)
                for reporter in self.reporters:
                    reporter.on_log(args, state, control, logs={f"health/{alarm.name}": 1.0})

    return HealthCallback()


def log_after_training(reporters, step, alarm):
    """Write `health/<name>` = 1 for an alarm raised once training has ended (the reward model's accuracy), when the
    run's TensorBoard writer is closed: a new event file in its folder (`reporters`: the run's reporting callbacks)."""
    folder = next((reporter.logging_dir for reporter in reporters if getattr(reporter, "logging_dir", None)), None)
    if folder is None:
        return
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=folder)
    writer.add_scalar(f"train/health/{alarm.name}", 1.0, step)
    writer.close()
