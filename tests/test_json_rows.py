import json

import pytest

from rlhf import tiny
from rlhf.json_rows import find_bad_row

ROWS = [{"question": f"Q{i}?", "chosen": "Yes.", "rejected": "No."} for i in range(3)]
LINES = [json.dumps(row) for row in ROWS]


@pytest.mark.parametrize("content, problem", [
    ([LINES[0], LINES[1][:20], LINES[2]], "line 2: the row is cut short (its JSON ends before it closes)"),
    ([LINES[0], LINES[1], LINES[2][:-1]], "line 3: the row is cut short"),
    ([LINES[0], "{'question': 'Q1?'}"], "line 2: the row is not valid JSON (Expecting property name enclosed in "
                                         "double quotes at column 2); fix the row or delete it"),
    ([LINES[0], "[1, 2]"], 'line 2: the row is a list ([1, 2]), not an object of columns; write each row as one '
                           '{"column": value, ...} object'),
    ([LINES[0], '"Q1?"'], 'line 2: the row is text ("Q1?"), not an object'),
    ([LINES[0], "", json.dumps({**ROWS[1], "system": None, "chosen": {"text": "Yes."}})],
     'line 3: `chosen` is an object ({"text": "Yes."}), where line 1 has text; give the column one type in every row'),
    # a column whose type changes is said after a line that is not JSON: `datasets` reads some such columns
    ([LINES[0], json.dumps({**ROWS[1], "chosen": 5}), "garbage", LINES[2]], "line 3: the row is not valid JSON"),
], ids=["cut-short", "last-line-cut-short", "invalid", "list", "text", "type-change", "invalid-before-type-change"])
def test_the_bad_row_of_a_json_lines_file_is_named_by_its_line(tmp_path, content, problem):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(content))  # (no newline after the last row: a file cut short ends there)
    assert find_bad_row([path]).startswith(f"file {path}, {problem}")


def test_the_bad_row_of_a_json_array_is_named_by_its_line_and_element(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([ROWS[0], "Q1?", ROWS[2]], indent=2))
    assert find_bad_row([path]).startswith(f'file {path}, line 7 (element 2): the row is text ("Q1?"), not an object')
    path.write_text(json.dumps([ROWS[0], {**ROWS[1], "rejected": ["No."]}], indent=2))
    assert find_bad_row([path]) == (f'file {path}, line 7 (element 2): `rejected` is a list (["No."]), where line 2 '
                                    "(element 1) has text; give the column one type in every row")
    text = json.dumps(ROWS, indent=2)[:-20]
    path.write_text(text)
    assert find_bad_row([path]) == (f"file {path}, line {text.count(chr(10)) + 1}: the file is cut short (its JSON "
                                    "ends before it closes); complete the file or delete it")
    path.write_text(json.dumps(ROWS, indent=2))
    assert find_bad_row([path]) is None


def test_the_bad_row_of_a_folder_names_its_file(tmp_path):
    first = tiny.write_jsonl(tmp_path / "a.jsonl", ROWS)
    second = tiny.write_jsonl(tmp_path / "b.jsonl", [{**ROWS[0], "question": ["Q0?"]}])
    assert find_bad_row([first, second]) == (f'file {second}, line 1: `question` is a list (["Q0?"]), where {first}, '
                                             "line 1 has text; give the column one type in every row")
    second.write_bytes(b'{"question": "Q0?"}\n{"question": "\xff"}\n')
    assert find_bad_row([first, second]) == (f"file {second}, line 2: not UTF-8 text (byte 34); save the file as "
                                             "UTF-8")
    assert find_bad_row([first]) is None
