"""The frozen reward model: loading, scoring conversations, pairwise accuracy, non-finite checks.

Where the score is read: a sequence classifier scores at the last token that is not padding. Every script
(reward training, GRPO, PPO, evaluation) renders a conversation with the chat template and ends it at the final
end-of-turn token (EOS), so the score is read exactly there, for a completion cut off at the length limit too
(its turn closed after its last token; PPO, which scores token ids, appends `turn_end_ids`). That needs a pad token
distinct from EOS: tokenizers that pad with EOS (SmolLM2's do) get `<|endoftext|>` or their unknown token as pad
instead.
"""

import math
from pathlib import Path

from rlhf.bundled import script
from rlhf.checks import check_model_source
from rlhf.errors import NonFiniteError, UserError, first_line
from rlhf.models import (
    adapter_base,
    adapter_config,
    load_sequence_classifier,
    loadable,
    model_config,
    read_tokenizer,
)
from rlhf.processes import is_main_process

REWARD_HINT = f" (no reward model yet? `{script('train_reward_model.py')}` makes one)"
JUDGE_HINT = (f" (a judge is a reward model the policies never trained against: `{script('train_reward_model.py')}` "
              "makes one from other preference pairs; docs/evaluation.md)")
# What a sequence classifier that scores completions is called in messages: its flag, and where to get one.
ROLES = {"reward model": ("--reward_model_name_or_path", REWARD_HINT),
         "judge": ("--judge_model_name_or_path", JUDGE_HINT)}
PAD_CANDIDATES = ("<|endoftext|>", "<pad>", "<|pad|>", "<|fim_pad|>", "<unk>")


def ensure_distinct_pad(tokenizer, stop_token_ids=()):
    """Make the pad token differ from EOS, BOS and every token a completion stops at (`stop_token_ids`: Qwen2.5 pads
    with `<|endoftext|>`, one of its declared ends), so that an end is never mistaken for padding: PPO masks every
    pad-id token, and a completion ended there at its first token was masked whole (a NaN loss). Returns tokenizer."""
    special = {tokenizer.eos_token_id, tokenizer.bos_token_id, *stop_token_ids}
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id not in special:
        return tokenizer
    vocab = tokenizer.get_vocab()
    for token in (tokenizer.unk_token, *PAD_CANDIDATES):
        if token is not None and token in vocab and vocab[token] not in special:
            tokenizer.pad_token = token
            return tokenizer
    raise UserError(
        f"tokenizer {tokenizer.name_or_path} pads with {tokenizer.pad_token or tokenizer.eos_token}, a token that "
        f"ends its completions, and has no other token to pad with (tried {', '.join(PAD_CANDIDATES)}); add a pad "
        "token to it"
    )


def render_for_reward(tokenizer, messages):
    """The text a reward model scores: the chat template of the conversation, ending at its final end-of-turn token."""
    return tokenizer.apply_chat_template(messages, tokenize=False).rstrip()


def turn_end_ids(tokenizer):
    """The token ids the chat template writes after an assistant message's text, up to where `render_for_reward`
    ends (SmolLM2's: `<|im_end|>`); none without a chat template. PPO scores a completion cut off at the length limit
    with them after it, as GRPO's scorer and the evaluation render it (`rlhf.ppo.maths.close_turns`)."""
    if not getattr(tokenizer, "chat_template", None):
        return []
    marker = "TURN-END-MARKER"
    text = render_for_reward(tokenizer, [{"role": "user", "content": "?"}, {"role": "assistant", "content": marker}])
    if marker not in text:  # a template that rewrites the message: nothing is appended
        return []
    return tokenizer(text.rsplit(marker, 1)[1], add_special_tokens=False)["input_ids"]


def tokenize_pairs(pairs, tokenizer, max_length=None):
    """`chosen_ids`/`rejected_ids` for TRL's RewardTrainer, tokenized exactly as `score_conversations` scores, and the
    pairs longer than `max_length` (--max_length) dropped and counted in one line, as TRL would drop them unsaid. A
    pair whose text is longer than `max_length` tokens could spell is dropped before it is tokenized (`longest_token`).
    None left would fail in TRL's data loader: refused in one line."""
    from rlhf.data import longest_token

    def ids(messages):
        return tokenizer(render_for_reward(tokenizer, messages), add_special_tokens=False)["input_ids"]

    if max_length is not None:
        most = max_length * longest_token(tokenizer)
        short = pairs.filter(lambda pair: all(len(render_for_reward(tokenizer, pair[side])) <= most
                                              for side in ("chosen", "rejected")), desc="Dropping over-long pairs")
    tokenized = (pairs if max_length is None else short).map(
        lambda pair: {"chosen_ids": ids(pair["chosen"]), "rejected_ids": ids(pair["rejected"])},
        desc="Tokenizing pairs",
    )
    if max_length is None:
        return tokenized
    kept = tokenized.filter(lambda pair: max(len(pair["chosen_ids"]), len(pair["rejected_ids"])) <= max_length,
                            desc=f"Dropping pairs over {max_length} tokens")
    if len(pairs) and not len(kept):  # (the refusal tokenizes them all, to say how long the shortest is)
        shortest = min(max(len(ids(pair["chosen"])), len(ids(pair["rejected"]))) for pair in pairs)
        raise UserError(f"every training pair is longer than --max_length {max_length} tokens (the shortest has "
                        f"{shortest}); raise --max_length")
    if is_main_process():
        print(f"{len(kept)} training pairs kept, {len(pairs) - len(kept)} dropped as longer than --max_length "
              f"{max_length} tokens.", flush=True)
    return kept


def check_reward_model(path, trust_remote_code=False, what="reward model"):
    """Refuse, from its config alone (no weights), a reward model (or a judge: `what`) that is not a one-output
    sequence classifier: a causal LM would load with a new random score head. Returns `path`."""
    flag, hint = ROLES[what]
    check_model_source(path, what, flag, hint)
    adapter = adapter_config(loadable(path))
    if adapter is None:
        _check_classifier(path, model_config(path, trust_remote_code, what), what)
    elif adapter.get("task_type") != "SEQ_CLS":  # e.g. GRPO's LoRA output: an adapter of the policy
        raise UserError(
            f"{what} {path} is a LoRA adapter of a {adapter.get('task_type')} model, not of a sequence classifier "
            f"(task_type SEQ_CLS); give {flag} a reward model: `{script('train_reward_model.py')}` makes one"
        )
    return path


def scorer_tokenizer(path, trust_remote_code=False, what="reward model", template=True):
    """A scorer's own tokenizer (a reward model's, a judge's, PPO's value model's). With `template`, one whose chat
    template renders the conversations it scores (`render_for_reward`: GRPO's reward model, the evaluation's reward
    model and judge; PPO feeds its reward model the policy's token ids). A folder that cannot give one is refused in
    one line, before any model loads."""
    tokenizer = read_tokenizer(path, trust_remote_code, f"{what} ")
    if template and not getattr(tokenizer, "chat_template", None):
        raise UserError(
            f"the tokenizer of {what} {path} has no chat template, and a {what} scores each conversation as its "
            f"template renders it; give one trained with `{script('train_reward_model.py')}` (it keeps its base "
            "model's template), or add a chat_template to its tokenizer_config.json"
        )
    return tokenizer


def check_scorer(path, trust_remote_code=False, what="reward model"):
    """A reward model or judge that scores text: a one-output sequence classifier (`check_reward_model`) whose own
    tokenizer renders conversations (`scorer_tokenizer`). Returns `path`."""
    check_reward_model(path, trust_remote_code, what)
    if adapter_base(path) is not None or model_config(path, trust_remote_code, what) is not None:  # readable now
        scorer_tokenizer(path, trust_remote_code, what)
    return path


def check_value_model(path, trust_remote_code=False):
    """PPO's value model starts from a reward model (its one output) or a causal LM (a new one-output head): a
    classifier with several outputs cannot load into that head. Returns `path`."""
    check_model_source(path, "value model", "--value_model_path")
    config = model_config(path, trust_remote_code, "value model") if adapter_base(path) is None else None
    architectures = (config.architectures or []) if config is not None else []
    if any(a.endswith("ForSequenceClassification") for a in architectures) and config.num_labels != 1:
        raise UserError(
            f"value model {path} is a classifier with num_labels={config.num_labels}, and PPO's value head has one "
            "output; give a reward model (num_labels=1) or a causal LM as --value_model_path, or drop the flag"
        )
    return path


def _check_classifier(path, config, what="reward model"):
    if config is None:  # not readable before loading (the bundled model before its conversion)
        return
    architectures = config.architectures or []
    classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    if config.num_labels != 1 or not classifier:
        labels = f", num_labels={config.num_labels}" if classifier else ""  # a causal LM's num_labels is a default
        raise UserError(
            f"{what} {path} must be a sequence classifier with num_labels=1 (it has architectures="
            f"{architectures}{labels}); train one with `{script('train_reward_model.py')}`"
        )


def load_reward_model(path, dtype="float32", trust_remote_code=False, what="reward model", template=True):
    """Load a frozen sequence-classification reward model (or a judge: `what`) and its own tokenizer.

    The model is put in eval mode with gradients off. Its `pad_token_id` is set from its tokenizer (made distinct
    from EOS), because sequence classifiers read the score at the last token that is not padding. A LoRA adapter
    of a sequence classifier (`task_type` SEQ_CLS) is merged into its base. `template`: see `scorer_tokenizer`.
    """
    from transformers import AutoConfig

    path = loadable(check_reward_model(path, trust_remote_code, what))
    if adapter_base(path) is None:
        try:
            _check_classifier(path, AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code), what)
        except OSError as error:
            raise UserError(f"cannot load {what} {path} ({first_line(error)}){ROLES[what][1]}") from None
    tokenizer = ensure_distinct_pad(scorer_tokenizer(path, trust_remote_code, what, template))
    model = load_sequence_classifier(path, dtype, trust_remote_code, tokenizer.pad_token_id)
    model.eval().requires_grad_(False)
    return model, tokenizer


def score_conversations(model, tokenizer, conversations, batch_size=16):
    """Reward of each conversation (a list of messages ending with the assistant's answer).

    Rendered with the reward model's own tokenizer and chat template (`render_for_reward`), no special tokens
    added, right padding: the score is read at the final end-of-turn token.
    """
    import torch

    texts = [render_for_reward(tokenizer, messages) for messages in conversations]
    device = next(model.parameters()).device
    scores = []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                add_special_tokens=False,
            ).to(device)
            scores.extend(model(**batch).logits[:, 0].float().tolist())
    model.train(was_training)
    return scores


MIN_HELD_OUT = 4  # fewer held-out pairs than this measure nothing worth printing


def held_out_size(num_pairs, requested):
    """How many of `num_pairs` preference pairs to hold out for the accuracy, and a note when it is not `requested`.

    What was asked, while it is at most a quarter of the pairs. On a smaller set, a tenth of it (at least MIN_HELD_OUT,
    at most what was asked), as long as at least as many pairs are left to train on; below that, none.
    """
    if requested == 0:
        return 0, "--eval_samples 0: no held-out accuracy is measured"
    if requested * 4 <= num_pairs:
        return requested, None
    size = min(requested, max(MIN_HELD_OUT, num_pairs // 10))
    if num_pairs - size < size:
        return 0, (f"only {num_pairs} pairs, too few to hold out {size} and train on as many: no held-out accuracy "
                   "can be measured and reward_accuracy.json is not written")
    return size, f"a tenth of the {num_pairs} pairs: --eval_samples {requested} would leave too few to train on"


def held_out_accuracy(model, tokenizer, pairs):
    """Pairwise accuracy and mean scores of a reward model on held-out `chosen`/`rejected` conversations."""
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


def pairwise_accuracy(chosen_scores, rejected_scores):
    """Share of pairs whose chosen answer scores strictly higher than the rejected one (a tie counts as wrong)."""
    if len(chosen_scores) != len(rejected_scores) or not chosen_scores:
        raise ValueError("need the same, non-zero number of chosen and rejected scores")
    return sum(c > r for c, r in zip(chosen_scores, rejected_scores)) / len(chosen_scores)


def check_finite(values, source, step):
    """Raise `NonFiniteError` naming `source` and `step` if any value is NaN or infinite."""
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise NonFiniteError(
            f"{source} returned {len(bad)} non-finite value(s) (e.g. {bad[0]}) out of {len(values)} "
            f"while computing step {step}",
            f"Check {source}: it scored the completions themselves (a reward model loaded in float16 can overflow: "
            "--reward_model_dtype float32).")


def reward_model_scorer(path, dtype, trust_remote_code, device, batch_size=16, what="reward model"):
    """Load the frozen reward model (or a judge: `what`) onto `device` and wrap it as a reward function (a
    `RewardModelScorer`). It loads whole in each process (`loading_whole`): under ZeRO-3 no DeepSpeed engine wraps
    it."""
    from rlhf.trl_compat import loading_whole

    with loading_whole():
        model, tokenizer = load_reward_model(path, dtype, trust_remote_code, what)
    return RewardModelScorer(model.to(device), tokenizer, path, batch_size, what)


class RewardModelScorer:
    """A GRPO reward function backed by the frozen reward model.

    It renders prompt + completion with the reward model's own chat template (as TRL does for a reward model
    passed directly), logs as `rewards/reward_model/*` whatever the folder is called, and stops training with
    the step number if the model returns NaN or infinity instead of letting TRL's NaN-tolerant sum hide it.
    """

    __name__ = "reward_model"

    def __init__(self, model, tokenizer, path, batch_size=16, what="reward model"):
        self.model, self.tokenizer, self.path, self.batch_size, self.what = model, tokenizer, path, batch_size, what

    def __call__(self, prompts, completions, trainer_state=None, **kwargs):
        conversations = [prompt + completion for prompt, completion in zip(prompts, completions)]
        scores = score_conversations(self.model, self.tokenizer, conversations, self.batch_size)
        step = trainer_state.global_step + 1 if trainer_state else "?"
        check_finite(scores, f"{self.what} {self.path}", step)
        return scores


def save_reward_model(trainer, model_args, tokenizer, output_dir, trust_remote_code=False):
    """Save the trained reward model as a plain sequence classifier (score head included) and return it.

    With LoRA the adapter is merged first; a QLoRA adapter into a fresh full-precision copy of its base, not into
    the 4-bit weights (that merge is lossy, and the saved model would need bitsandbytes to load).
    Call it in every process: full weights are saved through the trainer, which gathers them under ZeRO-3 / FSDP.
    """
    if not model_args.use_peft:
        model = trainer.model
    elif not (model_args.load_in_4bit or model_args.load_in_8bit):
        model = trainer.model.merge_and_unload()
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as adapter:
            trainer.model.save_pretrained(adapter)
            model = load_sequence_classifier(adapter, model_args.dtype, trust_remote_code)
    model.config.pad_token_id = tokenizer.pad_token_id
    if not model_args.use_peft:
        trainer.save_model(output_dir)
    if is_main_process():
        if model_args.use_peft:
            model.save_pretrained(output_dir)
            trainer.create_model_card(model_name=Path(output_dir).name)
        tokenizer.save_pretrained(output_dir)
        if any(hasattr(parameter, "ds_id") for parameter in model.parameters()):
            # ZeRO-3 keeps a shard of each weight per process: the held-out scoring (main process only) reads the
            # whole model just saved
            from rlhf.trl_compat import loading_whole

            with loading_whole():
                model = load_sequence_classifier(output_dir, model_args.dtype, trust_remote_code)
    return model
