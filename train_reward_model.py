r"""Train the frozen reward model that GRPO and PPO score with (TRL's RewardTrainer, Bradley-Terry loss).

Usage:

    python train_reward_model.py                          # SmolLM2-135M-SFT-Only on the first 10k ORCA pairs
    python train_reward_model.py --dataset_name data/preferences.jsonl --max_samples 0   # the shipped set
    python train_reward_model.py --use_peft               # LoRA, merged into a plain model at the end

Writes `./reward_model_output` (where train_grpo.py and train_ppo.py look by default): a sequence classifier with
one output, its tokenizer and chat template, and `reward_accuracy.json` with the held-out pairwise `accuracy`.
Re-running the same command on an `--output_dir` with checkpoints resumes from the newest one; on a finished run
it has nothing to do, and with a higher --max_steps (or --num_train_epochs) it continues the run.
"""

import json
import logging
from pathlib import Path

from rlhf import preflight
from rlhf.cli import exit_on_user_error, parse_args
from rlhf.data import build_preference_dataset, load_rows
from rlhf.lifecycle.run import start_run
from rlhf.models import load_tokenizer, peft_config, trainable_model_path, trained_model_kwargs
from rlhf.processes import is_main_process
from rlhf.rewards.reward_model import (
    ensure_distinct_pad,
    held_out_accuracy,
    held_out_size,
    save_reward_model,
    tokenize_pairs,
)

ACCURACY_FILE = "reward_accuracy.json"


def main(model_args, data_args, training_args):
    configs = (model_args, data_args, training_args)
    preflight.reward_model(model_args, training_args)  # every check before any weights load or any folder is taken
    tokenizer = load_tokenizer(model_args.model_name_or_path, training_args.trust_remote_code, padding_side="right")
    ensure_distinct_pad(tokenizer)  # the score is read at the final EOS, so EOS must not count as padding
    training_args.model_init_kwargs = trained_model_kwargs(model_args, training_args.trust_remote_code,
                                                           tokenizer.pad_token_id)
    run = start_run("train_reward_model.py", configs)  # the output folder: fresh, resume, continue, or nothing to do

    from rlhf.trl_compat import RewardTrainer

    ################
    # Dataset: chosen / rejected conversations, and a held-out split for pairwise accuracy
    ################
    rows = load_rows(data_args.dataset_name, data_args.dataset_train_split, data_args.max_samples)
    pairs, schema = build_preference_dataset(rows)
    size, note = held_out_size(len(pairs), data_args.eval_samples)
    held_out = None
    if size:
        split = pairs.train_test_split(test_size=size, seed=training_args.seed)
        pairs, held_out = split["train"], split["test"]
    print(f"Schema '{schema}': {len(pairs)} training pairs, {size or 'none'} held out"
          + (f" ({note})." if note else "."))
    train_dataset = tokenize_pairs(pairs, tokenizer, training_args.max_length)

    ################
    # Training
    ################
    run.record()
    trainer = RewardTrainer(
        model=str(trainable_model_path(model_args.model_name_or_path, training_args.output_dir,
                                       training_args.trust_remote_code)),
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config(model_args, task_type="SEQ_CLS"),
    )
    run.train(trainer)

    ################
    # Save a plain sequence classifier (LoRA merged, score head kept) and its held-out accuracy
    ################
    model = save_reward_model(
        trainer, model_args, tokenizer, training_args.output_dir, training_args.trust_remote_code
    )
    if held_out is not None and is_main_process():
        report = held_out_accuracy(model, tokenizer, held_out)
        Path(training_args.output_dir, ACCURACY_FILE).write_text(json.dumps(report, indent=2) + "\n")
        print(f"Held-out pairwise accuracy: {report['accuracy']:.3f} on {report['num_pairs']} pairs.")
        run.check_reward_accuracy(trainer, report["accuracy"], report["num_pairs"])
    run.finish(trainer, f"Saved the reward model to {training_args.output_dir}.")


def configs():
    """The config classes, imported after the flag table is read (`rlhf.cli.parse_args`): config.py loads TRL."""
    from config import ModelArguments, PreferenceDataArguments, RewardTrainingConfig

    return ModelArguments, PreferenceDataArguments, RewardTrainingConfig


@exit_on_user_error
def cli(args=None):
    main(*parse_args(configs, args, __doc__, preflight.quick_reward_model))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
