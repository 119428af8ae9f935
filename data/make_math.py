"""Write `data/math_train.jsonl` and `data/math_test.jsonl`: arithmetic and word problems this project writes.

    python data/make_math.py                   # rewrites both files (deterministic: same seed, same bytes)
    python data/make_math.py OUT_DIR           # writes them into OUT_DIR instead

Rows use the `question` schema: `question` (the problem, then INSTRUCTION), `ground_truth` (a plain integer, as a
string) and `kind`, the problem family: add_1digit, add_2digit, sub_2digit, mul_small, word_add, word_sub, word_mul.
Every question holds exactly two numbers, its operands, in the order of the operation (minuend first): its answer
follows from the text and the kind.

Train and test are disjoint by operands, not only by text: each family's operand pairs (unordered for + and x) are
split once, so no test problem is a rephrasing or a swapped-order version of a training problem.
"""

import json
import random
import sys
from pathlib import Path

OUTPUT_DIR = Path(__file__).resolve().parent
SEED = 2024
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


def make_family(kind, rng):
    """Split the family's operand pairs into test and train, then draw rows with distinct questions from each."""
    _, _, keys, _, num_test, num_train = FAMILIES[kind]
    keys = list(keys)
    rng.shuffle(keys)
    test = [render(kind, key, rng) for key in keys[:num_test]]
    train_keys, train, seen = keys[num_test:], [], set()
    while len(train) < num_train:
        row = render(kind, rng.choice(train_keys), rng)
        if row["question"] not in seen:
            seen.add(row["question"])
            train.append(row)
    return train, test


def make_rows(seed=SEED):
    rng = random.Random(seed)
    train, test = [], []
    for kind in FAMILIES:
        family_train, family_test = make_family(kind, rng)
        train += family_train
        test += family_test
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def main(output_dir=OUTPUT_DIR):
    train, test = make_rows()
    for name, rows in (("math_train.jsonl", train), ("math_test.jsonl", test)):
        path = Path(output_dir) / name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        print(f"Wrote {len(rows)} problems to {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
