"""Train the frozen reward model that GRPO and PPO score with (TRL's RewardTrainer, Bradley-Terry loss).

Usage:

    python train_reward_model.py                          # SmolLM2-135M-SFT-Only on the first 10k ORCA pairs
    python train_reward_model.py --dataset_name data/preferences.jsonl --max_samples 0   # the shipped set
    python train_reward_model.py --use-lora               # LoRA, merged into a plain model at the end

Writes `./reward_model_output` (where train_grpo.py and train_ppo.py look by default): a sequence classifier with
one output, its tokenizer and chat template, and `reward_accuracy.json` with the held-out pairwise `accuracy`.
Re-running the same command on an `--output_dir` with checkpoints resumes from the newest one.
"""

import json
import logging
from pathlib import Path

from config import ModelArguments, PreferenceDataArguments, RewardTrainingConfig
from rlhf.cli import exit_on_user_error, parse_args
from rlhf.data import build_preference_dataset, load_rows
from rlhf.guard import guarded_train
from rlhf.models import check_model_source, load_kwargs, load_tokenizer, lora_config
from rlhf.reward import ensure_distinct_pad, pairwise_accuracy, score_conversations, tokenize_pairs
from rlhf.run import is_main_process, mark_finished, prepare_output_dir, write_manifest

ACCURACY_FILE = "reward_accuracy.json"


def main(model_args, data_args, training_args):
    check_model_source(model_args.model_name_or_path, "model", "--model_name_or_path")
    training_args.model_init_kwargs = load_kwargs(model_args.dtype, training_args.trust_remote_code)
    resume_from = prepare_output_dir(training_args.output_dir)

    from rlhf.trl_compat import RewardTrainer

    ################
    # Dataset: chosen / rejected conversations, and a held-out split for pairwise accuracy
    ################
    tokenizer = load_tokenizer(model_args.model_name_or_path, training_args.trust_remote_code, padding_side="right")
    ensure_distinct_pad(tokenizer)  # the score is read at the final EOS, so EOS must not count as padding
    rows = load_rows(data_args.dataset_name, data_args.dataset_split, data_args.max_samples)
    pairs, schema = build_preference_dataset(rows)
    held_out = None
    if data_args.eval_samples and len(pairs) > data_args.eval_samples:
        split = pairs.train_test_split(test_size=data_args.eval_samples, seed=training_args.seed)
        pairs, held_out = split["train"], split["test"]
    print(f"Schema '{schema}': {len(pairs)} training pairs, {len(held_out) if held_out else 0} held out.")

    ################
    # Training
    ################
    write_manifest(training_args.output_dir, "train_reward_model.py", (model_args, data_args, training_args), resume_from)
    trainer = RewardTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=tokenize_pairs(pairs, tokenizer),
        processing_class=tokenizer,
        peft_config=lora_config(model_args, task_type="SEQ_CLS"),
    )
    guarded_train(trainer, training_args.output_dir, resume_from)

    ################
    # Save a plain sequence classifier (LoRA merged, score head kept) and its held-out accuracy
    ################
    model = trainer.model.merge_and_unload() if model_args.use_lora else trainer.model
    model.config.pad_token_id = tokenizer.pad_token_id
    if not model_args.use_lora:
        trainer.save_model(training_args.output_dir)
    if not is_main_process():
        return
    if model_args.use_lora:
        model.save_pretrained(training_args.output_dir)
        trainer.create_model_card(model_name=Path(training_args.output_dir).name)
    tokenizer.save_pretrained(training_args.output_dir)
    if held_out is not None:
        report = held_out_accuracy(model, tokenizer, held_out)
        Path(training_args.output_dir, ACCURACY_FILE).write_text(json.dumps(report, indent=2) + "\n")
        print(f"Held-out pairwise accuracy: {report['accuracy']:.3f} on {report['num_pairs']} pairs.")
    mark_finished(training_args.output_dir, global_step=trainer.state.global_step)
    print(f"Saved the reward model to {training_args.output_dir}.")


def held_out_accuracy(model, tokenizer, pairs):
    chosen = score_conversations(model, tokenizer, pairs["chosen"])
    rejected = score_conversations(model, tokenizer, pairs["rejected"])
    margins = [c - r for c, r in zip(chosen, rejected)]
    return {
        "accuracy": pairwise_accuracy(chosen, rejected),
        "num_pairs": len(pairs),
        "mean_margin": sum(margins) / len(margins),
        "mean_chosen_reward": sum(chosen) / len(chosen),
        "mean_rejected_reward": sum(rejected) / len(rejected),
    }


@exit_on_user_error
def cli(args=None):
    main(*parse_args((ModelArguments, PreferenceDataArguments, RewardTrainingConfig), args, __doc__))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
