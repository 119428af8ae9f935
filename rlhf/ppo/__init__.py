"""PPO, the package's own trainer (derived from TRL 1.12's `PPOTrainer`, Apache-2.0).

trainer  `PPOTrainer`: one rollout top to bottom (generate and score, advantages, PPO epochs, logs), its checkpoints
maths    PPO's maths as pure functions (KL-shaped rewards, GAE, whitening, clipped losses) and the models' passes
models   what train_ppo.py loads around the trainer: the models, the tokenizer check, reward functions as its reward
"""
