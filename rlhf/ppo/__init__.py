"""PPO, the package's own trainer (derived from TRL 1.12's `PPOTrainer`, Apache-2.0).

trainer     `PPOTrainer`: its parts set up, the loop of rollouts, the logs
rollout     one rollout's steps: generate and score, advantages, PPO epochs (a base of `PPOTrainer`)
checkpoint  its checkpoints and resume (a base of `PPOTrainer`)
maths       PPO's maths as pure functions (KL-shaped rewards, GAE, whitening, clipped losses) and the models' passes
models      what train_ppo.py loads around the trainer: the models, the tokenizer check, reward functions as its reward
"""
