"""CSV files as training data (issue 30 item 4): Training Hub 0.11.2 reads them with
``datasets.load_dataset("csv", ...)`` and decodes a ``messages`` column held as JSON text; thub
reads the same values, names every record by the line it starts on, and refuses bad rows with
``file:LINE: field: ...`` (exit 2, no traceback)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from thub.data.loading import load_dataset_rows
from thub.data.problems import Problems
from thub.data.readers import iter_records
from thub.errors import UsageError

pytestmark = pytest.mark.needs_module("datasets", "pandas")


def _chat(user: str, assistant: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    """A CSV file as spreadsheets and pandas write it (csv module: quotes where needed, "" inside)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# Hard cases in one file: Unicode (accents, CJK, emoji), a comma and a quote inside a cell, JSON
# text spread over several lines inside quotes (pretty-printed), an empty cell in another column.
HARD = [
    [json.dumps(_chat("héllo, “wörld” 日本 🙂", 'say "hi", then stop'), ensure_ascii=False), "é, ü"],
    [json.dumps(_chat("multi\nline? (escaped in JSON)", "a, b, c"), indent=2), ""],
    [json.dumps(_chat("q", "A")), "plain"],
]


def _hard(tmp_path: Path) -> Path:
    return _write(tmp_path / "hard.csv", ["messages", "note"], HARD)


def test_hard_cases_are_read_as_datasets_reads_them(tmp_path: Path) -> None:
    """The rows are those of Training Hub's own path (datasets' CSV loader, then json.loads of messages)."""
    import datasets

    path = _hard(tmp_path)
    ours = [record for _, record in iter_records(path, Problems())]
    theirs = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    expected = [{**row, "messages": json.loads(row["messages"])} for row in theirs]
    assert ours == expected
    assert ours[0]["messages"][0]["content"] == "héllo, “wörld” 日本 🙂"
    assert ours[0]["messages"][1]["content"] == 'say "hi", then stop'
    assert ours[1]["note"] is None  # an empty cell is a null, as in datasets
    rows = load_dataset_rows(str(path))
    assert [row["messages"][1]["content"] for row in rows] == ['say "hi", then stop', "a, b, c", "A"]


def test_locations_are_the_line_each_record_starts_on(tmp_path: Path) -> None:
    path = _hard(tmp_path)
    locations = [location for location, _ in iter_records(path, Problems())]
    second_lines = HARD[1][0].count("\n") + 1  # the pretty-printed JSON spans these lines
    assert locations == [f"{path}:2", f"{path}:3", f"{path}:{3 + second_lines}"]


def test_bad_rows_are_named_by_line_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.csv", ["messages", "note"], [
        [json.dumps(_chat("ok", "fine"), indent=1), ""],                           # lines 2-11
        ['[{"role": "user", "content": "x"}', ""],                                 # 12: JSON cut short
        [json.dumps([{"role": "user", "content": "only a question"}]), ""],        # 13: nothing to train on
        ["", "the messages cell is empty"],                                        # 14
        [json.dumps([{"role": "bogus", "content": "x"}, {"role": "assistant", "content": "y"}]), ""],  # 15
    ])
    with pytest.raises(UsageError) as raised:
        load_dataset_rows(str(path))
    lines = str(raised.value).splitlines()
    assert lines[0].startswith(f"{path}:12: messages: expected a list of messages as JSON text, found malformed JSON")
    assert lines[1].startswith(f"{path}:13: messages: expected at least one assistant turn")
    assert lines[2] == f"{path}:14: messages: expected a non-empty list of messages, found null"
    assert lines[3].startswith(f"{path}:15: messages[0].role: expected one of")


@pytest.mark.parametrize(("text", "expected"), [
    ('messages,note\n"[]",a,b\n', ":2: expected at most 2 fields (the header's), found 3"),
    ('messages,note\n"[]",a\n"[],b\n', ":3: expected CSV, found a quoted field that opens here is never closed"),
    ("messages,note\n", ":1: expected at least one row, found an empty file"),
    ("", ":1: expected at least one row, found an empty file"),
])
def test_malformed_files(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "m.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=str(path).replace(".", r"\.") + expected.replace("(", r"\(")
                       .replace(")", r"\)")):
        load_dataset_rows(str(path))


def test_invalid_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b'messages\n"[]"\n"caf\xe9"\n')
    with pytest.raises(UsageError, match=r"latin1\.csv:\d+: expected UTF-8 text, found invalid byte 0xe9"):
        load_dataset_rows(str(path))


def test_byte_order_mark_and_crlf(tmp_path: Path) -> None:
    """A spreadsheet export: UTF-8 with a byte-order mark and CRLF line ends."""
    path = tmp_path / "excel.csv"
    cell = json.dumps(_chat("q", "a")).replace('"', '""')
    path.write_bytes(b"\xef\xbb\xbfmessages,n\r\n" + f'"{cell}",1\r\n"{cell}",2\r\n'.encode())
    found = list(iter_records(path, Problems()))
    assert [location for location, _ in found] == [f"{path}:2", f"{path}:3"]
    assert [record["n"] for _, record in found] == [1, 2]  # typed as datasets types it


def test_cli_check_mixing_and_exit_code(tmp_path: Path, demo_data: Path) -> None:
    """`thub data check` takes CSV alone and in a --dataset mix with JSONL; a bad row exits 2, no traceback."""
    hard = _hard(tmp_path)
    run = [sys.executable, "-m", "thub", "data", "check"]
    done = subprocess.run([*run, str(hard)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 valid rows" in done.stdout
    done = subprocess.run([*run, "--dataset", str(hard), "--dataset", str(demo_data / "chat.jsonl")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = _write(tmp_path / "bad.csv", ["messages"], [[json.dumps(_chat("a", "b"))], ["[oops"]])
    done = subprocess.run([*run, str(bad)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{bad}:3: messages: expected a list of messages as JSON text" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_preview_and_stats_read_csv(tmp_path: Path, tiny_model: Path) -> None:
    hard = _hard(tmp_path)
    for command in ("preview", "stats"):
        done = subprocess.run([sys.executable, "-m", "thub", "data", command, "--model", str(tiny_model), str(hard)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([sys.executable, "-m", "thub", "data", "preview", "--model", str(tiny_model), str(hard),
                           "-n", "1"], capture_output=True, text=True, timeout=300)
    assert "日本" in done.stdout
