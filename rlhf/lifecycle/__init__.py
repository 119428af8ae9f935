"""A run's life in its output folder: start (fresh, resume, continue), train under the guard, save, finish.

run          `start_run` -> `record` -> `train` -> `save` -> `finish`: what a launch does with its output folder
guard        Ctrl-C/SIGTERM in training (finish the step, save, exit 130) and non-finite values (stop, exit 1)
signals      Ctrl-C and SIGTERM, in one place
lock         one run per output folder (an OS lock; a dead run's is taken over)
checkpoints  the newest complete checkpoint, and the trainer-state files PPO writes in transformers' formats
manifest     run_manifest.json: what produced an output folder
health       health checks during training: one line per alarm, health/ scalars
report       run_report.json / run_report.md: settings, speed, memory, alarms, evaluations

The lower layers (data, models, rewards, evaluation, PPO) take nothing from here but `checkpoints`.
"""
