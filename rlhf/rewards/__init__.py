"""What a completion earns: the reward model, the rule-based reward functions and the math verifier under them.

reward_model  the reward model: loading, scoring, accuracy, saving a trained one
functions     --reward_funcs: the built-in rewards (`REGISTRY`), user functions by import path, what each outcome earns
verifier      the math verifier: a completion's final answer, and whether it equals the reference
"""
