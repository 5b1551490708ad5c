"""Collecting data problems so that a bad file yields one summarised, located message.

Why a collector rather than raising on the first bad row: a user fixing a 100k-line file wants
to see the shape of the damage (which fields, how many rows) in one run, but not 100k lines of
output. So the first few problems are shown verbatim and the rest are counted per kind.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from thub.errors import UsageError

#: How many problems are printed verbatim before the rest are only counted.
SHOWN = 5


@dataclass(frozen=True)
class Problem:
    """One located problem: ``file:line: field: expected X, found Y``."""

    location: str  # "path:line" (JSONL/JSON) or "path:row N" (Parquet, HF datasets)
    field: str  # dotted path of the offending field, e.g. "messages[2].role"
    message: str  # "expected one of system|user|assistant|tool, found 'bot'"
    kind: str = ""  # short category used to count similar problems ("role", "json", ...)

    def __str__(self) -> str:
        where = f"{self.location}: {self.field}: " if self.field else f"{self.location}: "
        return where + self.message


@dataclass
class Problems:
    """Errors and warnings found while reading/validating; summarised, never one line a row."""

    errors: list[Problem] = field(default_factory=list)
    warnings: Counter[str] = field(default_factory=Counter)
    error_count: int = 0
    error_kinds: Counter[str] = field(default_factory=Counter)

    def error(self, location: str, field_name: str, message: str, kind: str = "") -> None:
        """Record an error; only the first :data:`SHOWN` keep their full text (memory stays flat)."""
        self.error_count += 1
        self.error_kinds[kind or field_name.split("[")[0].split(".")[-1] or "row"] += 1
        if len(self.errors) < SHOWN:
            self.errors.append(Problem(location, field_name, message, kind))

    def warn(self, message: str, count: int = 1) -> None:
        """Count a warning (same text = same bucket)."""
        self.warnings[message] += count

    def __bool__(self) -> bool:
        return self.error_count > 0

    def summary(self) -> str:
        """The errors as text: first few verbatim, then ``... and N more (kind: n, ...)``."""
        lines = [str(p) for p in self.errors]
        rest = self.error_count - len(self.errors)
        if rest > 0:
            kinds = ", ".join(f"{k}: {n}" for k, n in self.error_kinds.most_common())
            lines.append(f"... and {rest} more problem(s); {self.error_count} in total ({kinds})")
        return "\n".join(lines)

    def raise_if_errors(self) -> None:
        """Raise :class:`UsageError` (exit 2) with :meth:`summary` when any error was recorded."""
        if self.error_count:
            raise UsageError(self.summary())

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form for ``--json`` reports."""
        return {
            "error_count": self.error_count,
            "errors": [{"location": p.location, "field": p.field, "message": p.message} for p in self.errors],
            "error_kinds": dict(self.error_kinds),
            "warnings": dict(self.warnings),
        }


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects.

    Parsed JSON rows and token lists never form cycles, but each allocation burst triggers
    collections that rescan everything built so far: ~30% of load time on 100k rows.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
