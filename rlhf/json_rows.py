"""The first malformed row of a JSON or JSON Lines data file, named by its line.

`rlhf.data.load_rows` asks when `datasets` fails on such a file: pyarrow's and pandas' errors name no line (pyarrow
counts rows from 0 within a block), and some escape as a bare ValueError.
"""

import json
import re


def find_bad_row(files):
    """The first malformed row of JSON Lines or JSON files, as 'file PATH, line N: what is wrong; the fix', else None.

    A line that is not JSON (cut short or otherwise) or a row that is not an object is said before a column whose
    type differs from its first value's, since `datasets` reads some such columns (as JSON) and fails on the line."""
    first = {}  # column -> (its kind, where it first has a value)
    changed = None
    for file in files:
        try:
            for where, row in _json_rows(file):
                if not isinstance(row, dict):
                    return (f"file {file}, {where}: the row is {_kind(row)} ({_preview(row)}), not an object of "
                            'columns; write each row as one {"column": value, ...} object')
                for column, value in row.items():
                    if value is None:  # a missing value; `check_filled` says where one is needed
                        continue
                    kind, seen = first.setdefault(column, (_kind(value), f"{file}, {where}"))
                    if changed is None and _kind(value) != kind:
                        earlier = seen.removeprefix(f"{file}, ")
                        changed = (f"file {file}, {where}: `{column}` is {_kind(value)} ({_preview(value)}), where "
                                   f"{earlier} has {kind}; give the column one type in every row")
        except _NotJson as problem:
            return f"file {file}, {problem}"
    return changed


class _NotJson(ValueError):
    """A line of a data file that is not JSON, said as 'line N: what; the fix'."""


def _json_rows(file):
    """(where, row) of each row of a JSON Lines file, a JSON array or a file holding one JSON value (as `datasets`
    reads them, blank lines skipped); `_NotJson` at the first line that is not JSON."""
    data = file.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise _NotJson(f"line {line}: not UTF-8 text (byte {error.start}); save the file as UTF-8") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as error:
        if text.lstrip().startswith("[") and error.msg != "Extra data":  # one array that does not parse
            raise _NotJson(f"line {error.lineno}: " + _syntax(error, text, "the file")) from None
    else:
        if isinstance(whole, list):
            yield from _array_rows(text, whole)
        else:
            yield "line 1", whole
        return
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                yield f"line {number}", json.loads(line)
            except json.JSONDecodeError as error:
                raise _NotJson(f"line {number}: " + _syntax(error, line, "the row")) from None


def _syntax(error, text, what):
    """What is wrong with `what` (the row, the file), whose JSON `text` does not parse: cut short (it ends inside a
    value), or invalid at a column."""
    if error.msg.startswith("Unterminated string") or error.pos >= len(text.rstrip()):
        return f"{what} is cut short (its JSON ends before it closes); complete {what} or delete it"
    return f"{what} is not valid JSON ({error.msg} at column {error.colno}); fix {what} or delete it"


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def _array_rows(text, values):
    """(where, value) of each element of the JSON array `text` (which parses to `values`): its line and number."""
    decoder = json.JSONDecoder()
    index = text.index("[") + 1
    line, counted = 1, 0
    for number, value in enumerate(values, start=1):
        index = _SPACE.match(text, index).end()
        line, counted = line + text.count("\n", counted, index), index
        yield f"line {line} (element {number})", value
        index = _SPACE.match(text, decoder.raw_decode(text, index)[1]).end() + 1  # past the comma


def _kind(value):
    if isinstance(value, bool):
        return "true/false"
    return {str: "text", int: "a number", float: "a number", list: "a list", dict: "an object"}[type(value)]


def _preview(value):
    said = json.dumps(value, ensure_ascii=False)
    return said if len(said) <= 40 else said[:37] + "..."
