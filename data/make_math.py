"""Write `data/math_train.jsonl`, `data/math_test.jsonl` and `data/math_validation.jsonl`: arithmetic and word
problems this project writes.

    python data/make_math.py                   # rewrites the three files (deterministic: same seed, same bytes)
    python data/make_math.py OUT_DIR           # writes them into OUT_DIR instead

Rows use the `question` schema: `question` (the problem, then INSTRUCTION), `ground_truth` (a plain integer, as a
string) and `kind`, the problem family: add_1digit, add_2digit, sub_2digit, mul_small, word_add, word_sub, word_mul.
Every question holds exactly two numbers, its operands, in the order of the operation (minuend first): its answer
follows from the text and the kind.

Train and test are disjoint by operands, not only by text: each family's operand pairs (unordered for + and x) are
split once, so no test problem is a rephrasing or a swapped-order version of a training problem.

The validation file (74 rows, every family) is what training evaluates on (`--eval_dataset_name`, picking the best
checkpoint), so that the test file stays for the final evaluation. It is drawn after train and test, from a random
stream of its own (train and test are the same bytes as before it existed): no validation problem is a test problem
(by operands), and none shares a question with train. Where a family has operand pairs that neither train nor test
uses (add_2digit, sub_2digit, word_add, word_sub), its validation problems are new by operands too; the others
(add_1digit, mul_small, word_mul: train and test take every pair there is) ask training's operand pairs in new words.
"""

import json
import random
import sys
from pathlib import Path

OUTPUT_DIR = Path(__file__).resolve().parent
SEED = 2024
VALIDATION_SEED = 2025
# Validation rows per family: about a third of the test file's, in its proportions.
VALIDATION_ROWS = {"add_1digit": 8, "add_2digit": 16, "sub_2digit": 16, "mul_small": 8, "word_add": 10,
                   "word_sub": 10, "word_mul": 6}
# In the user message, where SmolLM2-135M-Instruct heeds it more: 448 samples at temperature 0.7 held a \boxed{}
# in 9.6% of cases with this sentence after the question, in 1.6% with "Answer the question." + it as system prompt.
INSTRUCTION = " Put your final answer within \\boxed{}."

ADD = ["What is {a} + {b}?", "Compute {a} + {b}.", "Add {a} and {b}.", "What is the sum of {a} and {b}?",
       "{a} + {b} = ?"]
SUB = ["What is {a} - {b}?", "Compute {a} - {b}.", "From {a}, take away {b}.", "What is {a} minus {b}?",
       "{a} - {b} = ?"]
MUL = ["What is {a} x {b}?", "Compute {a} * {b}.", "Multiply {a} by {b}.", "What is {a} times {b}?",
       "What is the product of {a} and {b}?"]
WORD_ADD = [
    "{name} has {a} {things}. {name} gets {b} more {things}. How many {things} does {name} have now?",
    "There are {a} {things} in a box and {b} {things} on the table. How many {things} are there in all?",
    "{name} picked {a} {things} in the morning and {b} {things} in the afternoon. How many {things} did {name} "
    "pick in total?",
]
WORD_SUB = [
    "{name} had {a} {things} and gave {b} of them to a friend. How many {things} does {name} have left?",
    "A shelf holds {a} {things}. {name} takes {b} of them away. How many {things} are left on the shelf?",
    "{name} needs {a} {things} and already has {b}. How many more {things} does {name} need?",
]
WORD_MUL = [
    "{name} has {a} bags with {b} {things} in each bag. How many {things} does {name} have?",
    "There are {a} boxes, and each box holds {b} {things}. How many {things} are there altogether?",
    "{name} buys {a} packs of {things}. Each pack has {b} {things}. How many {things} does {name} buy?",
]
NAMES = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kofi", "Lena", "Mateo", "Nia",
         "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Vera", "Wen", "Yusuf", "Zoe"]
THINGS = ["apples", "pencils", "stickers", "marbles", "cookies", "stamps", "shells", "books", "cards", "eggs",
          "buttons", "balloons", "oranges", "crayons", "coins"]


def pairs(low, high, ordered=False, smaller=False):
    """Operand pairs (a, b) with low <= a, b <= high: unordered (a <= b) by default; `smaller`: b < a (for -)."""
    if smaller:
        return [(a, b) for a in range(low, high + 1) for b in range(low, a)]
    return [(a, b) for a in range(low, high + 1) for b in range(low, high + 1) if ordered or a <= b]


# kind: (templates, operation, operand pairs, commutative, test rows, train rows)
FAMILIES = {
    "add_1digit": (ADD, lambda a, b: a + b, pairs(0, 9), True, 25, 200),
    "add_2digit": (ADD, lambda a, b: a + b, pairs(10, 99), True, 50, 300),
    "sub_2digit": (SUB, lambda a, b: a - b, pairs(10, 99, smaller=True), False, 50, 300),
    "mul_small": (MUL, lambda a, b: a * b, pairs(2, 12), True, 25, 250),
    "word_add": (WORD_ADD, lambda a, b: a + b, pairs(2, 20), True, 30, 150),
    "word_sub": (WORD_SUB, lambda a, b: a - b, pairs(1, 30, smaller=True), False, 30, 150),
    "word_mul": (WORD_MUL, lambda a, b: a * b, pairs(2, 12), True, 20, 150),
}


def render(kind, key, rng):
    """One row for the operand pair `key`: a random template, and for + and x a random operand order."""
    templates, operation, _, commutative, _, _ = FAMILIES[kind]
    a, b = key
    if commutative and rng.random() < 0.5:
        a, b = b, a
    question = rng.choice(templates).format(a=a, b=b, name=rng.choice(NAMES), things=rng.choice(THINGS))
    return {"question": question + INSTRUCTION, "ground_truth": str(operation(a, b)), "kind": kind}


def make_family(kind, rng, used=None):
    """Split the family's operand pairs into test and train, then draw rows with distinct questions from each.
    `used`, a dict, receives the family's test pairs and the training pairs drawn ("test", "train")."""
    _, _, keys, _, num_test, num_train = FAMILIES[kind]
    keys = list(keys)
    rng.shuffle(keys)
    test = [render(kind, key, rng) for key in keys[:num_test]]
    train_keys, train, seen, drawn = keys[num_test:], [], set(), set()
    while len(train) < num_train:
        key = rng.choice(train_keys)
        row = render(kind, key, rng)
        if row["question"] not in seen:
            seen.add(row["question"])
            train.append(row)
            drawn.add(key)
    if used is not None:
        used.update(test=set(keys[:num_test]), train=drawn)
    return train, test


def make_validation(used, questions, seed=VALIDATION_SEED):
    """The validation rows: per family, `VALIDATION_ROWS` problems on operand pairs outside the test split (outside
    train's too where some are left), each question new (`questions`: train's and test's). `used`: {kind: what
    `make_family` put in its `used`}."""
    rng, rows, seen = random.Random(seed), [], set(questions)
    for kind, count in VALIDATION_ROWS.items():
        keys = [key for key in FAMILIES[kind][2] if key not in used[kind]["test"]]
        fresh = [key for key in keys if key not in used[kind]["train"]]
        keys = fresh if len(fresh) >= count else keys  # else every pair is train's or test's: training's, new words
        family = []
        while len(family) < count:
            row = render(kind, rng.choice(keys), rng)
            if row["question"] not in seen:
                seen.add(row["question"])
                family.append(row)
        rows += family
    rng.shuffle(rows)
    return rows


def make_rows(seed=SEED, validation=False):
    """(train, test) rows, shuffled; with `validation`, (train, test, validation)."""
    rng = random.Random(seed)
    train, test, used = [], [], {}
    for kind in FAMILIES:
        family_train, family_test = make_family(kind, rng, used.setdefault(kind, {}))
        train += family_train
        test += family_test
    rng.shuffle(train)
    rng.shuffle(test)
    if validation:
        return train, test, make_validation(used, [row["question"] for row in train + test])
    return train, test


def main(output_dir=OUTPUT_DIR):
    train, test, validation = make_rows(validation=True)
    for name, rows in (("math_train.jsonl", train), ("math_test.jsonl", test),
                       ("math_validation.jsonl", validation)):
        path = Path(output_dir) / name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        print(f"Wrote {len(rows)} problems to {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
