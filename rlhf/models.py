"""Loading models and tokenizers, the LoRA settings and dtypes (the checks before loading: `rlhf.checks`).

Loading stays real: Hub ids and local folders go through `from_pretrained` alike.
"""

import copy
from pathlib import Path

from rlhf.bundled import bundled_dir, script
from rlhf.errors import UserError, first_line
from rlhf.processes import main_process_first

DTYPES = ("float32", "bfloat16", "float16", "auto")
DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]  # the attention projections of Llama-like models


START_MODEL_DIR = "start_model"


def model_config(name_or_path, trust_remote_code=False, what="model"):
    """The config of a model, or of an adapter's base: config.json alone, no weights.

    None where a local one cannot be read before loading (the bundled model before its conversion): loading then
    says why. A Hub id that cannot be reached is a `UserError` now, rather than after loading waits for it again.
    """
    from rlhf.bundled import bundled_path, is_bundled

    base = adapter_base(name_or_path) if Path(name_or_path).is_dir() else None
    if base is not None:
        return model_config(base, trust_remote_code, what)
    if is_bundled(name_or_path):
        name_or_path = bundled_path(name_or_path)
        if not (name_or_path / "config.json").is_file():  # not converted yet: loading converts it
            return None
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        if Path(name_or_path).expanduser().exists() or not isinstance(error, OSError):
            return None
        raise UserError(f"cannot load {what} {name_or_path} ({first_line(error)}); offline, pass a local folder, "
                        f"e.g. the bundled SmolLM2: {bundled_dir()}") from None


def read_tokenizer(name_or_path, trust_remote_code=False, what="", **kwargs):
    """The tokenizer of a model (`what` names its role in messages, e.g. "judge "), from where it is
    (`tokenizer_source`). A local folder whose tokenizer files are missing or damaged (PPO's value_model/ is saved
    without them) is refused in one line; other errors are the caller's."""
    from transformers import AutoTokenizer

    source = tokenizer_source(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)
    except Exception as error:
        if not Path(source).expanduser().is_dir():
            raise
        raise UserError(
            f"cannot read the tokenizer of {what}{name_or_path} ({type(error).__name__}: {first_line(error)}); its "
            "tokenizer files (tokenizer.json, tokenizer_config.json) are missing or damaged: copy them from the "
            "model it was trained from"
        ) from None


def load_tokenizer(name_or_path, trust_remote_code=False, padding_side="left"):
    """The policy's tokenizer, padded on the left for generation, with a pad token (eos if it has none)."""
    try:
        tokenizer = read_tokenizer(name_or_path, trust_remote_code, padding_side=padding_side)
    except OSError as error:
        raise UserError(
            f"cannot load model {name_or_path} ({first_line(error)}); offline, pass a local folder, e.g. the bundled "
            f"SmolLM2: --model_name_or_path {bundled_dir()}"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise UserError(
            f"tokenizer of {name_or_path} has no chat template; use an instruction-tuned (SFT) model or add one"
        )
    return tokenizer


def adapter_config(path):
    """The `adapter_config.json` of a LoRA adapter folder as a dict, or None if `path` is not one."""
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    import json

    return json.loads(config.read_text(encoding="utf-8"))


def adapter_base(path):
    """The base model of a LoRA adapter folder, or None if `path` is not one.

    PEFT records the base path training was given, often relative to the folder training ran in, which is usually
    above the adapter (`./run` or `./run/checkpoint-10` from `tiny/policy`). A relative base is looked for from the
    adapter's folder up, so the adapter works from any folder; not found, it is left as recorded (then
    `check_model_source` names it).
    """
    config = adapter_config(path)
    base = None if config is None else config.get("base_model_name_or_path")
    if base and not Path(base).expanduser().is_absolute():
        folder = Path(path).resolve()
        for start in (folder, *folder.parents):
            if (start / base).is_dir():
                return str(start / base)
    return base


def loadable(name_or_path):
    """What to load `name_or_path` from: itself; the bundled SmolLM2 is converted from its GGUF on first use."""
    from rlhf.bundled import bundled_path, ensure_bundled, is_bundled

    return ensure_bundled(bundled_path(name_or_path)) if is_bundled(name_or_path) else name_or_path


def tokenizer_source(path):
    """Where a model's tokenizer is: the model itself, or the base of an adapter folder saved without one."""
    path = loadable(path)
    base = adapter_base(path)
    has_tokenizer = (Path(path) / "tokenizer_config.json").is_file()
    return base if base is not None and not has_tokenizer else path


def stop_token_ids(tokenizer, model_or_path, stop_token="eos", stop_token_id=None, trust_remote_code=False):
    """The token ids that end a run's completions, sorted: the one place that decides them, for generation, rewards,
    penalties and evaluation alike.

    `stop_token` "eos": the tokenizer's EOS and every EOS id the model's generation config declares (e.g. an
    end-of-turn token), as TRL's GRPOTrainer stops at. `model_or_path` is the model loaded, or where it loads from
    (`generation_config`). PPO's `--stop_token none`: `stop_token_id` alone, or none (completions run to the limit).
    """
    if stop_token != "eos":
        return () if stop_token_id is None else (stop_token_id,)
    if isinstance(model_or_path, (str, Path)):
        config = generation_config(model_or_path, trust_remote_code)
    else:
        config = model_or_path.generation_config
    declared = None if config is None else config.eos_token_id
    declared = [] if declared is None else [declared] if isinstance(declared, int) else list(declared)
    return tuple(sorted({tokenizer.eos_token_id, *declared}))


# The sampling fields transformers fills from a model's own generation_config.json wherever a generate call leaves
# them unset, each with the value that leaves the distribution as the logits give it (no logits processor).
NEUTRAL_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "typical_p": 1.0,
                    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}


def model_sampling(config):
    """{field: value} of the sampling fields a model's generation config sets to something else than neutral (e.g.
    Qwen2.5-Instruct's repetition_penalty 1.05, temperature 0.7, top_k 20, top_p 0.8): what its own file would add to
    every generate call that leaves them unset. `config`: a `GenerationConfig`, or None."""
    values = {name: getattr(config, name, None) for name in NEUTRAL_SAMPLING} if config is not None else {}
    return {name: value for name, value in values.items() if value is not None and value != NEUTRAL_SAMPLING[name]}


def flags_sampling(config, **flags):
    """The sampling settings of a generate call: the flags given (`temperature`, `top_p`, ...), and every other
    sampling field the model's generation config sets (`model_sampling`) turned off, so that the flags alone decide
    how completions are sampled, and PPO's log-probs are those of the distribution it sampled from (docs/training.md,
    Sampling)."""
    return {**{name: NEUTRAL_SAMPLING[name] for name in model_sampling(config)}, **flags, "do_sample": True}


def sampling_note(what, model, config, flags):
    """The one line saying that a model's own sampling fields are overridden by the flags, or None where it sets
    none. `flags`: {field: value} as the run samples."""
    own = model_sampling(config)
    if not own:
        return None
    theirs = ", ".join(f"{name} {value:g}" for name, value in sorted(own.items()))
    ours = ", ".join(f"--{name} {value:g}" for name, value in flags.items())
    return (f"note: {model}'s generation_config.json samples with {theirs}; {what} samples as its flags say ({ours}) "
            "(docs/training.md, Sampling)")


def generation_config(name_or_path, trust_remote_code=False):
    """The generation config a model loaded from `name_or_path` gets: its generation_config.json, else one made from
    its config.json (as transformers does); an adapter folder's is its base's, which the merged model keeps. None
    where neither can be read."""
    from transformers import GenerationConfig

    path = loadable(name_or_path)
    base = adapter_base(path) if Path(path).is_dir() else None
    if base is not None:
        return generation_config(base, trust_remote_code)
    try:
        return GenerationConfig.from_pretrained(path)
    except OSError:
        config = model_config(path, trust_remote_code)
        return None if config is None else GenerationConfig.from_model_config(config)


def load_causal_lm(path, dtype="float32", trust_remote_code=False):
    """A causal LM and its tokenizer (left padding); a LoRA adapter folder is loaded onto its base and merged."""
    from transformers import AutoModelForCausalLM

    path = loadable(path)
    if adapter_base(path) is None:
        model = AutoModelForCausalLM.from_pretrained(path, **load_kwargs(dtype, trust_remote_code))
    else:
        model = _merged_adapter(path, AutoModelForCausalLM, load_kwargs(dtype, trust_remote_code))
    return model, load_tokenizer(path, trust_remote_code)


def load_sequence_classifier(path, dtype="float32", trust_remote_code=False, pad_token_id=None):
    """A one-output sequence classifier (reward or value model); a LoRA adapter of one is merged into its base.

    `pad_token_id`: the pad of the tokenizer it reads (see `load_kwargs`).
    """
    from transformers import AutoModelForSequenceClassification

    kwargs = load_kwargs(dtype, trust_remote_code, pad_token_id=pad_token_id)
    path = loadable(path)
    config = adapter_config(path)
    if config is None:
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, **kwargs)
    if config.get("task_type") != "SEQ_CLS":
        raise UserError(
            f"{path} is a LoRA adapter of a {config.get('task_type')} model, not of a sequence classifier "
            f"(task_type SEQ_CLS); train a reward model with `{script('train_reward_model.py')}`"
        )
    return _merged_adapter(path, AutoModelForSequenceClassification, {"num_labels": 1, **kwargs})


def _merged_adapter(path, auto_class, kwargs):
    """A LoRA adapter folder loaded onto its base and merged (what PEFT's AutoPeftModel* do), with the base found by
    `adapter_base`: a relative base then loads from any folder."""
    from peft import PeftModel

    base = auto_class.from_pretrained(loadable(adapter_base(path)), **kwargs)
    if (Path(path) / "tokenizer_config.json").is_file():  # tokens added while training the adapter: as PEFT does
        from transformers import AutoTokenizer

        size = len(AutoTokenizer.from_pretrained(path, trust_remote_code=kwargs.get("trust_remote_code", False)))
        if size > base.get_input_embeddings().weight.shape[0]:
            base.resize_token_embeddings(size)
    return PeftModel.from_pretrained(base, path).merge_and_unload()


def trainable_model_path(name_or_path, output_dir, trust_remote_code=False):
    """The path training starts from: `name_or_path`, or for a LoRA adapter folder, the adapter merged into its base.

    The merge is written once to `output_dir/start_model` (float32), because TRL loads the policy and its frozen
    reference copy by path: both must start from the merged weights. A resumed run finds it there.
    """
    name_or_path = loadable(name_or_path)
    if adapter_base(name_or_path) is None:
        return name_or_path
    target = Path(output_dir) / START_MODEL_DIR
    with main_process_first():  # one process merges, the others wait and read
        if not (target / "config.json").is_file():
            print(f"Merging the adapter {name_or_path} into its base: the run starts from {target}.", flush=True)
            model, tokenizer = load_causal_lm(name_or_path, "float32", trust_remote_code)
            partial = target.with_name(target.name + ".partial")  # renamed at the end: never half-written
            model.save_pretrained(partial)
            tokenizer.save_pretrained(partial)
            partial.replace(target)
    return target


def lora_targets(names):
    """--lora_target_modules as PEFT takes it: a list of module names, or the string 'all-linear' (PEFT reads a
    one-element list ['all-linear'] as a module called so)."""
    return "all-linear" if [name.lower() for name in names] == ["all-linear"] else list(names)


def peft_config(model_args, task_type="CAUSAL_LM"):
    """TRL's `get_peft_config`: a PEFT `LoraConfig` from --use_peft, --lora_*, --use_rslora, --use_dora; None
    without --use_peft. The task type is the script's (`check_lora_targets` refused another one).

    With task_type="SEQ_CLS" PEFT also trains the classification head (`score`) in full.
    """
    from rlhf.trl_compat import get_peft_config

    args = copy.copy(model_args)
    args.lora_task_type = task_type
    args.lora_target_modules = lora_targets(model_args.lora_target_modules)
    return get_peft_config(args)


def quantization_config(model_args):
    """TRL's `get_quantization_config`: a bitsandbytes config from --load_in_4bit (with --bnb_4bit_quant_type,
    --use_bnb_nested_quant, --bnb_4bit_quant_storage) or --load_in_8bit; None without either.

    4-bit weights compute in bfloat16 as in the QLoRA paper (TRL would take --dtype, float32 by default: slower, and
    no more accurate for frozen 4-bit weights). Call `check_quantization` first: it refuses a machine that cannot.
    """
    from rlhf.trl_compat import get_quantization_config

    args = copy.copy(model_args)
    args.dtype = "bfloat16"
    return get_quantization_config(args)


def load_kwargs(dtype, trust_remote_code=False, pad_token_id=None):
    """Keyword arguments for every `from_pretrained` of weights: safetensors only, no remote code unless asked.

    `pad_token_id`: the tokenizer's pad when it was made distinct from EOS
    (`rlhf.rewards.reward_model.ensure_distinct_pad`). The model is built with it, not the checkpoint's (often EOS):
    the input embedding's `padding_idx`, the one row that never gets a gradient, is fixed when the model is built, and
    the saved config then names the pad the tokenizer has.
    """
    kwargs = {"dtype": torch_dtype(dtype), "use_safetensors": True, "trust_remote_code": trust_remote_code}
    if pad_token_id is not None:
        kwargs["pad_token_id"] = pad_token_id
    return kwargs


def trained_model_kwargs(model_args, trust_remote_code=False, pad_token_id=None):
    """`load_kwargs` of the model being trained: with its quantization (QLoRA) and --attn_implementation."""
    kwargs = load_kwargs(model_args.dtype, trust_remote_code, pad_token_id)
    quantization = quantization_config(model_args)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    if model_args.attn_implementation is not None:
        kwargs["attn_implementation"] = model_args.attn_implementation
    return kwargs


def torch_dtype(name, flag="--dtype"):
    import torch

    if name not in DTYPES:
        raise UserError(f"{flag} {name} is not supported; use one of {', '.join(DTYPES)}")
    return name if name == "auto" else getattr(torch, name)


def resolve_dtype(dtype, name_or_path, trust_remote_code=False):
    """`dtype`, with `auto` made the checkpoint's own dtype: what transformers loads for `auto`, named before anything
    loads, so that the precision checks see it and every model of a run loads in it (not each in its own)."""
    return checkpoint_dtype(name_or_path, trust_remote_code) if dtype == "auto" else dtype


def checkpoint_dtype(name_or_path, trust_remote_code=False):
    """The dtype a checkpoint's weights are stored in, read from its config (`dtype`, `torch_dtype` before transformers
    5) without loading them; a LoRA adapter's is its base's. float32 when the config names none, as transformers does.
    """
    import json

    from rlhf.bundled import bundled_path, is_bundled

    path = bundled_path(name_or_path) if is_bundled(name_or_path) else Path(name_or_path).expanduser()
    if is_bundled(name_or_path) and not (path / "config.json").is_file():
        return "float32"  # converted from its GGUF in float32 (rlhf/bundled.py)
    if path.is_dir():
        base = adapter_base(path)
        if base is not None:
            return checkpoint_dtype(base, trust_remote_code)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    else:  # a Hub id: its config.json alone is fetched
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code).to_dict()
        except OSError as error:
            raise UserError(f"cannot read the config of model {name_or_path} ({first_line(error)}) to resolve "
                            "--dtype auto; pass a local folder, or --dtype float32") from None
    dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
    return str(dtype).removeprefix("torch.")


def reward_model_dtype(choice, dtype, on_gpu):
    """The dtype the frozen reward model loads in: `auto` is bfloat16 on a GPU, else the policy's `dtype`.

    In bfloat16 it takes half the memory and scores faster on a GPU; its scores track float32 closely but not
    exactly (docs/performance.md), which is why a CPU run, where bf16 speed depends on the processor, keeps float32.
    """
    if choice == "auto":
        return "bfloat16" if on_gpu else dtype
    torch_dtype(choice, "--reward_model_dtype")
    return choice


