"""What the package's PPO needs of transformers' `Trainer` beyond its public API, checked against transformers 5.23.0.

`rlhf.ppo_trainer.PPOTrainer` (as TRL's PPO did) subclasses `Trainer` for its optimizer and scheduler, callbacks,
logging and checkpoints, but runs its own loop and skips `Trainer.__init__`. Those methods read attributes that
`Trainer.__init__` (or its `create_accelerator_and_postprocess`) sets, and PPO calls two private methods: all of it is
here, and `tests/test_trl_compat.py` fails, naming the attribute or method, when transformers changes one of them.
"""

from transformers import Trainer

# Set by `Trainer.__init__` and read by the Trainer methods PPO calls, with the values PPO's run has (no
# hyperparameter search, no FLOPs counted, a model loaded whole in each process, the optimizer PPO builds).
TRAINER_INIT_ATTRIBUTES = {
    "is_distributed_loading_by_transformers": False,  # `_save` reads it in every process but the first
    "optimizer_cls_and_kwargs": None,  # `create_optimizer`: None builds the one `--optim` names
    "current_flos": 0,  # `_save_checkpoint` stores it in trainer_state.json
    "hp_search_backend": None,  # `_save_checkpoint`: not inside a hyperparameter search
    "hub_model_id": None,  # `_save_checkpoint`: no push to the Hub (train_ppo.py refuses --push_to_hub)
}
# Set by `create_accelerator_and_postprocess` from the accelerator's state; saving and the scheduler read them.
ENGINE_ATTRIBUTES = ("is_deepspeed_enabled", "is_fsdp_enabled")
# Set by `Trainer.__init__`, and to the DeepSpeed engine by the Trainer's own loop: DeepSpeed's saving reads them.
WRAPPED_MODEL_ATTRIBUTES = ("deepspeed", "model_wrapped")


def init_trainer_attributes(trainer, accelerator):
    """Set on `trainer` what `Trainer.__init__` would have that the Trainer methods PPO calls read."""
    for name, value in TRAINER_INIT_ATTRIBUTES.items():
        setattr(trainer, name, value)
    trainer.is_deepspeed_enabled = getattr(accelerator.state, "deepspeed_plugin", None) is not None
    trainer.is_fsdp_enabled = getattr(accelerator.state, "fsdp_plugin", None) is not None


def set_deepspeed_engine(trainer, engine):
    """The DeepSpeed engine PPO's model was prepared into, where transformers' saving looks for it."""
    for name in WRAPPED_MODEL_ATTRIBUTES:
        setattr(trainer, name, engine)


def save_checkpoint(trainer, model):
    """transformers' checkpoint of `trainer` (model, optimizer, scheduler, random states, `trainer_state.json`
    last): `Trainer._save_checkpoint`, which the Trainer's own loop calls."""
    Trainer._save_checkpoint(trainer, model, trial=None)


def load_rng_state(trainer, checkpoint):
    """Put back the random states transformers saved in `checkpoint` (this process's own file in a multi-process
    run): `Trainer._load_rng_state`, which its resume calls."""
    Trainer._load_rng_state(trainer, str(checkpoint))
