"""Checks of the models a run names, made before any weights load (from paths and config.json alone), so that a
mistake costs seconds and ends in one line: where a model is, whether it is what its flag needs, whether its context
holds the lengths asked for (a default is fitted), LoRA targets, quantization, precision.
"""

from pathlib import Path

from rlhf.bundled import bundled_dir
from rlhf.data import did_you_mean_path, hub_unreachable, looks_like_local_path
from rlhf.errors import UserError
from rlhf.models import (
    DEFAULT_LORA_TARGETS,
    adapter_base,
    adapter_config,
    lora_targets,
    model_config,
    resolve_dtype,
)
from rlhf.processes import cuda_available, is_main_process, launched_zero_stage

# The weights a model folder (False) or an adapter folder (True) holds: safetensors or PyTorch, whole or sharded.
WEIGHT_FILES = {False: ("*.safetensors", "pytorch_model*.bin"),
                True: ("adapter_model.safetensors", "adapter_model.bin")}


def check_model_source(name_or_path, what, flag, hint=""):
    """Fail early on a local model that does not exist, is a file, or is a folder with no model in it.

    A LoRA adapter folder (`adapter_config.json`) counts as a model: its base is checked in turn. The bundled
    SmolLM2 (`bundled/SmolLM2-135M-Instruct`) counts once its package is installed: loading converts it.
    """
    from rlhf.bundled import bundled_path, gguf_folder, is_bundled

    if not str(name_or_path or "").strip():  # Path("") is the current folder
        raise UserError(f"{flag} is empty; give a {what} folder or a Hub id{hint}")
    if is_bundled(name_or_path):
        name_or_path = bundled_path(name_or_path)
        if not (name_or_path / "config.json").is_file():
            gguf_folder()  # a UserError naming the package to install when it is missing
            return
    path = Path(name_or_path).expanduser()
    if path.is_file():
        raise UserError(f"{what} {name_or_path} is a file; point {flag} at a model folder (with config.json) or a "
                        f"Hub id{hint}")
    if path.is_dir():
        base = adapter_base(path)
        if base is not None:
            _check_adapter_base(name_or_path, base)
            check_model_source(base, f"base model of the adapter {name_or_path}",
                               f"base_model_name_or_path in {path / 'adapter_config.json'}")
        elif not (path / "config.json").is_file():
            from rlhf.lifecycle.checkpoints import last_checkpoint

            checkpoint = last_checkpoint(path)  # an unfinished training run: its final model is not saved yet
            if checkpoint is not None:
                raise UserError(f"{what} folder {name_or_path} holds no final model yet, only checkpoints (an "
                                f"unfinished training run); pass its latest, {checkpoint}, to {flag}, or finish the "
                                "training first (its command again resumes it)")
            raise UserError(f"{what} folder {name_or_path} has no config.json (nor adapter_config.json); point "
                            f"{flag} at a saved model{hint}")
        weights = WEIGHT_FILES[base is not None]
        if not any(file for pattern in weights for file in path.glob(pattern)):
            raise UserError(f"{what} folder {name_or_path} has a config but no weights ({' or '.join(weights)}); copy "
                            f"its weights there, or point {flag} at a complete saved model{hint}")
    elif looks_like_local_path(name_or_path):
        raise UserError(f"{what} {name_or_path} does not exist{did_you_mean_path(name_or_path)}; check {flag}{hint}")
    elif (unreachable := hub_unreachable()) and not _in_hub_cache(name_or_path):
        raise UserError(f"cannot reach the Hugging Face Hub ({unreachable}) to download {what} {name_or_path}, "
                        f"and it is not in the local cache; check the network (or HF_ENDPOINT), or pass a local "
                        f"folder to {flag}, e.g. the bundled SmolLM2: {bundled_dir()}")


def _in_hub_cache(repo_id):
    """Whether the Hub's cache holds a model (or adapter) `repo_id`, which transformers then loads offline."""
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo_id, name), str)
               for name in ("config.json", "adapter_config.json"))


def _check_adapter_base(adapter, base):
    """The base an adapter records must be found: PEFT records the path training was given, often a relative one."""
    from rlhf.bundled import is_bundled

    path = Path(base).expanduser()
    if path.exists() or is_bundled(base):
        return
    if not looks_like_local_path(base):  # a Hub id, or a relative path that is not here
        try:
            model_config(base)
            return
        except UserError:
            pass
    where = "" if path.is_absolute() else f" from the adapter's folder up, from {Path.cwd()} or on the Hub"
    raise UserError(
        f"the adapter {adapter} records its base model as '{base}' (base_model_name_or_path in "
        f"{Path(adapter) / 'adapter_config.json'}), which is not found{where}; run from the folder it was trained "
        "in, or write the base model's absolute path or Hub id there"
    )


def model_context(config):
    """How many positions a model's config says it holds (None where it does not say)."""
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def fit_prompt_length(name_or_path, data_args, completion_length, trust_remote_code=False,
                      completion_flag="--max_completion_length"):
    """Lower a default --max_prompt_length that the model's context cannot hold beside the completion length to
    what fits, in one `note:` line (the data's prompts are then judged by it: longer ones are dropped and counted when
    the data loads). A value the user gave is left as it is, for `check_policy` to refuse."""
    context = model_context(model_config(name_or_path, trust_remote_code))
    if "max_prompt_length" in vars(data_args).get("_given", ()):
        return
    if not isinstance(context, int) or data_args.max_prompt_length + completion_length <= context:
        return
    fitted = context - completion_length
    if fitted < 1:
        return  # the completions alone overflow it: check_policy refuses, naming them
    old, data_args.max_prompt_length = data_args.max_prompt_length, fitted
    if is_main_process():
        print(f"note: --max_prompt_length {old} -> {fitted} ({name_or_path} has {context} positions, and "
              f"{completion_flag} {completion_length} of them go to the completion)", flush=True)


def prompt_room(names_or_paths, completion_flag, completion_length, trust_remote_code=False):
    """What the prompts must fit beside the completions, said when none does (`rlhf.data.build_prompt_dataset`):
    (model, positions, completion flag, completion tokens) of the model with the fewest positions among
    `names_or_paths`, None where no config says."""
    rooms = []
    for name_or_path in names_or_paths:
        context = model_context(model_config(name_or_path, trust_remote_code))
        if isinstance(context, int):
            rooms.append((str(name_or_path), context, completion_flag, completion_length))
    return min(rooms, key=lambda room: room[1], default=None)


def check_policy(name_or_path, flag, lengths, trust_remote_code=False):
    """Refuse, from config.json alone, a policy that is not a causal LM (a reward model given by mistake would train
    silently as one) or whose context cannot hold the longest prompt plus completion: `lengths` is {flag: tokens}.

    Returns the model's config, or None where it cannot be read before loading.
    """
    adapter = adapter_config(name_or_path) if Path(name_or_path).is_dir() else None
    config = model_config(name_or_path, trust_remote_code)
    architectures = (config.architectures or []) if config is not None else []
    if (adapter or {}).get("task_type") == "SEQ_CLS" or (
            adapter is None and architectures and all(a.endswith("ForSequenceClassification") for a in architectures)):
        raise UserError(
            f"{flag} {name_or_path} is a sequence classifier (a reward model), not a causal LM that writes text; pass "
            "the policy (an instruction-tuned causal LM) there, and the reward model as --reward_model_name_or_path"
        )
    context = model_context(config)
    total = sum(lengths.values())
    if isinstance(context, int) and total > context:
        asked = " + ".join(f"{name} {tokens}" for name, tokens in lengths.items())
        raise UserError(
            f"{asked} = {total} tokens, more than the {context} positions of {name_or_path} (max_position_embeddings "
            f"in its config.json); lower {' or '.join(lengths)} to at most {context} in all"
        )
    return config


def check_lora_targets(model_args, config, task_type="CAUSAL_LM", trust_remote_code=False):
    """Refuse a --lora_target_modules name that matches no module of the model, listing its linear layers.

    PEFT fails only when no name matches (deep inside trainer setup), and skips a typo beside good names. The
    module names come from an empty copy of the model built from its `config` (no weights). The default list is
    refused only when none of it matches (another architecture may name, say, its output projection otherwise).
    """
    if model_args.lora_task_type not in ("CAUSAL_LM", task_type):  # CAUSAL_LM: TRL's default
        raise UserError(f"--lora_task_type {model_args.lora_task_type} does not fit this script, which trains a "
                        f"{task_type} model; drop the flag")
    if model_args.use_peft and task_type == "SEQ_CLS" and launched_zero_stage() == 3:
        raise UserError("--use_peft for the reward model under DeepSpeed ZeRO-3 (configs/accelerate/deepspeed_zero3"
                        ".yaml) is not supported: its adapter is merged into weights that ZeRO-3 keeps sharded; use "
                        "deepspeed_zero2.yaml or multi_gpu.yaml, or train it without --use_peft")
    targets = lora_targets(model_args.lora_target_modules)
    if not model_args.use_peft or config is None:
        return
    experts = next((getattr(config, name) for name in ("num_experts", "num_local_experts", "n_routed_experts")
                    if getattr(config, name, None)), None)
    if targets == "all-linear" and experts and model_args.lora_dropout:
        # PEFT 0.21 adapts the experts' fused weights as parameters (lora.ParamWrapper), which refuses dropout
        raise UserError(f"--lora_target_modules all-linear on a mixture of experts ({config.model_type}, {experts} "
                        "experts) adapts the experts' weights too, which PEFT does only without dropout; pass "
                        f"--lora_dropout 0 (it is {model_args.lora_dropout:g}), or name the attention projections "
                        "(--lora_target_modules q_proj k_proj v_proj o_proj)")
    if targets == "all-linear":
        return
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlhf.trl_compat import loading_whole

    auto = AutoModelForSequenceClassification if task_type == "SEQ_CLS" else AutoModelForCausalLM
    with init_empty_weights(), loading_whole():  # under ZeRO-3, DeepSpeed would partition the empty weights
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    names = [name for name, _ in model.named_modules()]
    missing = [t for t in targets if not any(name == t or name.endswith("." + t) for name in names)]
    if missing and (targets != DEFAULT_LORA_TARGETS or len(missing) == len(targets)):
        from transformers.pytorch_utils import Conv1D  # GPT-2's linear layers, which PEFT adapts as such

        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, (torch.nn.Linear, Conv1D))})
        raise UserError(
            f"--lora_target_modules {' '.join(missing)} matches no module of the model; its linear layers are "
            f"{' '.join(linear)} (or pass all-linear)"
        )


def check_quantization(model_args):
    """QLoRA needs a CUDA GPU and bitsandbytes (an optional dependency): refuse in one line before anything loads."""
    flag = "--load_in_4bit" if model_args.load_in_4bit else "--load_in_8bit" if model_args.load_in_8bit else None
    if flag is None:
        return
    import importlib.util

    if not cuda_available():
        raise UserError(f"{flag} needs a CUDA GPU (bitsandbytes' kernels) and none is visible here; drop it: "
                        "--use_peft alone also trains with little memory")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise UserError(f"{flag} needs bitsandbytes: pip install -r requirements-qlora.txt, or drop the flag")


def check_precision(model_args, training_args):
    """Refuse, before anything loads, precision settings that would train badly or crash; return the dtype every
    model of the run loads in: --dtype, with `auto` resolved to the policy checkpoint's own (`resolve_dtype`).

    - Full fine-tuning of weights loaded in bfloat16/float16: AdamW's updates (about 1e-5 of a weight at these
      learning rates) are far below bfloat16's resolution (about 4e-3 relative) and are rounded away. Mixed
      precision keeps float32 weights; LoRA trains float32 adapters over a frozen half-precision base.
    - GRPO's static KV cache with float32 weights under bf16 autocast: the cache is float32, the new keys and
      values bfloat16, and generation fails (index_copy_ dtype mismatch, seen on an H100).
    - --fp16 without a CUDA GPU: it would train in float32, silently.
    """
    if training_args.fp16 and (training_args.use_cpu or not cuda_available()):
        # accelerate would train in float32 without a word while the manifest recorded fp16: true
        raise UserError("--fp16 needs a CUDA GPU (float16 autocast with a loss scaler), and this run has none; drop "
                        "--fp16 (the CPU trains in float32), or --bf16 --use_cpu for bfloat16 autocast on the CPU")
    dtype = resolve_dtype(model_args.dtype, model_args.model_name_or_path, training_args.trust_remote_code)
    given = f"--dtype {dtype}" if dtype == model_args.dtype else f"--dtype auto (the checkpoint's {dtype})"
    half = dtype in ("bfloat16", "float16")
    if half and not model_args.use_peft and not model_args.allow_half_precision_weights:
        raise UserError(
            f"{given} would train {dtype} weights, and AdamW updates smaller than "
            "about 1e-3 of a weight round away to nothing; keep --dtype float32 (add --bf16 for bf16 compute), use "
            "--use_peft, or pass --allow_half_precision_weights to train them anyway"
        )
    static = getattr(training_args, "cache_implementation", None) == "static"
    if static and training_args.bf16 and dtype == "float32":
        raise UserError(
            "--cache_implementation static fails with float32 weights under --bf16 autocast (a float32 cache gets "
            "bfloat16 keys); drop --bf16 (float32 with TF32 is the GPU default) or the static cache"
        )
    if dtype != model_args.dtype:
        print(f"note: --dtype auto is {dtype} for {model_args.model_name_or_path}; "
              "every model of this run loads in it")
    return dtype
