"""Evaluation: of saved models (evaluate_generations.py), of the policy during training, and reading training logs.

generation  held-out prompts, sampling completions, scoring them
report      the evaluation's table and JSON report
stats       summaries, bootstrap intervals, win rates, accuracy gains, correlation
heldout     held-out evaluation during GRPO and PPO training: eval/ scalars with intervals, the best checkpoint
metrics     the TensorBoard reader: GRPO/PPO tags onto common columns (plots, health checks)
"""
