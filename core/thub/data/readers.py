"""Readers for JSONL, JSON (array), Parquet and saved Hugging Face datasets.

Every reader yields ``(location, record)`` where ``location`` is what error messages print:
``path:LINE`` for JSONL and JSON (the line the record starts on), ``path:row N`` (1-based) for
Parquet and saved datasets, which have no lines. pyarrow and ``datasets`` are imported only when
such a file is read, so ``thub data check`` on JSONL stays a plain-Python, sub-second affair.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from thub.data.problems import Problems
from thub.errors import UsageError, did_you_mean_path

Record = tuple[str, Any]

_JSONL = {".jsonl", ".ndjson"}
_JSON = {".json"}
_PARQUET = {".parquet", ".pq"}
#: UTF-8 byte-order mark: Windows editors and spreadsheet exports start files with it, and
#: ``datasets``/pandas read such files; it is not part of the first record.
_BOM = b"\xef\xbb\xbf"
#: A record whose arrays and objects nest deeper than Python's JSON reader can follow (~1,000
#: levels): bad input named at its line, never a RecursionError.
TOO_DEEP = "nested too deeply (more levels of arrays and objects than can be read)"


def file_kind(path: str | os.PathLike[str]) -> str:
    """``jsonl``, ``json``, ``parquet`` or ``hf`` (a ``save_to_disk`` directory); else UsageError."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such file or directory{did_you_mean_path(str(p))}")
    if p.is_dir():
        if any((p / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return "hf"
        raise UsageError(f"{p}: a directory, but not a saved Hugging Face dataset "
                         "(expected dataset_info.json/state.json or dataset_dict.json from save_to_disk)")
    suffix = p.suffix.lower()
    if suffix in _JSONL:
        return "jsonl"
    if suffix in _JSON:
        # Some tools write JSON Lines under a .json name; the first non-blank byte tells.
        with p.open("rb") as handle:
            head = handle.read(4096).removeprefix(_BOM).lstrip()
        return "json" if head[:1] == b"[" else "jsonl"
    if suffix in _PARQUET:
        return "parquet"
    raise UsageError(f"{p}: unsupported file type {suffix or '(none)'!r}; expected .jsonl, .json, .parquet "
                     "or a saved Hugging Face dataset directory")


def iter_records(path: str | os.PathLike[str], problems: Problems) -> Generator[Record, None, None]:
    """Yield ``(location, record)`` for every record; malformed JSON is recorded in ``problems``."""
    kind = file_kind(path)
    if kind == "jsonl":
        yield from _iter_jsonl(Path(path), problems)
    elif kind == "json":
        yield from _iter_json_array(Path(path), problems)
    elif kind == "parquet":
        yield from _iter_parquet(Path(path))
    else:
        yield from _iter_hf(Path(path))


def _iter_jsonl(path: Path, problems: Problems) -> Iterator[Record]:
    # Decode the file once and call the C scanner per line: json.loads adds a Python-level
    # wrapper per call that costs ~15% on 100k-line files. Any line the scanner rejects goes
    # through json.loads again, only to get its precise error message.
    data = path.read_bytes().removeprefix(_BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        yield from _iter_jsonl_bytes(path, data, problems)
        return
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__; not in typeshed
    name = str(path)
    for number, line in enumerate(text.split("\n"), start=1):
        if not line or line.isspace():
            continue
        try:
            start = 0 if line[0] not in " \t\r" else len(line) - len(line.lstrip())
            value, end = scan(line, start)
            if end == len(line) or line[end:].isspace():
                yield f"{name}:{number}", value
                continue
        except (StopIteration, json.JSONDecodeError, RecursionError):
            pass
        try:
            yield f"{name}:{number}", json.loads(line)
        except json.JSONDecodeError as exc:
            problems.error(f"{name}:{number}", "", f"expected a JSON object, found malformed JSON ({exc.msg} at "
                           f"column {exc.colno})", kind="json")
        except RecursionError:
            problems.error(f"{name}:{number}", "", TOO_DEEP, kind="json")


def _iter_jsonl_bytes(path: Path, data: bytes, problems: Problems) -> Iterator[Record]:
    """Line by line from bytes, so an invalid UTF-8 byte is reported at its line."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", json.loads(line)
        except UnicodeDecodeError as exc:
            problems.error(f"{path}:{number}", "", f"expected UTF-8 text, found invalid byte at column {exc.start + 1}",
                           kind="encoding")
        except json.JSONDecodeError as exc:
            problems.error(f"{path}:{number}", "", f"expected a JSON object, found malformed JSON ({exc.msg} at "
                           f"column {exc.colno})", kind="json")
        except RecursionError:
            problems.error(f"{path}:{number}", "", TOO_DEEP, kind="json")


def _iter_json_array(path: Path, problems: Problems) -> Iterator[Record]:
    # Decode element by element with raw_decode so every record keeps the line it starts on.
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: drops a leading byte-order mark
    except UnicodeDecodeError as exc:
        problems.error(f"{path}:1", "", f"expected UTF-8 text, found invalid byte at offset {exc.start}",
                       kind="encoding")
        return
    decoder = json.JSONDecoder()
    n = len(text)
    pos = _skip_ws(text, 0)
    line, line_pos = 1, 0

    def line_at(index: int) -> int:
        nonlocal line, line_pos
        line += text.count("\n", line_pos, index)
        line_pos = index
        return line

    if pos >= n or text[pos] != "[":
        problems.error(f"{path}:{line_at(pos)}", "", "expected a JSON array of objects, found "
                       f"{text[pos:pos + 1]!r}", kind="json")
        return
    pos = _skip_ws(text, pos + 1)
    if pos < n and text[pos] == "]":
        return
    while pos < n:
        start_line = line_at(pos)
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            problems.error(f"{path}:{exc.lineno}", "", f"expected a JSON value, found malformed JSON ({exc.msg} at "
                           f"column {exc.colno})", kind="json")
            return  # the rest of an array cannot be resynchronised reliably
        except RecursionError:
            problems.error(f"{path}:{start_line}", "", TOO_DEEP, kind="json")
            return  # (as above)
        yield f"{path}:{start_line}", obj
        pos = _skip_ws(text, pos)
        if pos < n and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif pos < n and text[pos] == "]":
            return
        else:
            problems.error(f"{path}:{line_at(min(pos, n))}", "", "expected ',' or ']' in the JSON array, found "
                           f"{text[pos:pos + 1] or 'end of file'!r}", kind="json")
            return
    problems.error(f"{path}:{line_at(n)}", "", "expected ']' closing the JSON array, found end of file", kind="json")


def _skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _iter_parquet(path: Path) -> Iterator[Record]:
    import pyarrow.parquet as pq  # lazy: only Parquet users pay for pyarrow

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise UsageError(f"{path}: expected a Parquet file, found unreadable data ({exc})") from None
    row = 0
    for batch in parquet.iter_batches(batch_size=4096):
        for record in batch.to_pylist():
            row += 1
            yield f"{path}:row {row}", record


def _iter_hf(path: Path) -> Iterator[Record]:
    import datasets  # lazy: heavy, only for saved HF datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"{path}: expected a dataset saved with save_to_disk, found unreadable data ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise UsageError(f"{path}: split: expected a 'train' split, found {sorted(loaded)}")
        loaded = loaded["train"]
    for row, record in enumerate(loaded, start=1):
        yield f"{path}:row {row}", record
