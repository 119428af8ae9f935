"""Tiny random models and data, built in seconds with no network: for the tests and for smoke runs.

    python -m rlhf.tiny ./tiny    # writes ./tiny/policy, ./tiny/reward_model, ./tiny/prompts.jsonl

The tokenizer is a byte-level BPE trained in-process, with a ChatML chat template and pad = eos = `<|im_end|>`,
like SmolLM2's, so the pad/eos pitfalls of the real model show up in tests too.
"""

import json
import random
import sys
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


if __name__ == "__main__":
    for name, path in build_all(sys.argv[1] if len(sys.argv) > 1 else "tiny").items():
        print(f"{name}: {path}")
