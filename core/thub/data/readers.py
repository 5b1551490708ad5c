"""Readers for JSONL, JSON (array), Parquet, CSV, saved Hugging Face datasets and Hub dataset names.

Every reader yields ``(location, record)`` where ``location`` is what error messages print:
``path:LINE`` for JSONL, JSON and CSV (the line the record starts on; a CSV record with a
newline inside quotes spans several), ``path:row N`` (1-based) for Parquet, saved datasets and
Hub datasets (``org/name:row N``), which have no lines. pandas, pyarrow and ``datasets`` are
imported only when such a file is read, so ``thub data check`` on JSONL stays a plain-Python,
sub-second affair.

Tabular sources carry a conversation as JSON text (Training Hub's
``normalize_messages_column``): a ``messages`` value that is a string starting with ``[`` is
decoded as JSON in every source but JSONL, as Training Hub does; malformed JSON is an error at
the row, field ``messages``.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from thub.data.problems import Problems
from thub.errors import UsageError, did_you_mean_path, json_problem

Record = tuple[str, Any]

_JSONL = {".jsonl", ".ndjson"}
_JSON = {".json"}
_PARQUET = {".parquet", ".pq"}
_CSV = {".csv"}
#: UTF-8 byte-order mark: Windows editors and spreadsheet exports start files with it, and
#: ``datasets``/pandas read such files; it is not part of the first record.
_BOM = b"\xef\xbb\xbf"
#: A record whose arrays and objects nest deeper than Python's JSON reader can follow (~1,000
#: levels): bad input named at its line, never a RecursionError.
TOO_DEEP = "nested too deeply (more levels of arrays and objects than can be read)"


def file_kind(path: str | os.PathLike[str]) -> str:
    """``jsonl``, ``json``, ``parquet``, ``csv``, ``hf`` (a ``save_to_disk`` directory), ``files`` (a
    folder of data files: :func:`directory_files`) or ``hub`` (a Hugging Face dataset id
    ``namespace/name`` that is no local path); else UsageError."""
    from thub.data.hub import is_dataset_id

    p = Path(path)
    if not p.exists():
        # Training Hub loads any data_path that is not a local file with load_dataset(data_path); a
        # missing name that ends like a data file is a mistyped path far more often than a dataset id
        if is_dataset_id(str(path)) and p.suffix.lower() not in _JSONL | _JSON | _PARQUET | _CSV:
            return "hub"
        raise UsageError(f"{p}: no such file or directory{did_you_mean_path(str(p))}")
    if p.is_dir():
        if any((p / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return "hf"
        if directory_files(p):
            return "files"
        raise UsageError(f"{p}: a directory, but not a saved Hugging Face dataset "
                         "(expected dataset_info.json/state.json or dataset_dict.json from save_to_disk), "
                         "nor a folder of .jsonl/.json/.parquet/.csv data files")
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
    if suffix in _CSV:
        return "csv"
    raise UsageError(f"{p}: unsupported file type {suffix or '(none)'!r}; expected .jsonl, .json, .parquet, "
                     ".csv, a saved Hugging Face dataset directory or a Hub dataset id (namespace/name)")


def directory_files(path: Path) -> list[Path]:
    """The ``train`` split's data files of a folder as ``datasets.load_dataset(folder)`` finds them
    (Training Hub's path for a directory: ``train*``/``*-train-*`` names, or every file when none
    is named by split; hidden files skipped), in its order; only the file types read here."""
    try:
        from datasets.data_files import DataFilesDict, get_data_patterns
    except ImportError:
        return []
    try:
        found = DataFilesDict.from_patterns(get_data_patterns(str(path)), base_path=str(path))
    except Exception:  # noqa: BLE001 - EmptyDatasetError and friends: no data files here
        return []
    known = _JSONL | _JSON | _PARQUET | _CSV
    return [Path(file) for file in found.get("train", []) if Path(file).suffix.lower() in known]


def hash_source(digest: Any, path: str | os.PathLike[str]) -> None:
    """Feed a source's contents into ``digest`` (a :mod:`hashlib` object) for cache keys: a file's or
    directory's bytes (:func:`thub.fileio.hash_contents`), a Hub dataset's :func:`thub.data.hub.identity`."""
    from thub.fileio import hash_contents

    if not Path(path).exists() and file_kind(path) == "hub":
        from thub.data.hub import identity

        digest.update(identity(str(path)).encode())
        return
    hash_contents(digest, Path(path))


def iter_records(path: str | os.PathLike[str], problems: Problems) -> Generator[Record, None, None]:
    """Yield ``(location, record)`` for every record; malformed JSON is recorded in ``problems``."""
    kind = file_kind(path)
    if kind == "jsonl":
        yield from _iter_jsonl(Path(path), problems)
        return
    records: Iterator[Record]
    if kind == "json":
        records = _iter_json_array(Path(path), problems)
    elif kind == "parquet":
        records = _iter_parquet(Path(path))
    elif kind == "csv":
        records = _iter_csv(Path(path), problems)
    elif kind == "hub":
        from thub.data.hub import iter_hub

        records = iter_hub(str(path))
    elif kind == "files":
        for file in directory_files(Path(path)):
            yield from iter_records(file, problems)  # each file's own reader and locations
        return
    else:
        records = _iter_hf(Path(path))
    for location, record in records:
        if _decode_messages(location, record, problems):
            yield location, record


#: Columns that tabular sources hold as JSON text, and what the text must decode to: Training
#: Hub's ``normalize_messages_column`` decodes its conversation column in every source but JSONL.
JSON_TEXT_COLUMNS = {"messages": "a list of messages"}


def _decode_messages(location: str, record: Any, problems: Problems) -> bool:
    """A :data:`JSON_TEXT_COLUMNS` value held as JSON text decoded in place; False (recorded in
    ``problems``) when it is malformed."""
    if not isinstance(record, dict):
        return True
    for column, holds in JSON_TEXT_COLUMNS.items():
        value = record.get(column)
        if not isinstance(value, str) or not value.lstrip().startswith("["):
            continue  # a list already, a null cell, or plain text: the format's own checks judge it
        try:
            record[column] = json.loads(value)
        except json.JSONDecodeError as exc:
            problems.error(location, column, f"expected {holds} as JSON text, found malformed JSON "
                           f"({json_problem(exc)})", kind="json")
            return False
        except RecursionError:
            problems.error(location, column, TOO_DEEP, kind="json")
            return False
    return True


#: A line longer than this that does not start like a JSON object is malformed whatever follows:
#: it is reported from its first bytes, and the rest is skipped without being held (a 2 GB file
#: of NUL bytes is one such "line").
LONG_LINE = 1 << 20


def _iter_jsonl(path: Path, problems: Problems) -> Iterator[Record]:
    """Line by line from the file (never the whole file in memory): the C scanner per line (a
    Python-level json.loads wrapper per call costs ~15% on 100k-line files); a line it rejects
    goes through json.loads again, only for its precise error message."""
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__; not in typeshed
    name = str(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(_lines(handle), start=1):
            if number == 1:
                raw = raw.removeprefix(_BOM)
            if isinstance(raw, _Head):
                problems.error(f"{name}:{number}", "", _malformed(bytes(raw)), kind="json")
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.error(f"{name}:{number}", "", f"expected UTF-8 text, found invalid byte at column "
                               f"{exc.start + 1}", kind="encoding")
                continue
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
                problems.error(f"{name}:{number}", "", "expected a JSON object, found malformed JSON "
                               f"({json_problem(exc)})", kind="json")
            except RecursionError:
                problems.error(f"{name}:{number}", "", TOO_DEEP, kind="json")


class _Head(bytes):
    """The first bytes of an overlong line that cannot be a JSON object (the rest was skipped)."""


def _lines(handle: Any) -> Iterator[bytes]:
    """The file's lines without their newline; a line over :data:`LONG_LINE` bytes whose first
    non-blank byte cannot start a JSON value is yielded as a :class:`_Head` of its first bytes
    and the rest of it is read past in blocks, never held."""
    while True:
        raw = handle.readline(LONG_LINE)
        if not raw:
            return
        if raw.endswith(b"\n") or len(raw) < LONG_LINE:
            yield raw.rstrip(b"\n")
            continue
        if raw.lstrip()[:1] in (b"{", b"[", b'"'):  # a long row (or value): held, as it must be to be read
            rest = [raw]
            while not raw.endswith(b"\n"):
                raw = handle.readline(LONG_LINE)
                if not raw:
                    break
                rest.append(raw)
            yield b"".join(rest).rstrip(b"\n")
            continue
        head = _Head(raw[:4096])
        while not raw.endswith(b"\n"):
            raw = handle.readline(LONG_LINE)
            if not raw:
                break
        yield head


def _malformed(head: bytes) -> str:
    """The malformed-JSON message of a line from its first bytes."""
    try:
        json.loads(head.decode("utf-8", "replace"))
    except json.JSONDecodeError as exc:
        return f"expected a JSON object, found malformed JSON ({json_problem(exc)})"
    return "expected a JSON object, found malformed JSON (a line of more than 1 MiB that is not one)"


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
            problems.error(f"{path}:{exc.lineno}", "", "expected a JSON value, found malformed JSON "
                           f"({json_problem(exc)})", kind="json")
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


def _iter_csv(path: Path, problems: Problems) -> Iterator[Record]:
    """Rows as ``datasets``' CSV builder reads them (its own pandas settings: a header row, types
    inferred per column, an empty cell or ``NA`` a null, blank lines skipped), each located at
    the line its record starts on, which Python's csv module finds in a first pass (pandas
    reports no lines). A record with more fields than the header, or a quote left open, is an
    error at its line (pandas would stop at the first)."""
    starts = _csv_record_lines(path, problems)
    if not starts:
        return  # unreadable (recorded), or no data rows: the caller reports an empty file
    try:
        import pandas as pd  # type: ignore[import-untyped]  # lazy: only CSV users pay for pandas, pyarrow
        import pyarrow as pa
        from datasets.packaged_modules.csv.csv import CsvConfig
    except ImportError as exc:
        raise UsageError(f"{path}: reading CSV needs the datasets library (and pandas), not installed here "
                         f"({exc}); pip install datasets") from None

    settings = CsvConfig().pd_read_csv_kwargs
    try:
        rows: list[dict[str, Any]] = []
        for frame in pd.read_csv(path, iterator=True, **settings):
            rows.extend(pa.Table.from_pandas(frame).to_pylist())  # datasets' conversion: NaN -> None
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        problems.error(f"{path}:1", "", f"expected a CSV file with a header row, found unreadable data "
                       f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})", kind="csv")
        return
    # Both readers skip blank lines; should they ever count records differently, rows are
    # still named, by their number.
    aligned = len(starts) == len(rows)
    for number, record in enumerate(rows, start=1):
        yield (f"{path}:{starts[number - 1]}" if aligned else f"{path}:row {number}"), record


def _csv_record_lines(path: Path, problems: Problems) -> list[int] | None:
    """The line each data record starts on (after the header; blank lines skipped), or None when
    the file is not readable CSV (the problems recorded)."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a long conversation is one cell (default: 128 KiB)
    starts: list[int] = []
    header: list[str] | None = None
    bad = False
    begin = 1
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:  # -sig: a spreadsheet's byte-order mark
            reader = csv.reader(handle, strict=True)
            while True:
                begin = reader.line_num + 1
                try:
                    record = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    text = str(exc)
                    if "unexpected end of data" in text:
                        text = "a quoted field that opens here is never closed (a missing '\"')"
                    problems.error(f"{path}:{begin}", "", f"expected CSV, found {text}", kind="csv")
                    return None
                if not record:
                    continue  # a blank line
                if header is None:
                    header = record
                elif len(record) > len(header):
                    problems.error(f"{path}:{begin}", "", f"expected at most {len(header)} fields (the header's), "
                                   f"found {len(record)} (an unquoted comma?)", kind="csv")
                    bad = True
                else:
                    starts.append(begin)
    except UnicodeDecodeError as exc:
        problems.error(f"{path}:{begin}", "", f"expected UTF-8 text, found invalid byte 0x{exc.object[exc.start]:02x}",
                       kind="encoding")
        return None
    return None if bad else starts
