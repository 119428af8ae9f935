r"""Align a causal LM to a frozen reward model with PPO (the package's own, copied from TRL 1.12).

Four models: the policy (trained), a frozen reference (KL penalty), the frozen reward model and a value model
(trained, starting from the reward model). With LoRA the reference is the policy with its adapter disabled.
`--reward_funcs` scores with GRPO's reward functions instead or as well (the math verifier, your own); without a
reward model the value model starts from the policy, with a new one-output head.

Usage:

    python train_ppo.py                                   # SmolLM2-135M-SFT-Only on the first 10k ORCA prompts
    python train_ppo.py --use_peft
    python train_ppo.py --target_kl 6                      # adaptive KL coefficient instead of a fixed one
    python train_ppo.py --config my_ppo.yaml --total_episodes 2000
    python train_ppo.py --dataset_name data/math_train.jsonl --reward_funcs boxed_answer boxed_format \
        --reward_weights 1 0                             # the verifier pays; boxed_format is logged, not paid

The reward model must share the policy's tokenizer: PPO feeds it the policy's token ids (GRPO has no such limit).
Re-running the same command on an `--output_dir` with checkpoints resumes from the newest one; on a finished run
it has nothing to do, and with a higher --total_episodes (or --num_train_epochs) it continues the run.
"""

import logging

from rlhf import preflight
from rlhf.batches import ppo_rollouts
from rlhf.checks import prompt_room
from rlhf.cli import exit_on_user_error, parse_args
from rlhf.data import build_prompt_dataset, check_prompts_fill_batches, load_rows, tokenize_prompts
from rlhf.lifecycle.run import start_run
from rlhf.models import peft_config, sampling_note, stop_token_ids
from rlhf.processes import is_main_process
from rlhf.rewards.functions import check_reward_columns, load_reward_funcs
from rlhf.rewards.reward_model import ensure_distinct_pad


def main(model_args, data_args, training_args):
    # Imported here, inside cli(): after the flags are parsed, so that --help and a flag's error come at once.
    from config import Sampling
    from rlhf.ppo.models import PPORewards, load_ppo_models
    from rlhf.ppo.trainer import VALUE_MODEL_DIR, PPOTrainer, check_critic_warmup

    configs = (model_args, data_args, training_args)
    tokenizer = preflight.ppo(*configs)  # every check before any weights load or any folder is taken
    reward_funcs = training_args.reward_funcs
    run = start_run("train_ppo.py", configs)  # the output folder: fresh, resume, continue, or nothing to do
    resume_from = run.checkpoint

    from transformers import set_seed

    set_seed(training_args.seed)
    # PPO masks every pad-id token: a pad equal to EOS or another end would hide the ends.
    ensure_distinct_pad(tokenizer, stop_token_ids(tokenizer, model_args.model_name_or_path, training_args.stop_token,
                                                  training_args.stop_token_id, training_args.trust_remote_code))

    ################
    # Dataset: chat-templated prompts, tokenized
    ################
    rows = load_rows(data_args.dataset_name, data_args.dataset_train_split, data_args.max_samples)
    check_reward_columns(reward_funcs, data_args.dataset_name, rows.column_names)
    room = prompt_room([model_args.model_name_or_path], "--max_completion_length",
                       training_args.max_completion_length, training_args.trust_remote_code)
    prompts, _, _ = build_prompt_dataset(rows, tokenizer, data_args.max_prompt_length, data_args.system_prompt, room,
                                         data_args.append_system_prompt)
    train_dataset = tokenize_prompts(prompts, tokenizer)
    note = check_prompts_fill_batches(len(train_dataset), training_args.prompts_per_rollout, "--prompts_per_rollout",
                                      "rollout")
    if note and is_main_process():
        print(note, flush=True)
    check_critic_warmup(training_args.critic_warmup, ppo_rollouts(
        training_args.total_episodes, training_args.num_train_epochs, len(train_dataset),
        training_args.prompts_per_rollout))
    if training_args.eval_prompts:  # held-out prompts, drawn before any model loads
        from rlhf.evaluation import heldout

        held_out = heldout.held_out_rows(training_args, data_args, tokenizer, reward_funcs, room)

    ################
    # Models (the trainer loads a checkpoint's trained weights when resuming)
    ################
    run.record()
    policy, ref_policy, reward_model, value_model = load_ppo_models(model_args, training_args, tokenizer,
                                                                    resuming=resume_from is not None)
    # where completions end, read from the policy loaded: as PPOTrainer generates and cuts them
    stops = stop_token_ids(tokenizer, policy, training_args.stop_token, training_args.stop_token_id)
    note = sampling_note("PPO", model_args.model_name_or_path, policy.generation_config,
                         {"temperature": training_args.temperature, "top_p": training_args.top_p})
    if note and is_main_process():
        print(note, flush=True)
    functions = load_reward_funcs(reward_funcs, lambda: reward_model, training_args.boxed_rewards, stops)
    if reward_funcs != ["reward_model"] or training_args.reward_weights:  # else TRL scores with the model alone
        reward_model = PPORewards(reward_funcs, functions, training_args.reward_weights, tokenizer, prompts,
                                  train_dataset["input_ids"], stops)

    ################
    # Training
    ################
    trainer = PPOTrainer(
        args=training_args,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref_policy,
        reward_model=reward_model,
        value_model=value_model,
        train_dataset=train_dataset,
        peft_config=peft_config(model_args),
    )
    if training_args.eval_prompts:  # scored by the rewards PPO trains on
        from rlhf.rewards.reward_model import RewardModelScorer

        reward_path = training_args.reward_model_name_or_path
        scorers = [RewardModelScorer(func, tokenizer, reward_path) if name == "reward_model" else func
                   for name, func in zip(reward_funcs, functions)]
        heldout.attach(trainer, lambda: trainer.trained_policy, tokenizer, held_out, scorers,
                       training_args.reward_weights, Sampling.temperature, Sampling.top_p, resume_from,
                       aside=trainer.generating_aside, stop_token_ids=trainer.stop_token_ids)
    run.train(trainer)  # from the checkpoint when resuming

    if training_args.end_on_best_checkpoint:  # the policy of the best checkpoint by the held-out evaluation
        from rlhf.lifecycle.report import end_on_best_checkpoint

        end_on_best_checkpoint(run.report, trainer.trained_policy, trainer.state, trainer.is_peft_model,
                               kept=f"the value model in {VALUE_MODEL_DIR}/ is the last step's")
    run.save(trainer, tokenizer)  # the policy (the adapter with LoRA)
    trainer.save_value_model(f"{training_args.output_dir}/{VALUE_MODEL_DIR}")
    run.finish(trainer, f"Saved the final policy to {training_args.output_dir} and the value model to "
               f"{VALUE_MODEL_DIR}/ in it.", episode=trainer.state.episode)


def configs():
    """The config classes, imported after the flag table is read (`rlhf.cli.parse_args`): config.py loads TRL."""
    from config import PPOModelArguments, PPOTrainingConfig, PromptDataArguments

    return PPOModelArguments, PromptDataArguments, PPOTrainingConfig


@exit_on_user_error
def cli(args=None):
    main(*parse_args(configs, args, __doc__, preflight.quick_ppo))


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cli()
