"""CSV files that a reader of people's files (`blindspot.io.read_csv`) must refuse in one line
naming the file: for each reader's parametrized test, with its own cases (a missing column) added."""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

UNREADABLE_CSVS = [
    pytest.param(b"", "an empty file, not a CSV with a header row", id="empty"),
    pytest.param(b'a,b\n"1,2\n', "not a CSV (Error tokenizing data. C error: EOF inside string", id="unparseable"),
    pytest.param("a,b\n\xe9,1\n".encode("latin-1"), "not UTF-8 text (", id="not-utf-8"),
]


def assert_one_line_error(read: Callable[[Path], Any], path: Path, content: bytes, problem: str) -> None:
    """`read` of `path` holding `content` is a ValueError saying `problem` in one line that names the file."""
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(problem)) as raised:
        read(path)
    assert "\n" not in str(raised.value)
    assert str(path) in str(raised.value)
