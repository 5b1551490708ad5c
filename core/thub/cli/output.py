"""Output conventions: humans on stderr (rich), machine data on stdout (JSON)."""

from __future__ import annotations

import json
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

JSON_SCHEMA_VERSION = 1


@cache
def console() -> Console:
    """A rich console on stderr (colour only on a terminal)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=False)


def emit_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    """A rich table on stderr."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*row)
    console().print(t)
