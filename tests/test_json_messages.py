"""A malformed-JSON problem says "at column N" once: some of json's messages end in "at" already ("Unterminated
string starting at"), which read "... starting at at column 9" in every data reader (issue 35 item 10)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from thub.errors import json_problem

Run = Callable[..., subprocess.CompletedProcess[str]]


def test_json_problem_names_the_column_once() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads('{"a": "never ends')
    assert json_problem(caught.value) == "Unterminated string starting at column 7"
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads('{"a" 1}')
    assert json_problem(caught.value) == "Expecting ':' delimiter at column 6"


@pytest.mark.parametrize("line", [
    '{"messages": [{"role": "user", "content": "never ends}]}',  # a JSON Lines row
    '{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": '
    '{"name": "f", "arguments": "{\\"x\\": \\"open"}}]}]}',  # a tool call's arguments
])
def test_data_check_says_at_column_once(line: str, tmp_path: Path, thub: Run) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(line + "\n", encoding="utf-8")
    done = thub("data", "check", str(data))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "at column" in done.stdout + done.stderr
    assert "at at" not in done.stdout + done.stderr
