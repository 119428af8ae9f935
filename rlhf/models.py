"""Loading models and tokenizers, and the LoRA settings.

Paths are checked before any weights load, so a typo costs seconds. Loading stays real: Hub ids and local
folders go through `from_pretrained` alike.
"""

from pathlib import Path

from rlhf.cli import UserError
from rlhf.data import looks_like_local_path

DTYPES = ("float32", "bfloat16", "float16", "auto")


def check_model_source(name_or_path, what, flag, hint=""):
    """Fail early on a local model folder that does not exist or holds no `config.json`.

    The bundled SmolLM2 (`bundled/SmolLM2-135M-Instruct`) is converted here on first use.
    """
    from rlhf.bundled import ensure_bundled, is_bundled

    if is_bundled(name_or_path):
        ensure_bundled(name_or_path)
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
            f"cannot load model {name_or_path} ({first_line(error)}); offline, run `python quickstart.py` or pass "
            "a local folder, e.g. --model_name_or_path bundled/SmolLM2-135M-Instruct"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise UserError(
            f"tokenizer of {name_or_path} has no chat template; use an instruction-tuned (SFT) model or add one"
        )
    return tokenizer


def adapter_base(path):
    """The base model of a LoRA adapter folder, or None if `path` is not one."""
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    import json

    return json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")


def load_causal_lm(path, dtype="float32", trust_remote_code=False):
    """A causal LM and its tokenizer (left padding); a LoRA adapter folder is loaded onto its base and merged."""
    from transformers import AutoModelForCausalLM

    base = adapter_base(path)
    if base is None:
        model = AutoModelForCausalLM.from_pretrained(path, **load_kwargs(dtype, trust_remote_code))
    else:
        from peft import AutoPeftModelForCausalLM

        check_model_source(base, "base model of the adapter", f"base_model_name_or_path in {path}/adapter_config.json")
        model = AutoPeftModelForCausalLM.from_pretrained(path, **load_kwargs(dtype, trust_remote_code)).merge_and_unload()
    has_tokenizer = (Path(path) / "tokenizer_config.json").is_file() or not Path(path).is_dir()
    return model, load_tokenizer(path if has_tokenizer else base, trust_remote_code)


def lora_config(model_args, task_type="CAUSAL_LM"):
    """A PEFT `LoraConfig` from the LoRA flags, or None when LoRA is off.

    With task_type="SEQ_CLS" PEFT also trains the classification head (`score`) in full.
    """
    if not model_args.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha,
        lora_dropout=model_args.lora_dropout,
        target_modules=model_args.lora_target_modules,
        bias="none",
        task_type=task_type,
    )


def load_kwargs(dtype, trust_remote_code=False):
    """Keyword arguments for every `from_pretrained` of weights: safetensors only, no remote code unless asked."""
    return {"dtype": torch_dtype(dtype), "use_safetensors": True, "trust_remote_code": trust_remote_code}


def torch_dtype(name, flag="--dtype"):
    import torch

    if name not in DTYPES:
        raise UserError(f"{flag} {name} is not supported; use one of {', '.join(DTYPES)}")
    return name if name == "auto" else getattr(torch, name)


def reward_model_dtype(choice, dtype, bf16):
    """The dtype the frozen reward model loads in: `auto` is bfloat16 when training runs in bf16 (on a GPU), else
    the policy's `dtype`. In bfloat16 it takes half the memory; its scores track float32 closely but not exactly
    (README: Performance), which is why a CPU run, where bf16 speed depends on the processor, keeps float32."""
    if choice == "auto":
        return "bfloat16" if bf16 else dtype
    torch_dtype(choice, "--reward_model_dtype")
    return choice


def first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
