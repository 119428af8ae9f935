r"""Align a causal LM to a frozen reward model with GRPO (TRL's GRPOTrainer).

Usage:

    python train_grpo.py                                  # SmolLM2-135M-SFT-Only on the first 10k ORCA prompts
    python train_grpo.py --use_peft                       # LoRA adapter instead of all weights
    python train_grpo.py --config configs/grpo.yaml --learning_rate 1e-6
    python train_grpo.py --model_name_or_path ./my_sft --reward_model_name_or_path ./reward_model_output \
        --dataset_name prompts.jsonl --max_steps 100 --output_dir ./grpo_run

Re-running the same command on an `--output_dir` with checkpoints resumes from the newest one; on a finished run
it has nothing to do, and with a higher --max_steps (or --num_train_epochs) it continues the run.
`--model_name_or_path` may be a LoRA adapter folder: training starts from it merged into its base.
"""

import functools
import logging

from rlhf import preflight
from rlhf.checks import prompt_room
from rlhf.cli import exit_on_user_error, parse_args
from rlhf.data import build_prompt_dataset, check_prompts_fill_batches, load_rows
from rlhf.lifecycle.run import start_run
from rlhf.models import (
    generation_config,
    load_tokenizer,
    peft_config,
    reward_model_dtype,
    sampling_note,
    stop_token_ids,
    trainable_model_path,
    trained_model_kwargs,
)
from rlhf.processes import is_main_process, on_gpu
from rlhf.rewards.functions import MissingEOSPenalty, check_reward_columns, load_reward_funcs
from rlhf.rewards.reward_model import reward_model_scorer

SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "repetition_penalty")  # TRL's GRPOTrainer passes them to generate


def main(model_args, data_args, reward_args, training_args):
    configs = (model_args, data_args, reward_args, training_args)
    preflight.grpo(*configs)  # every check before any weights load or any folder is taken
    scorer_dtype = reward_model_dtype(reward_args.reward_model_dtype, model_args.dtype, on_gpu(training_args.use_cpu))
    # The policy is passed by name so that TRL loads the frozen reference copy (beta > 0) the same way.
    training_args.model_init_kwargs = trained_model_kwargs(model_args, training_args.trust_remote_code)
    run = start_run("train_grpo.py", configs)  # the output folder: fresh, resume, continue, or nothing to do

    from transformers import set_seed

    from config import Sampling
    from rlhf.trl_compat import ResumableGRPOTrainer, add_reward_func

    set_seed(training_args.seed)

    ################
    # Dataset (before the models load: a wrong column costs seconds)
    ################
    tokenizer = load_tokenizer(model_args.model_name_or_path, training_args.trust_remote_code)
    rows = load_rows(data_args.dataset_name, data_args.dataset_train_split, data_args.max_samples)
    check_reward_columns(reward_args.reward_funcs, data_args.dataset_name, rows.column_names)
    room = prompt_room([model_args.model_name_or_path], "--max_completion_length",
                       training_args.max_completion_length, training_args.trust_remote_code)
    train_dataset, _, _ = build_prompt_dataset(rows, tokenizer, data_args.max_prompt_length, data_args.system_prompt,
                                               room, data_args.append_system_prompt)
    per_generation = training_args.generation_batch_size // training_args.num_generations  # prompts
    flag = ("--prompts_per_generation" if training_args.prompts_per_step
            else "--generation_batch_size / num_generations")
    note = check_prompts_fill_batches(len(train_dataset), per_generation, flag, "generation")
    if note and is_main_process():
        print(note, flush=True)
    if training_args.eval_prompts:  # held-out prompts, drawn before any model loads
        from rlhf.evaluation import heldout

        held_out = heldout.held_out_rows(training_args, data_args, tokenizer, reward_args.reward_funcs, room)

    ################
    # Rewards (user functions are imported before the reward model loads)
    ################
    load_scorer = functools.partial(reward_model_scorer, reward_args.reward_model_name_or_path, scorer_dtype,
                                    training_args.trust_remote_code, training_args.device)
    # where TRL's generation stops (the model TRL loads: an adapter folder's base), so that the rewards see it too
    stops = stop_token_ids(tokenizer, model_args.model_name_or_path, trust_remote_code=training_args.trust_remote_code)
    # TRL passes these sampling flags to every generate call, over the model's own generation config
    note = sampling_note("GRPO", model_args.model_name_or_path,
                         generation_config(model_args.model_name_or_path, training_args.trust_remote_code),
                         {name: getattr(training_args, name) for name in SAMPLING_FLAGS})
    if note and is_main_process():
        print(note, flush=True)
    reward_funcs = load_reward_funcs(reward_args.reward_funcs, load_scorer, reward_args.boxed_rewards, stops)

    ################
    # Training
    ################
    run.record()
    trainer = ResumableGRPOTrainer(
        model=str(trainable_model_path(model_args.model_name_or_path, training_args.output_dir,
                                       training_args.trust_remote_code)),
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config(model_args),
    )
    if training_args.missing_eos_penalty is not None:
        add_reward_func(trainer, MissingEOSPenalty(training_args.missing_eos_penalty, stops))
    if training_args.eval_prompts:
        heldout.attach(trainer, lambda: trainer.model, tokenizer, held_out, reward_funcs, training_args.reward_weights,
                       Sampling.temperature, Sampling.top_p, run.checkpoint, stop_token_ids=stops)
    run.train(trainer)

    if training_args.end_on_best_checkpoint:  # the weights of the best checkpoint by the held-out evaluation
        from rlhf.lifecycle.report import end_on_best_checkpoint

        end_on_best_checkpoint(run.report, trainer.model, trainer.state, model_args.use_peft)
    # With LoRA this saves the adapter; docs/training.md shows how to merge it into a full model.
    run.save(trainer, tokenizer)
    run.finish(trainer, f"Saved the final {'adapter' if model_args.use_peft else 'model'} to "
               f"{training_args.output_dir}.")


def configs():
    """The config classes, imported after the flag table is read (`rlhf.cli.parse_args`): config.py loads TRL."""
    from config import GRPOTrainingConfig, ModelArguments, PromptDataArguments, RewardArguments

    return ModelArguments, PromptDataArguments, RewardArguments, GRPOTrainingConfig


@exit_on_user_error
def cli(args=None):
    main(*parse_args(configs, args, __doc__, preflight.quick_grpo))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
