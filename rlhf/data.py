"""Datasets -> conversational prompts.

Recognised schemas (by column names):
  orca          Intel/orca_dpo_pairs: `system`, `question`, `chosen`, `rejected` (strings)
  orca_messages HuggingFaceH4/orca_dpo_pairs: `prompt` plus `chosen`/`rejected` as lists of messages
  prompt        TRL's prompt-only format: `prompt` as a string or as a list of messages
  question      question-only rows, e.g. math data with `question` + `ground_truth` (or a GSM8K `answer`)
Every schema becomes a `prompt` column holding a conversation (system when non-empty, then user), so the
model's chat template applies.
"""

import difflib
import functools
import logging
from contextlib import contextmanager
from pathlib import Path

from rlhf.bundled import PREFERENCES
from rlhf.errors import UserError, first_line
from rlhf.json_rows import find_bad_row

logger = logging.getLogger(__name__)

LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
PROMPT_COLUMNS = {"orca": "question", "orca_messages": "prompt", "prompt": "prompt", "question": "question"}


def check_dataset_source(dataset_name):
    """Refuse, before anything loads, a local dataset path that does not exist (with a close match), and a Hub
    dataset that can be neither downloaded nor found in the cache; the rest is checked as it loads (`load_rows`)."""
    path = Path(dataset_name)
    if path.exists():
        return
    if looks_like_local_path(dataset_name):
        raise UserError(f"dataset {dataset_name} does not exist{did_you_mean_path(dataset_name)}; give an existing "
                        "file or folder, or a Hub name")
    reason = hub_unreachable()
    if reason and not _in_datasets_cache(dataset_name):
        raise UserError(f"cannot reach the Hugging Face Hub ({reason}) to download dataset '{dataset_name}', and "
                        "it is not in the local cache; check the network (or HF_ENDPOINT), or pass a local file, "
                        f"e.g. the shipped pairs: --dataset_name {PREFERENCES}")


def load_rows(dataset_name, split="train", max_samples=None):
    """Load `split` of a Hub dataset or a local file/folder, keeping the first `max_samples` rows.

    A file that cannot be read, or that holds no rows, is a `UserError` naming it, whatever the format.
    """
    import datasets

    path = Path(dataset_name)
    if path.is_file():
        kind = LOCAL_FORMATS.get(path.suffix.lower())
        if kind is None:
            raise UserError(f"dataset file {path} has an unsupported extension; use one of {sorted(LOCAL_FORMATS)}")
        if split != "train":
            raise UserError(
                f"dataset file {path} has a single split, 'train'; drop --dataset_train_split {split}, or give a "
                f"folder holding {split}.jsonl (or a Hub dataset) that has that split"
            )
        if not path.read_bytes().strip():
            raise UserError(f"dataset file {path} is empty; it needs one row per prompt (or preference pair)")
        with _read_errors(dataset_name, [path] if kind == "json" else []):
            dataset = datasets.load_dataset(kind, data_files=str(path), split="train")
    elif path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
        with _read_errors(dataset_name):
            dataset = datasets.load_from_disk(str(path))  # a folder written by Dataset.save_to_disk
        if isinstance(dataset, datasets.DatasetDict):
            dataset = _pick_split(dataset, split, dataset_name)
    elif path.is_dir():
        if not any(file.suffix.lower() in LOCAL_FORMATS for file in path.rglob("*") if file.is_file()):
            raise UserError(
                f"dataset folder {path} holds no data files ({', '.join(sorted(LOCAL_FORMATS))}) and no dataset "
                "saved with save_to_disk; point --dataset_name at a data file or at such a folder"
            )
        json_files = sorted(file for file in path.rglob("*") if LOCAL_FORMATS.get(file.suffix.lower()) == "json")
        with _read_errors(dataset_name, json_files):
            dataset = _pick_split(datasets.load_dataset(str(path)), split, dataset_name)
    else:
        check_dataset_source(dataset_name)
        try:
            dataset = _pick_split(datasets.load_dataset(dataset_name), split, dataset_name)
        except (FileNotFoundError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as error:
            raise UserError(
                f"cannot load dataset '{dataset_name}' ({type(error).__name__}); offline, pass a local file, e.g. the "
                f"shipped pairs: --dataset_name {PREFERENCES}"
            ) from None
    if max_samples:
        dataset = dataset.select(range(min(max_samples, len(dataset))))
    if len(dataset) == 0:
        raise UserError(f"dataset {dataset_name} (split '{split}') has no rows")
    return dataset


def _in_datasets_cache(dataset_name):
    """Whether `datasets` has a Hub dataset in its cache (its folder, `owner___name`), which it reads offline."""
    import datasets

    return any(Path(datasets.config.HF_DATASETS_CACHE).glob(dataset_name.replace("/", "___") + "*"))


@contextmanager
def _read_errors(dataset_name, json_files=()):
    """Turn what `datasets` raises for an empty or malformed local dataset into one line naming it.

    An empty JSON file raises StopIteration, a header-only CSV or 0-row parquet a ValueError ("corresponds to no
    data"), an empty saved dataset an IndexError, a malformed file a DatasetGenerationError (a file that is not
    parquet at all an ArrowInvalid, before generation starts). A failure on `json_files` is said by their first
    bad line (`find_bad_row`).
    """
    import datasets
    import pyarrow

    readers = logging.getLogger("datasets.packaged_modules")  # their failure logs would repeat the line said here
    level = readers.level
    readers.setLevel(logging.CRITICAL)
    try:
        yield
    except (StopIteration, IndexError):
        raise UserError(f"dataset {dataset_name} has no rows; check the file(s)") from None
    except (ValueError, TypeError, datasets.exceptions.DatasetGenerationError) as error:
        bad_row = find_bad_row(json_files)
        if bad_row:
            raise UserError(f"dataset {bad_row}") from None
        if "corresponds to no data" in str(error):
            raise UserError(f"dataset {dataset_name} has no rows (a header alone, or an empty table)") from None
        if isinstance(error, datasets.exceptions.DatasetGenerationError):
            raise _unreadable(dataset_name, error.__cause__ or error) from None
        if not isinstance(error, pyarrow.ArrowException):
            raise
        raise _unreadable(dataset_name, error) from None
    finally:
        readers.setLevel(level)


def _unreadable(dataset_name, cause):
    return UserError(f"cannot read dataset {dataset_name} ({type(cause).__name__}: {first_line(cause)}); check that "
                     "it is valid JSON lines, JSON, CSV or parquet")


def _pick_split(dataset_dict, split, dataset_name):
    if split not in dataset_dict:
        raise UserError(f"dataset {dataset_name} has no split '{split}'; pick one of {sorted(dataset_dict)}")
    return dataset_dict[split]


def looks_like_local_path(name):
    """True for names that can only be local paths (Hub ids are `name` or `owner/name`), and for `folder/name` where
    `folder` exists here: a typo of a local path (`tiny/polcy`) rather than a Hub id."""
    return (name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or "\\" in name or Path(name).suffix != ""
            or ("/" in name and Path(name.split("/")[0]).is_dir()))


@functools.cache
def hub_unreachable():
    """Why the Hugging Face Hub cannot be reached (one connection, 5 s at most, tried once per process), or None.

    Asked before a model or dataset is downloaded: huggingface_hub retries a request that cannot connect 5 times over
    about 25 s, printing each retry, before the error. Not asked in offline mode (HF_HUB_OFFLINE, which reads the
    cache at once) or behind a proxy (which this connection would bypass)."""
    import os
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    proxies = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
    if constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in proxies):
        return None
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout=5).close()
    except OSError as error:
        return f"{url.hostname}: {error.strerror or error}"
    return None


def did_you_mean_path(name):
    """` (did you mean tiny/policy?)` for a path that does not exist beside one with a close name, else ''.

    Names are compared without their extensions (a shared `.jsonl` makes unrelated names look alike), as closely
    as a misspelt flag is (`rlhf.spellings.did_you_mean`)."""
    path = Path(name).expanduser()
    if not path.parent.is_dir():
        return ""
    by_stem = {}
    for entry in sorted(path.parent.iterdir()):
        by_stem.setdefault(entry.stem, entry)
    close = difflib.get_close_matches(path.stem, sorted(by_stem), n=1, cutoff=0.8)
    return f" (did you mean {by_stem[close[0]]}?)" if close else ""


def detect_schema(columns):
    """Name the schema of a dataset from its column names (see the module docstring)."""
    columns = set(columns)
    if {"question", "chosen", "rejected"} <= columns:
        return "orca"
    if {"prompt", "chosen", "rejected"} <= columns:
        return "orca_messages"
    if "prompt" in columns:
        return "prompt"
    if "question" in columns:
        return "question"
    raise UserError(
        f"dataset columns {sorted(columns)} match no known schema; expected `system`+`question` (Intel ORCA), "
        "`prompt`+`chosen`+`rejected` (H4 ORCA), `prompt` (TRL prompt-only) or `question` (+ `ground_truth`)"
    )


def check_filled(dataset, columns):
    """Refuse a missing value (an empty CSV cell, a JSON null) or a value that is not text in a column the prompts
    or pairs are built from (`system` too, which may be empty): one line naming the row, not a chat-template or
    `str + int` error from deep inside a map. `prompt`, `chosen` and `rejected` may also be conversations."""
    optional = ["system"] if "system" in dataset.column_names else []
    for column in [*columns, *optional]:
        for number, value in enumerate(dataset[column], start=1):
            if value is None and column not in optional:
                raise UserError(f"row {number} of the dataset has no `{column}` (an empty cell or null); fill it in "
                                "or delete the row")
            messages = column in ("prompt", "chosen", "rejected")
            if value is not None and not isinstance(value, str) and not (messages and _is_conversation(value)):
                allowed = "text or a list of {role, content} messages" if messages else "text"
                raise UserError(f"row {number} of the dataset has {type(value).__name__} {str(value)[:40]!r} in "
                                f"`{column}`; it must be {allowed}: fix the column (one value per row)")


def _is_conversation(value):
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list))
        for m in value)


def to_conversation(row, schema):
    """Return the prompt of one row as a list of chat messages: system (when non-empty), then user."""
    if schema in ("orca", "question"):
        return _messages(row.get("system"), row["question"])
    if schema == "orca_messages" and isinstance(row["chosen"], list) and row["chosen"]:
        # The chosen conversation holds the prompt turns (system, user) followed by the preferred answer.
        turns = [{"role": m["role"], "content": m["content"]} for m in row["chosen"]]
        if turns[-1]["role"] == "assistant" and len(turns) > 1:
            return [m for m in turns[:-1] if m["role"] != "system" or m["content"].strip()]
    prompt = row["prompt"]
    if isinstance(prompt, list):  # already a conversation
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    return _messages(None, prompt)


def _messages(system, user):
    messages = [{"role": "system", "content": system}] if system and system.strip() else []
    return messages + [{"role": "user", "content": user}]


def render_prompt(tokenizer, messages):
    """The text a policy continues: the conversation in its chat template, opened for the assistant's answer.

    The one place a prompt is rendered (length filter, PPO's tokens, evaluation's generation). GRPO hands TRL the
    conversation itself, and TRL renders it the same way.
    """
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def tokenize_prompts(prompts, tokenizer):
    """Prompt conversations as token ids (PPO's input), rendered by `render_prompt`; no special tokens added,
    since the chat template has its own."""
    return prompts.map(
        lambda row: tokenizer(render_prompt(tokenizer, row["prompt"]), add_special_tokens=False),
        remove_columns=prompts.column_names,
        desc="Tokenizing prompts",
    )


def build_prompt_dataset(dataset, tokenizer, max_prompt_length, system_prompt=None, room=None,
                         append_system_prompt=None):
    """Map rows to a `prompt` column of conversations and drop prompts longer than `max_prompt_length` tokens.

    `system_prompt`, when given, becomes the system message of rows that have none; `append_system_prompt` then ends
    every row's system message (after a space), or is it where a row has none. The other columns stay (reward
    functions receive them, e.g. `ground_truth`). `room` (`rlhf.checks.prompt_room`) says, when no prompt is short
    enough, what the model can hold.
    """
    schema = detect_schema(dataset.column_names)
    check_filled(dataset, [PROMPT_COLUMNS[schema]])

    def format_row(row):
        messages = to_conversation(row, schema)
        if system_prompt and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": system_prompt}] + messages
        if append_system_prompt:
            own = ""
            if messages[0]["role"] == "system":
                own, messages = messages[0]["content"].strip() + " ", messages[1:]
            messages = [{"role": "system", "content": own + append_system_prompt}] + messages
        return {"prompt": messages}

    dataset = dataset.map(format_row, desc="Formatting prompts")

    # A prompt longer than the tokenizer's model_max_length makes transformers warn of indexing errors: where such
    # prompts are longer than max_prompt_length too, they are dropped here and counted in our line instead.
    dropped_anyway = max_prompt_length <= tokenizer.model_max_length

    def tokens(text):
        return len(tokenizer(text, add_special_tokens=False, verbose=not dropped_anyway)["input_ids"])

    most = max_prompt_length * longest_token(tokenizer)  # characters: a longer text is not tokenized

    def fits(row):
        text = render_prompt(tokenizer, row["prompt"])
        return len(text) <= most and tokens(text) <= max_prompt_length

    kept = dataset.filter(fits, desc="Dropping over-long prompts")
    dropped = len(dataset) - len(kept)
    logger.info(
        "Dataset schema '%s': %d prompts kept, %d dropped as longer than %d tokens.",
        schema, len(kept), dropped, max_prompt_length,
    )
    if len(kept) == 0:  # (--max_prompt_length may have been fitted to the model's context: say what fits)
        shortest = min(tokens(render_prompt(tokenizer, row["prompt"])) for row in dataset)
        raise UserError(too_long(max_prompt_length, shortest, room))
    return kept, schema, dropped


def longest_token(tokenizer):
    """The most characters one token of `tokenizer` spells: a text of more than n times as many characters holds more
    than n tokens, known without tokenizing it (a 50 MB row took minutes and 11 GB to tokenize, only to be dropped as
    too long). Byte-level BPE and SentencePiece tokens spell at least the characters they stand for."""
    return max(map(len, tokenizer.get_vocab()))


def too_long(max_prompt_length, shortest, room=None):
    """What to say when every prompt is longer than --max_prompt_length: raise it where the model's context (`room`:
    model, positions, completion flag, completion tokens; None where unknown) can hold the shortest prompt beside the
    completion, else that these prompts cannot fit this model, and what can."""
    said = f"every prompt is longer than --max_prompt_length {max_prompt_length} tokens (the shortest has {shortest})"
    if room is None:
        return f"{said}; raise it to at least {shortest}, with the completion length, within the model's context"
    model, positions, flag, completion = room
    if shortest + completion <= positions:
        return (f"{said}; raise it to at least {shortest}: {model} holds {positions} positions, "
                f"{positions - completion} of them for the prompt beside {flag} {completion}")
    if shortest < positions:
        return (f"{said}; with {flag} {completion}, {model}'s {positions} positions cannot hold the shortest prompt: "
                f"lower {flag} to at most {positions - shortest} and pass --max_prompt_length {shortest}, or use "
                "shorter prompts (other data, a shorter --system_prompt)")
    return (f"{said}, which cannot fit {model} at all ({positions} positions): use shorter prompts (other data, a "
            "shorter --system_prompt) or a model with a longer context")


def to_preference_pair(row, schema):
    """Chosen and rejected conversations of one row: the prompt turns, then the answer as assistant."""
    prompt = to_conversation(row, schema)
    return {
        "chosen": prompt + [{"role": "assistant", "content": _answer(row["chosen"])}],
        "rejected": prompt + [{"role": "assistant", "content": _answer(row["rejected"])}],
    }


def _answer(value):
    if isinstance(value, list):  # a conversation: its last message is the answer
        return value[-1]["content"]
    return value


def build_preference_dataset(dataset):
    """Map rows to `chosen`/`rejected` conversations, the format TRL's RewardTrainer tokenizes with a chat template."""
    schema = detect_schema(dataset.column_names)
    if schema not in ("orca", "orca_messages"):
        raise UserError(
            f"dataset columns {sorted(dataset.column_names)} hold prompts only, no chosen/rejected pairs; the reward "
            "model trains on pairs: give a dataset with `chosen` and `rejected` answers beside `question` (Intel "
            f"ORCA) or `prompt` (H4 ORCA), e.g. {PREFERENCES}"
        )
    check_filled(dataset, [PROMPT_COLUMNS[schema], "chosen", "rejected"])
    pairs = dataset.map(
        lambda row: to_preference_pair(row, schema), remove_columns=dataset.column_names, desc="Formatting pairs"
    )
    return pairs, schema


def check_prompts_fill_batches(num_prompts, per_batch, flag, what):
    """Refuse prompts too few for one `what` (GRPO's generation, PPO's rollout) of `per_batch` prompts, and return a
    one-line note when the last prompts of every epoch go unused (None when they divide).

    TRL 1.12 draws the shuffled prompts in whole batches and drops the last, incomplete one of every pass: GRPO's
    `RepeatSampler` keeps only full chunks of generation_batch_size / num_generations prompts, and PPO's DataLoader
    (drop_last=True; accelerate drops it across processes too) full rollouts. So an epoch uses
    floor(N / per_batch) * per_batch prompts, a new random choice each epoch; with fewer than `per_batch` it draws
    nothing, and GRPO stops in an error about max_steps while PPO waits for a batch for good.
    """
    if num_prompts < per_batch:
        raise UserError(
            f"the data hold {num_prompts} prompts, fewer than the {per_batch} of one {what} ({flag} = {per_batch}), "
            f"so no {what} can be drawn; lower {flag} to at most {num_prompts}, or give more prompts"
        )
    unused = num_prompts % per_batch
    if not unused:
        return None
    return (f"note: {num_prompts} prompts do not divide into {what}s of {per_batch} ({flag}): {unused} prompts of "
            f"each epoch go unused (another random {unused} each epoch); a {flag} that divides {num_prompts} "
            "uses them all")
