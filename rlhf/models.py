"""Loading the policy tokenizer, LoRA settings and the frozen reward model.

Paths are checked before any weights load, so a typo costs seconds. Loading stays real: Hub ids and local
folders go through `from_pretrained` alike.
"""

from pathlib import Path

from rlhf.cli import UserError
from rlhf.data import looks_like_local_path

DTYPES = ("float32", "bfloat16", "float16", "auto")
REWARD_HINT = " (no reward model yet? `python train_reward_model.py` makes one)"


def check_model_source(name_or_path, what, flag, hint=""):
    """Fail early on a local model folder that does not exist or holds no `config.json`."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"{what} folder {name_or_path} has no config.json; point {flag} at a saved model{hint}")
    elif looks_like_local_path(name_or_path) or path.exists():
        raise UserError(f"{what} {name_or_path} does not exist; check {flag}{hint}")


def load_tokenizer(name_or_path, trust_remote_code=False, padding_side="left"):
    """The policy's tokenizer, padded on the left for generation, with a pad token (eos if it has none)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, padding_side=padding_side, trust_remote_code=trust_remote_code
        )
    except OSError as error:
        raise UserError(
            f"cannot load model {name_or_path} ({_first_line(error)}); without Hub access pass a local folder "
            "with --model_name_or_path"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise UserError(
            f"tokenizer of {name_or_path} has no chat template; use an instruction-tuned (SFT) model or add one"
        )
    return tokenizer


def load_reward_model(path, dtype="float32", trust_remote_code=False):
    """Load a frozen sequence-classification reward model and its own tokenizer.

    The model is put in eval mode with gradients off. Its `pad_token_id` is set from its tokenizer, because
    sequence classifiers read the score at the last token that is not padding.
    """
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    check_model_source(path, "reward model", "--reward_model_path", REWARD_HINT)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as error:
        raise UserError(f"cannot load reward model {path} ({_first_line(error)}){REWARD_HINT}") from None
    architectures = config.architectures or []
    if config.num_labels != 1 or not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise UserError(
            f"reward model {path} must be a sequence classifier with num_labels=1 (it has architectures="
            f"{architectures}, num_labels={config.num_labels}); train one with `python train_reward_model.py`"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(
        path, dtype=torch_dtype(dtype), trust_remote_code=trust_remote_code
    )
    model.config.pad_token_id = tokenizer.pad_token_id
    model.eval().requires_grad_(False)
    return model, tokenizer


def lora_config(model_args):
    """A PEFT `LoraConfig` from the LoRA flags, or None when LoRA is off."""
    if not model_args.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=model_args.lora_target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )


def torch_dtype(name):
    import torch

    if name not in DTYPES:
        raise UserError(f"--dtype {name} is not supported; use one of {', '.join(DTYPES)}")
    return name if name == "auto" else getattr(torch, name)


def _first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
