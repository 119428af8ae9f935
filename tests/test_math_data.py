"""The shipped math data (data/math_train.jsonl, data/math_test.jsonl): reproducible, disjoint, correct, loadable."""

import importlib.util
import json
import re

import pytest

from conftest import ROOT
from rlhf import tiny
from rlhf.data import build_prompt_dataset, load_rows

FILES = {"train": ROOT / "data" / "math_train.jsonl", "test": ROOT / "data" / "math_test.jsonl"}
KINDS = {"add_1digit", "add_2digit", "sub_2digit", "mul_small", "word_add", "word_sub", "word_mul"}


def read(split):
    return [json.loads(line) for line in FILES[split].read_text(encoding="utf-8").splitlines()]


def operands(row):
    """The two numbers of the question: each question holds exactly its two operands."""
    numbers = [int(n) for n in re.findall(r"\d+", row["question"])]
    assert len(numbers) == 2, f"expected two numbers in {row['question']!r}"
    return numbers


def problem_key(row):
    """(kind, operands): unordered for + and x, so a swapped-order question counts as the same problem."""
    a, b = operands(row)
    return row["kind"], (a, b) if "sub" in row["kind"] else tuple(sorted((a, b)))


def test_shipped_math_data_is_exactly_what_our_generator_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_math", ROOT / "data" / "make_math.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path)
    for name, path in FILES.items():
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), (
            f"{path.name} differs from what data/make_math.py writes; run `python data/make_math.py` and commit both"
        )


def test_sizes_and_families():
    train, test = read("train"), read("test")
    assert len(train) >= 1000 and len(test) >= 200
    for rows in (train, test):
        assert {row["kind"] for row in rows} == KINDS
        assert all(set(row) == {"question", "ground_truth", "kind"} for row in rows)
        assert all(row["question"].endswith(" Put your final answer within \\boxed{}.") for row in rows)
    assert len({row["question"] for row in train}) == len(train), "a training question appears twice"


def test_train_and_test_share_no_question_and_no_problem():
    train, test = read("train"), read("test")
    assert not {row["question"] for row in train} & {row["question"] for row in test}
    shared = {problem_key(row) for row in train} & {problem_key(row) for row in test}
    assert not shared, f"operand pairs in both train and test: {sorted(shared)[:5]}"


@pytest.mark.parametrize("split", FILES)
def test_every_ground_truth_is_the_answer_to_its_question(split):
    operations = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}
    for row in read(split):
        operation = next(op for name, op in operations.items() if name in row["kind"])
        assert row["ground_truth"] == str(operation(*operands(row))), row
        assert re.fullmatch(r"\d+", row["ground_truth"]), f"not a plain non-negative integer: {row}"


@pytest.mark.parametrize("split", FILES)
def test_every_row_loads_as_a_question_prompt(split):
    rows = load_rows(str(FILES[split]))
    system = "Put your final answer within \\boxed{}."
    dataset, schema, dropped = build_prompt_dataset(rows, tiny.build_tokenizer(), 512, system)
    assert schema == "question" and dropped == 0 and len(dataset) == len(read(split))
    assert dataset[0]["prompt"] == [{"role": "system", "content": system},
                                    {"role": "user", "content": read(split)[0]["question"]}]
    assert dataset["ground_truth"] == [row["ground_truth"] for row in read(split)]
