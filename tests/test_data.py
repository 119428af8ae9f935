import json

import pytest

from rlhf import tiny
from rlhf.cli import UserError
from rlhf.data import build_prompt_dataset, check_dataset_source, detect_schema, load_rows, to_conversation


def test_detect_schema_recognises_each_format():
    assert detect_schema(["system", "question", "chosen", "rejected"]) == "orca"
    assert detect_schema(["prompt", "chosen", "rejected"]) == "orca_messages"
    assert detect_schema(["prompt"]) == "prompt"
    assert detect_schema(["prompt", "ground_truth"]) == "prompt"


def test_detect_schema_names_columns_when_nothing_matches():
    with pytest.raises(UserError, match=r"\['instruction', 'output'\]"):
        detect_schema(["instruction", "output"])


def test_orca_row_keeps_system_only_when_non_empty():
    row = {"system": "Be brief.", "question": "What is 2+2?", "chosen": "4", "rejected": "5"}
    assert to_conversation(row, "orca") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert to_conversation({**row, "system": "  "}, "orca") == [{"role": "user", "content": "What is 2+2?"}]


def test_orca_messages_row_takes_the_turns_before_the_answer():
    row = {
        "prompt": "What is 2+2?",
        "chosen": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
        ],
        "rejected": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "5"}],
    }
    assert to_conversation(row, "orca_messages") == row["chosen"][:2]
    # Only the answer in `chosen`: fall back to the prompt string.
    row["chosen"] = [{"role": "assistant", "content": "4"}]
    assert to_conversation(row, "orca_messages") == [{"role": "user", "content": "What is 2+2?"}]


def test_prompt_rows_as_string_or_conversation():
    assert to_conversation({"prompt": "Hi"}, "prompt") == [{"role": "user", "content": "Hi"}]
    conversation = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert to_conversation({"prompt": conversation}, "prompt") == conversation


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_load_rows_reads_local_files_and_keeps_the_first_rows(tmp_path, suffix):
    import datasets

    rows = tiny.orca_rows(10)
    path = tmp_path / f"data{suffix}"
    dataset = datasets.Dataset.from_list(rows)
    {".jsonl": lambda: dataset.to_json(path), ".json": lambda: path.write_text(json.dumps(rows)),
     ".csv": lambda: dataset.to_csv(path), ".parquet": lambda: dataset.to_parquet(path)}[suffix]()
    loaded = load_rows(str(path), max_samples=4)
    assert len(loaded) == 4
    assert loaded[0]["question"] == rows[0]["question"]
    assert loaded[3]["question"] == rows[3]["question"]


def test_load_rows_errors_name_the_problem(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_rows(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "data.txt"
    bad.write_text("x")
    with pytest.raises(UserError, match="unsupported extension"):
        load_rows(str(bad))
    empty = tmp_path / "empty.csv"
    empty.write_text("system,question,chosen,rejected\n")
    with pytest.raises(UserError, match="no rows"):
        load_rows(str(empty))


@pytest.mark.parametrize("name, content, message", [
    ("empty.jsonl", "", "is empty"),
    ("blank.jsonl", "\n\n", "is empty"),
    ("empty.json", "", "is empty"),
    ("list.json", "[]", "has no rows"),
    ("header.csv", "system,question,chosen,rejected\n", "has no rows"),
    ("empty.csv", "", "is empty"),
    ("broken.jsonl", '{"question": "x"\n', "broken.jsonl, line 1: the row is cut short"),
])
def test_empty_header_only_or_broken_files_end_in_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        load_rows(str(path))


ROWS = [{"question": f"Q{i}?", "chosen": "Yes.", "rejected": "No."} for i in range(3)]


def test_a_file_datasets_cannot_read_is_said_by_its_bad_line(tmp_path):
    # A type change and a line that is not JSON: `datasets` raised a bare ValueError ("Expected object or value").
    lines = [json.dumps(row) for row in tiny.orca_rows(12)]
    lines[9] = json.dumps({**json.loads(lines[9]), "chosen": {"text": "Yes."}})
    lines[10] = "not json"
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=r"^dataset file .*data.jsonl, line 11: the row is not valid JSON \(Expecting "
                                        r"value at column 1\); fix the row or delete it$"):
        load_rows(str(tmp_path / "data.jsonl"))
    # Conversations in one file of a folder, text in another: `datasets` cannot cast one to the other.
    folder = tmp_path / "folder"
    rows = tiny.orca_rows(8)
    tiny.write_jsonl(folder / "a.jsonl", [{**row, "chosen": [{"role": "assistant", "content": row["chosen"]}]}
                                          for row in rows[:4]])
    tiny.write_jsonl(folder / "b.jsonl", rows[4:])
    with pytest.raises(UserError, match=r"^dataset file .*b.jsonl, line 1: `chosen` is text \(.*\), where "
                                        r".*a.jsonl, line 1 has a list; give the column one type in every row$"):
        load_rows(str(folder))


def test_a_missing_path_is_answered_with_a_close_name_only(tmp_path):
    close, other = tmp_path / "close", tmp_path / "other"
    tiny.write_jsonl(close / "preferences.jsonl", ROWS)
    tiny.write_jsonl(other / "nochosen.jsonl", ROWS)
    tiny.write_jsonl(other / "math.jsonl", ROWS)
    with pytest.raises(UserError) as said:
        check_dataset_source(str(close / "prefernces.jsonl"))
    assert str(said.value).startswith(f"dataset {close / 'prefernces.jsonl'} does not exist (did you mean "
                                      f"{close / 'preferences.jsonl'}?); give an existing file")
    for typo in ("prefernces.jsonl", "data.jsonl"):  # nothing close: a shared `.jsonl` does not make it so
        with pytest.raises(UserError) as said:
            check_dataset_source(str(other / typo))
        assert str(said.value).startswith(f"dataset {other / typo} does not exist; give an existing file")


def test_empty_parquet_folders_and_saved_datasets_end_in_one_line(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"question": []}).to_parquet(tmp_path / "empty.parquet")
    with pytest.raises(UserError, match="has no rows"):
        load_rows(str(tmp_path / "empty.parquet"))
    datasets.Dataset.from_dict({"question": []}).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(UserError, match="has no rows"):
        load_rows(str(tmp_path / "saved"))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "train.jsonl").write_text("")
    with pytest.raises(UserError, match="has no rows"):
        load_rows(str(tmp_path / "folder"))
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "notes.txt").write_text("not data")
    with pytest.raises(UserError, match="holds no data files"):
        load_rows(str(tmp_path / "nothing"))


def test_splits_of_local_data(tmp_path):
    path = tiny.write_jsonl(tmp_path / "data" / "train.jsonl", tiny.orca_rows(3))
    tiny.write_jsonl(tmp_path / "data" / "test.jsonl", tiny.orca_rows(2))
    with pytest.raises(UserError, match="single split, 'train'; drop --dataset_train_split test"):
        load_rows(str(path), split="test")
    assert len(load_rows(str(tmp_path / "data"), split="test")) == 2  # a folder's files name its splits
    with pytest.raises(UserError, match=r"has no split 'validation'; pick one of \['test', 'train'\]"):
        load_rows(str(tmp_path / "data"), split="validation")


def test_build_prompt_dataset_drops_and_counts_long_prompts():
    import datasets

    tokenizer = tiny.build_tokenizer()
    rows = [{"prompt": "short one"}, {"prompt": " ".join(["water"] * 300)}, {"prompt": "also short"}]
    dataset, schema, dropped = build_prompt_dataset(datasets.Dataset.from_list(rows), tokenizer, 64)
    assert schema == "prompt"
    assert dropped == 1
    assert [p[-1]["content"] for p in dataset["prompt"]] == ["short one", "also short"]
    with pytest.raises(UserError, match="max_prompt_length"):
        build_prompt_dataset(datasets.Dataset.from_list(rows), tokenizer, 2)


def test_system_prompt_fills_rows_without_one_and_append_system_prompt_ends_every_rows():
    import datasets

    tokenizer = tiny.build_tokenizer()
    rows = datasets.Dataset.from_list([{"system": "Be kind. ", "question": "Q1", "chosen": "a", "rejected": "b"},
                                       {"system": "", "question": "Q2", "chosen": "a", "rejected": "b"}])

    def systems(**kwargs):
        dataset, _, _ = build_prompt_dataset(rows, tokenizer, 64, **kwargs)
        return [prompt[0]["content"] if prompt[0]["role"] == "system" else None for prompt in dataset["prompt"]]

    assert systems() == ["Be kind. ", None]
    assert systems(system_prompt="Be brief.") == ["Be kind. ", "Be brief."]
    assert systems(append_system_prompt="Be brief.") == ["Be kind. Be brief.", "Be brief."]
    assert systems(system_prompt="Say hi.", append_system_prompt="Be brief.") == ["Be kind. Be brief.",
                                                                                  "Say hi. Be brief."]


def test_transformers_warns_of_a_prompt_too_long_for_the_tokenizer_only_where_the_package_keeps_it():
    """transformers warns of "indexing errors" for a text longer than the tokenizer's model_max_length: said where such
    a prompt stays (--max_prompt_length above that limit), left to the package's own count where it is dropped."""
    import logging

    import datasets

    said = []

    class Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    rows = [{"prompt": "short one"}, {"prompt": " ".join(["water"] * 300)}]
    handler, transformers_logger = Said(), logging.getLogger("transformers")
    transformers_logger.addHandler(handler)
    try:
        for max_prompt_length in (64, 1000):
            tokenizer = tiny.build_tokenizer()  # transformers says it once per tokenizer
            tokenizer.model_max_length = 64
            build_prompt_dataset(datasets.Dataset.from_list(rows), tokenizer, max_prompt_length)
            said.append(f"-- {max_prompt_length}")
    finally:
        transformers_logger.removeHandler(handler)
    warned = [line.startswith("Token indices sequence length is longer") for line in said]
    assert warned == [False, True, False], said  # dropped at 64: quiet; kept at 1000: transformers warns


def test_prompts_too_long_are_answered_with_what_the_model_can_hold():
    from rlhf.data import too_long

    start = "every prompt is longer than --max_prompt_length 128 tokens (the shortest has 300)"
    # room for it beside the completion: raise it
    assert too_long(128, 300, ("m", 1024, "--max_completion_length", 256)) == (
        f"{start}; raise it to at least 300: m holds 1024 positions, 768 of them for the prompt beside "
        "--max_completion_length 256")
    # it fits the model, not beside this completion length: what to lower, and by how much
    assert too_long(128, 300, ("m", 512, "--max_new_tokens", 256)) == (
        f"{start}; with --max_new_tokens 256, m's 512 positions cannot hold the shortest prompt: lower "
        "--max_new_tokens to at most 212 and pass --max_prompt_length 300, or use shorter prompts (other data, a "
        "shorter --system_prompt)")
    # 6423 tokens on a model of 1024 positions: no flag can make them fit (a newcomer was told to raise it to 6423)
    assert too_long(128, 6423, ("m", 1024, "--max_completion_length", 256)) == (
        f"{start.replace('300', '6423')}, which cannot fit m at all (1024 positions): use shorter prompts (other "
        "data, a shorter --system_prompt) or a model with a longer context")
    assert too_long(128, 300).endswith("raise it to at least 300, with the completion length, within the model's "
                                       "context")  # the model's context unknown


def test_preference_pair_is_prompt_then_each_answer():
    from rlhf.data import to_preference_pair

    row = {"system": "Be brief.", "question": "2+2?", "chosen": "4", "rejected": "5"}
    pair = to_preference_pair(row, "orca")
    assert pair["chosen"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    assert pair["rejected"][:2] == pair["chosen"][:2] and pair["rejected"][2]["content"] == "5"
    h4 = {"prompt": "2+2?", "chosen": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
          "rejected": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]}
    assert to_preference_pair(h4, "orca_messages") == {
        "chosen": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        "rejected": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}],
    }


def test_shipped_preference_data_is_exactly_what_our_generator_writes(tmp_path):
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("make_preferences", ROOT / "data" / "make_preferences.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path / "preferences.jsonl")
    assert (tmp_path / "preferences.jsonl").read_text() == (ROOT / "data" / "preferences.jsonl").read_text()
    rows = [json.loads(line) for line in (ROOT / "data" / "preferences.jsonl").read_text().splitlines()]
    assert len(rows) == 400 and detect_schema(rows[0]) == "orca"
    assert all(row["chosen"] != row["rejected"] for row in rows)


def test_prompts_too_few_for_one_batch_are_refused_and_a_remainder_is_said():
    from rlhf.data import check_prompts_fill_batches

    with pytest.raises(UserError, match=r"^the data hold 32 prompts, fewer than the 64 of one rollout "
                                        r"\(--prompts_per_rollout = 64\).*lower --prompts_per_rollout to at most 32"):
        check_prompts_fill_batches(32, 64, "--prompts_per_rollout", "rollout")
    assert check_prompts_fill_batches(64, 16, "--prompts_per_generation", "generation") is None
    note = check_prompts_fill_batches(100, 64, "--prompts_per_generation", "generation")
    assert note.startswith("note: 100 prompts do not divide into generations of 64 (--prompts_per_generation): 36 "
                           "prompts of each epoch go unused")


def load_generator():
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("make_preferences", ROOT / "data" / "make_preferences.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator


def test_a_judges_pairs_are_worded_both_ways_and_fail_in_four_more_ways_each_as_long_as_a_good_answer():
    generator = load_generator()
    modes = []
    rows = generator.make_rows(400, 4321, judge=True, modes=modes)
    assert rows == generator.make_rows(400, 4321, judge=True) and rows != generator.make_rows(400, 4322, judge=True)
    assert set(modes) == {"refusal", "off_topic", "curt", "rude", "repetitive", "cut_off", *generator.JUDGE_MODES}
    assert all(row["chosen"] != row["rejected"] for row in rows)
    # Wording is no signal: chosen answers open with the shipped phrases and with others.
    assert 0.3 < sum(row["chosen"].startswith("Here is the short version") or " in one sentence: " in row["chosen"]
                     or row["chosen"].startswith("When people talk about") for row in rows) / len(rows) < 0.7
    shipped_chosen = [len(row["chosen"]) for row in generator.make_rows()]
    for row, mode in zip(rows, modes):
        topic = next(t for t in generator.TOPICS if t in row["question"])
        what, why = generator.TOPICS[topic]
        if mode in generator.JUDGE_MODES:  # as long as a good answer (the shipped rejected ones are short)
            assert len(row["rejected"]) >= min(shipped_chosen) * 0.6, (mode, row["rejected"])
        if mode == "empty_praise":
            assert topic in row["rejected"].lower() and what not in row["rejected"] and why not in row["rejected"]
        elif mode == "wrong_facts":
            text = row["rejected"].lower()  # an opening may capitalise the facts
            assert topic in text and what.lower() not in text
            assert any(facts[0].lower() in text and facts[1].lower() in text
                       for other, facts in generator.TOPICS.items() if other != topic)
        elif mode == "looping":
            words = row["rejected"].split()  # one opening sentence, 3 or 4 times
            assert any(len(words) % k == 0 and words == words[: len(words) // k] * k for k in (3, 4))
            assert words[-1].endswith(".") and topic in row["rejected"].lower()
        elif mode == "cut_off_long":
            assert row["chosen"] != row["rejected"] and not row["rejected"].endswith((".", "!", "?"))


def test_the_generator_writes_a_judges_pairs_only_where_asked_and_keeps_a_file_of_other_rows(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    def generate(*args):
        return subprocess.run([sys.executable, ROOT / "data" / "make_preferences.py", *map(str, args)],
                              capture_output=True, text=True, cwd=tmp_path)

    shipped = (ROOT / "data" / "preferences.jsonl").read_text()
    refused = generate("--judge", "--seed", "4321")  # would replace the shipped file
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "error: --judge, --seed and --num_pairs write other pairs than the shipped "
        f"{ROOT / 'data' / 'preferences.jsonl'}; give --output PATH"]
    assert (ROOT / "data" / "preferences.jsonl").read_text() == shipped
    out = tmp_path / "judge" / "pairs.jsonl"
    first = generate("--judge", "--seed", "4321", "--output", out)
    assert first.returncode == 0 and first.stdout == f"Wrote 400 judge preference pairs to {out}\n"
    written = out.read_text()
    assert len(written.splitlines()) == 400 and written != shipped
    again = generate("--judge", "--seed", "4321", "--output", out)  # the quickstart re-run: nothing changes
    assert again.returncode == 0 and "already holds these 400 preference pairs" in again.stdout
    other = generate("--judge", "--seed", "7", "--output", out)
    assert other.returncode == 2 and f"error: {out} exists and holds other rows; it is kept" in other.stderr
    assert out.read_text() == written


def test_a_prompt_longer_than_max_prompt_length_tokens_could_spell_is_dropped_without_being_tokenized(tiny_models):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from conftest import texts_tokenized
    from rlhf.data import build_prompt_dataset, longest_token

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    huge = "word " * (512 * longest_token(tokenizer))
    rows = tiny.orca_rows(3) + [dict(tiny.orca_rows(1)[0], question=huge)]
    with texts_tokenized(tokenizer) as tokenized:
        kept, _, dropped = build_prompt_dataset(Dataset.from_list(rows), tokenizer, 512)
    assert (len(kept), dropped) == (3, 1) and max(tokenized) < len(huge)


# ---- The validation files: what training evaluates on (--eval_dataset_name), apart from the final test set ----

def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def prompt_of(row):
    """What a policy is asked: the system message and the question (ORCA), or the question (math)."""
    return row.get("system", ""), row["question"]


def test_the_preference_validation_pairs_share_no_prompt_with_the_shipped_pairs():
    from rlhf.bundled import PREFERENCES, PREFERENCES_VALIDATION

    generator = load_generator()
    rows, shipped = read_jsonl(PREFERENCES_VALIDATION), read_jsonl(PREFERENCES)
    assert rows == generator.make_validation_rows(), "run `python data/make_preferences.py` and commit both files"
    assert 60 <= len(rows) <= 80 and detect_schema(rows[0]) == "orca"
    assert all(row["chosen"] != row["rejected"] for row in rows)
    # No question of the 400 (the first 320 train, the last 80 are the quickstart's test prompts), whatever the system
    assert not {row["question"] for row in rows} & {row["question"] for row in shipped}
    assert len({prompt_of(row) for row in rows}) == len(rows)
    assert {row["question"].split()[-1].rstrip(".?") for row in rows} >= {"photosynthesis", "gravity"}  # every topic


def test_the_math_validation_problems_are_apart_from_train_and_test(tmp_path):
    from rlhf.bundled import MATH_TEST, MATH_TRAIN, MATH_VALIDATION
    from test_math_data import KINDS, operands, problem_key

    rows, train, test = read_jsonl(MATH_VALIDATION), read_jsonl(MATH_TRAIN), read_jsonl(MATH_TEST)
    assert 60 <= len(rows) <= 80 and {row["kind"] for row in rows} == KINDS
    operations = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}
    for row in rows:  # each answer right
        operation = next(op for name, op in operations.items() if name in row["kind"])
        assert row["ground_truth"] == str(operation(*operands(row))), row
    questions = [row["question"] for row in rows]
    assert len(set(questions)) == len(questions)
    assert not set(questions) & {row["question"] for row in train + test}, "a validation question in train or test"
    # Not a test problem in other words; not a training one either, where the family has operand pairs left
    assert not {problem_key(row) for row in rows} & {problem_key(row) for row in test}
    fresh = [row for row in rows if row["kind"] in ("add_2digit", "sub_2digit", "word_add", "word_sub")]
    assert len(fresh) == 52 and not {problem_key(row) for row in fresh} & {problem_key(row) for row in train}
    # What data/make_math.py writes, train and test as before
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("make_math", ROOT / "data" / "make_math.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path)
    for path in (MATH_TRAIN, MATH_TEST, MATH_VALIDATION):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), f"run `python data/make_math.py`: {path.name}"


@pytest.mark.parametrize("name", ["PREFERENCES_VALIDATION", "MATH_VALIDATION"])
def test_the_validation_files_load_as_held_out_prompts(name):
    from rlhf import bundled

    rows = load_rows(str(getattr(bundled, name)))
    dataset, schema, dropped = build_prompt_dataset(rows, tiny.build_tokenizer(), 512, "Be brief.")
    assert schema in ("orca", "question") and dropped == 0 and len(dataset) == len(rows)
