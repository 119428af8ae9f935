"""Tiny random models and data, built in seconds with no network: for the tests and for smoke runs.

    python -m rlhf.tiny ./tiny    # writes ./tiny/policy, ./tiny/reward_model, ./tiny/prompts.jsonl

The tokenizer is a byte-level BPE trained in-process, with a ChatML chat template and pad = eos = `<|im_end|>`,
like SmolLM2's, so the pad/eos pitfalls of the real model show up in tests too.
"""

import json
import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = (
    "the a an of to and in is was for on that with as it by at from this be are or which answer question "
    "explain step think because number two three four five good bad yes no true false please write short "
    "long sentence story cat dog sun water tree city river book music color red blue green happy sad fast slow"
).split()


def _sentences(seed, n):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "." for _ in range(n)]


def build_tokenizer(vocab_size=320, seed=0):
    """A byte-level BPE tokenizer trained on generated sentences; different seeds give different vocabularies."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_sentences(seed, 2000), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
    )


def _llama_config(tokenizer, **overrides):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,  # holds the default 512-token prompts plus 256-token completions
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        **overrides,
    )


def build_policy(path, tokenizer, seed=0):
    """Save a tiny random LlamaForCausalLM with `tokenizer` at `path`."""
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(tokenizer))
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def ending_policy(source, path, token_id, probability, declare=False):
    """A copy of the tiny policy at `source` that samples `token_id` with `probability` at every token (temperature 1),
    every other token alike. With `declare`, its generation config declares `token_id` an end of completions beside
    the tokenizer's EOS, as Llama 3's and Qwen's declare an end-of-turn id that their tokenizer's EOS is not."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(source), AutoTokenizer.from_pretrained(source)
    with torch.no_grad():
        for layer in model.model.layers:  # attention and MLP add nothing: the last hidden state is the token's own
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embeddings = model.model.embed_tokens.weight  # tied: also the output layer
        embeddings.copy_(embeddings[0].clone().expand_as(embeddings))  # one hidden state h after every token
        h = model.model.norm(embeddings[:1])[0]
        # the token's logit this far above the others (all equal) gives it `probability` after the softmax
        gap = math.log(probability / (1 - probability) * (len(embeddings) - 1))
        embeddings[token_id] += gap * h / h.dot(h)
    if declare:
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, token_id]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def build_reward_model(path, tokenizer, seed=1):
    """Save a tiny random LlamaForSequenceClassification (num_labels=1) with `tokenizer` at `path`."""
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)
    LlamaForSequenceClassification(_llama_config(tokenizer, num_labels=1)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def orca_rows(n, seed=0):
    """Rows in the Intel ORCA schema (system, question, chosen, rejected), generated here: no third-party data."""
    rng = random.Random(seed)
    sentences = _sentences(seed + 100, 4 * n)
    return [
        {
            "system": "" if i % 3 == 0 else "You are a helpful assistant.",
            "question": f"Question {i}: {sentences[4 * i]} {sentences[4 * i + 1]}",
            "chosen": sentences[4 * i + 2],
            "rejected": rng.choice(WORDS),
        }
        for i in range(n)
    ]


def write_jsonl(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def build_all(root):
    """Policy, reward model (same tokenizer) and 32 ORCA-schema prompts under `root`."""
    root = Path(root)
    tokenizer = build_tokenizer()
    return {
        "policy": build_policy(root / "policy", tokenizer),
        "reward_model": build_reward_model(root / "reward_model", tokenizer),
        "prompts": write_jsonl(root / "prompts.jsonl", orca_rows(32)),
    }



# Tiny random models of the families users train, built offline from transformers' config classes: hidden size 64,
# 2 layers, the shared tokenizer (`build_tokenizer`) plus the family's special tokens, chat template and generation
# config, written from each family's public tokenizer_config.json and generation_config.json (ids are this
# tokenizer's). What matters here: the end ids generation stops at (several in most instruct models), the pad token
# (none in Mistral's), a BOS the tokenizer adds and the template writes too (Llama 3, Gemma, Mistral), the sampling
# fields an instruct model's generation config ships, and the architecture's own traits (Gemma 2's logit soft-capping,
# GPT-2's absolute positions and dropout 0.1, Qwen3-MoE's experts).
_CHATML = CHAT_TEMPLATE
_LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{{ message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Gemma's template has no system role: Gemma 3's puts the system message before the first user turn's text.
_GEMMA_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\n\n' %}{% else %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + ns.system + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% set ns.system = '' %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
_MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\n\n' %}"
    "{% elif message['role'] == 'user' %}"
    "{{ '[INST] ' + ns.system + message['content'] + ' [/INST]' }}{% set ns.system = '' %}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)
_PHI3_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)
_GPT2_TEMPLATE = (  # GPT-2 ships none: a plain one, as users give it
    "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}"
)
_QWEN3_SAMPLING = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}


def _spec(**fields):
    return fields


_DECODER = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 1024}

# name: config class, its fields, tokens (special tokens added; bos/eos/pad/unk), whether the tokenizer adds BOS,
# chat template, the generation config's end tokens and other fields.
FAMILY_SPECS = {
    "llama3": _spec(
        config="LlamaConfig", fields={**_DECODER, "rope_theta": 500000.0, "tie_word_embeddings": True},
        specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<|finetune_right_pad_id|>"],
        # Llama 3 Instruct: the tokenizer's EOS is <|eot_id|>; Meta's tokenizer has no pad, the reserved
        # <|finetune_right_pad_id|> (3.1 on) is the one fine-tuning recipes set
        tokens=_spec(bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|finetune_right_pad_id|>"), add_bos=True,
        template=_LLAMA3_TEMPLATE, ends=["<|eot_id|>", "<|end_of_text|>"],
        generation={"do_sample": True, "temperature": 0.6, "top_p": 0.9}),
    "qwen2.5": _spec(
        config="Qwen2Config", fields={**_DECODER, "tie_word_embeddings": True},
        specials=["<|fim_pad|>"], tokens=_spec(bos=None, eos="<|im_end|>", pad="<|endoftext|>"), add_bos=False,
        template=_CHATML, ends=["<|im_end|>", "<|endoftext|>"],
        generation={"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20}),
    "qwen3": _spec(
        config="Qwen3Config", fields={**_DECODER, "head_dim": 16, "tie_word_embeddings": True},
        specials=["<think>", "</think>", "<|fim_pad|>"], tokens=_spec(bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
        add_bos=False, template=_CHATML, ends=["<|im_end|>", "<|endoftext|>"], generation=_QWEN3_SAMPLING),
    "qwen3_moe": _spec(
        config="Qwen3MoeConfig",
        fields={**_DECODER, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                "decoder_sparse_step": 1, "tie_word_embeddings": True},
        specials=["<think>", "</think>", "<|fim_pad|>"], tokens=_spec(bos=None, eos="<|im_end|>", pad="<|endoftext|>"),
        add_bos=False, template=_CHATML, ends=["<|im_end|>", "<|endoftext|>"], generation=_QWEN3_SAMPLING),
    "gemma2": _spec(
        config="Gemma2Config",
        fields={**_DECODER, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 64,
                "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "tie_word_embeddings": True},
        specials=["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
        tokens=_spec(bos="<bos>", eos="<eos>", pad="<pad>"), add_bos=True,
        template=_GEMMA_TEMPLATE, ends=["<eos>", "<end_of_turn>"], generation={"cache_implementation": "hybrid"}),
    "mistral": _spec(
        config="MistralConfig", fields={**_DECODER, "sliding_window": None, "tie_word_embeddings": True},
        specials=["<s>", "</s>", "[INST]", "[/INST]"], tokens=_spec(bos="<s>", eos="</s>", pad=None), add_bos=True,
        template=_MISTRAL_TEMPLATE, ends=["</s>"], generation={}),
    "phi3": _spec(
        config="Phi3Config", fields={**_DECODER, "num_key_value_heads": 4, "tie_word_embeddings": True},
        # Phi-3-mini-4k-instruct: pad = EOS = <|endoftext|>, the turn's end <|end|> an end id of generation only
        specials=["<unk>", "<s>", "<|assistant|>", "<|system|>", "<|user|>", "<|end|>"],
        tokens=_spec(bos="<s>", eos="<|endoftext|>", pad="<|endoftext|>", unk="<unk>"), add_bos=False,
        template=_PHI3_TEMPLATE, ends=["<|endoftext|>", "<|assistant|>", "<|end|>"], generation={}),
    "gpt2": _spec(
        config="GPT2Config",  # absolute positions; dropout 0.1 left on, as GPT-2's config ships it
        fields={"n_embd": 64, "n_inner": 128, "n_layer": 2, "n_head": 4, "n_positions": 1024, "resid_pdrop": 0.1,
                "embd_pdrop": 0.1, "attn_pdrop": 0.1, "tie_word_embeddings": True},
        # GPT-2 ships no pad token and no other special: users add one ([PAD], as TRL's examples did)
        specials=["[PAD]"], tokens=_spec(bos="<|endoftext|>", eos="<|endoftext|>", pad="[PAD]"), add_bos=False,
        template=_GPT2_TEMPLATE, ends=["<|endoftext|>"], generation={}),
}
FAMILIES = tuple(FAMILY_SPECS)


def build_family_tokenizer(name):
    """The shared tokenizer with family `name`'s special tokens, BOS/EOS/pad, BOS added or not, and chat template."""
    spec = FAMILY_SPECS[name]
    tokenizer = build_tokenizer()
    new = [token for token in spec["specials"] if token not in tokenizer.get_vocab()]
    if new:
        tokenizer.add_special_tokens({"additional_special_tokens": new})
    tokens = spec["tokens"]
    tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token = tokens["bos"], tokens["eos"], tokens["pad"]
    tokenizer.unk_token = tokens.get("unk", tokenizer.unk_token)
    tokenizer.add_bos_token = spec["add_bos"]
    tokenizer.chat_template = spec["template"]
    return tokenizer


def _family_config(name, tokenizer, **overrides):
    import transformers

    spec = FAMILY_SPECS[name]
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    return getattr(transformers, spec["config"])(vocab_size=len(tokenizer), **ids, **spec["fields"], **overrides)


def _family_folder(name, folder, model, tokenizer):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)


def build_family(name, folder, seed=0):
    """Save a tiny random causal LM of family `name` (one of FAMILIES) at `folder`, with its tokenizer and its
    generation config (end ids, sampling fields); return the folder."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    spec = FAMILY_SPECS[name]
    tokenizer = build_family_tokenizer(name)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_family_config(name, tokenizer))
    ends = tokenizer.convert_tokens_to_ids(spec["ends"])
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=ends if len(ends) > 1 else ends[0], **spec["generation"])
    return _family_folder(name, folder, model, tokenizer)


def build_family_reward_model(name, folder, seed=1):
    """Save a tiny random sequence-classification model (num_labels=1) of family `name` at `folder`, with the family's
    tokenizer; its pad_token_id is the tokenizer's pad, or EOS where the family has none (Mistral)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    tokenizer = build_family_tokenizer(name)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    config = _family_config(name, tokenizer, num_labels=1)
    config.pad_token_id = pad
    model = AutoModelForSequenceClassification.from_config(config)
    return _family_folder(name, folder, model, tokenizer)


def ending_family_policy(source, path, token_ids, probability):
    """A copy of the family policy at `source` (from `build_family`) that samples each of `token_ids` with
    `probability` at every token (temperature 1, no other sampling transform), every other token alike: as
    `ending_policy`, for any family. Each layer's writes to the residual stream are zeroed and the positions too, so
    the last hidden state is the same after every token."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(source), AutoTokenizer.from_pretrained(source)
    embeddings = model.get_input_embeddings().weight  # tied: also the output layer
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("o_proj", "down_proj", "c_proj", ".wpe.")):
                parameter.zero_()
        # (not the pad's row: a padding_idx left it zero)
        embeddings.copy_(embeddings[embeddings.norm(dim=1).argmax()].clone().expand_as(embeddings))
        ids = torch.tensor([[0]])
        h = model.base_model(input_ids=ids).last_hidden_state[0, -1]
        n, k = len(embeddings), len(token_ids)
        gap = math.log(probability * (n - k) / (1 - k * probability))
        for token_id in token_ids:
            embeddings[token_id] += gap * h / h.dot(h)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Build tiny random models into a folder (no Hub): the Llama pair the "
                                     "tests use, or a family's policy and reward model.")
    parser.add_argument("folder", nargs="?", default="tiny")
    parser.add_argument("--family", choices=FAMILIES, help="one of the families users train, with its own tokenizer, "
                        "chat template and generation config")
    args = parser.parse_args()
    if args.family:
        folder = Path(args.folder)
        built = {"policy": build_family(args.family, folder / "policy"),
                 "reward_model": build_family_reward_model(args.family, folder / "reward_model")}
    else:
        built = build_all(args.folder)
    for name, path in built.items():
        print(f"{name}: {path}")
