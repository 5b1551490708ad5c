"""Loading a dataset file: read, detect the format, validate every row, normalise.

The formats are those plugins registered (:mod:`thub.data.kinds`); this module names none.

No tokenizer and no heavy import here: this is what ``thub data check`` and the pre-flight
check of ``thub train`` run, and it has to take seconds on 100k rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from thub.data.formats import DatasetSource
from thub.data.kinds import formats
from thub.data.problems import Problems, no_gc
from thub.data.readers import iter_records
from thub.errors import UsageError


@dataclass
class LoadedSource:
    """A validated dataset: canonical rows, where each came from, and what was found."""

    source: DatasetSource
    format: str  # a registered format's name; "auto" when no row of a known format was found
    rows: list[dict[str, Any]] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)
    records: int = 0  # rows read (valid or not)
    roles: Counter[str] = field(default_factory=Counter)  # messages per role, for reports

    @property
    def kind(self) -> str:
        """The data kind of the rows (a registered :class:`thub.specs.DataKindSpec` name; "" when none was found)."""
        return formats().kind_of(self.format)


def load_source(source: DatasetSource, problems: Problems | None = None) -> LoadedSource:
    """Read and validate one source; problems go to ``problems`` (raised at the end if not given).

    With ``format="auto"`` the first valid-looking row decides the file's format; any later row
    that looks different is an error (a file mixing two schemas is almost always a mistake
    that would otherwise be read half-wrong).
    """
    with no_gc():
        return _load_source(source, problems)


def _load_source(source: DatasetSource, problems: Problems | None) -> LoadedSource:
    own = problems is None
    problems = problems if problems is not None else Problems()
    known = formats()
    fmt = source.format
    if fmt != "auto":
        try:
            known.get(fmt)
        except UsageError as exc:
            raise UsageError(f"{source.path}: {exc}") from None
    loaded = LoadedSource(source=source, format=fmt)
    first_at = ""
    for location, record in iter_records(source.path, problems):
        loaded.records += 1
        if fmt == "auto":
            found = known.detect(record)
            if found is None:
                keys = ", ".join(list(record)[:8]) if isinstance(record, dict) else type(record).__name__
                problems.error(location, "", f"{known.unknown_row()}, found keys {keys or '(none)'}", kind="format")
                continue
            fmt, first_at = found, location
            loaded.format = fmt
        elif source.format == "auto":
            found = known.detect(record)
            if found is not None and found != fmt:
                problems.error(location, "", f"expected a {fmt!r} row like {first_at}, found a {found!r} row "
                               "(mixed schemas in one file)", kind="mixed")
                continue
        row = known.normalise(record, fmt, location, problems, source)
        if row is not None:
            loaded.rows.append(row)
            loaded.locations.append(location)
            for message in row.get("messages", ()):
                loaded.roles[message["role"]] += 1
    if loaded.records == 0 and not problems:
        problems.error(f"{source.path}:1", "", "expected at least one row, found an empty file", kind="empty_file")
    if own:
        problems.raise_if_errors()
    return loaded


def load_dataset_rows(path: str, data_format: str = "auto", *, document_column: str | None = None) -> list[dict]:
    """Read a JSONL/JSON/Parquet/CSV file, a saved HF dataset directory or a Hub dataset id; return canonical rows.

    ``data_format`` is ``auto`` (detected from the first row; a file mixing schemas is an error)
    or a registered format (``thub data check --help`` lists them). Rows come back normalised to
    their kind's canonical rows (docs/data.md; thub's own kinds: chat formats and tool traces as
    ``{"messages": [...], "unmask"?}``, documents as ``{"document"}``, GRPO rows as
    ``{"prompt", "ground_truth"}``, processed rows passed through).

    Raises :class:`thub.errors.UsageError` (exit code 2) listing ``file:line: field: expected X,
    found Y`` for the first few bad rows plus a count of the rest.
    """
    source = DatasetSource(path=str(path), format=data_format, document_column=document_column)
    return load_source(source).rows


def load_sources(sources: list[DatasetSource]) -> list[LoadedSource]:
    """Load several sources, collecting every file's problems before raising once."""
    problems = Problems()
    loaded = [load_source(source, problems) for source in sources]
    problems.raise_if_errors()
    kinds = {item.kind for item in loaded}
    if len(kinds) > 1:
        detail = ", ".join(f"{item.source.label()} is {item.format}" for item in loaded)
        raise UsageError(f"datasets: expected sources of one kind to mix, found {detail}")
    return loaded
