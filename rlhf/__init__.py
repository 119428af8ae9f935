"""Shared code for the training, evaluation and plotting scripts.

cli       parsing (TrlParser), one-line user errors with exit code 2
data      dataset loading, schema detection, conversational prompts
models    tokenizer, policy, LoRA and frozen reward-model loading
run       output folder checks, run manifest, checkpoint discovery
trl_compat every TRL import that can move between releases
"""
