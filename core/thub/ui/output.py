"""Output conventions (as pip, git and kubectl): what the user asked to see (listings, reports,
plans, dry runs) goes to stdout, progress and diagnostics (warnings, errors, spinners) to stderr,
and ``--json`` prints nothing but JSON on stdout. So ``thub algorithms | grep lora``,
``thub doctor > report.txt`` and ``thub train ... --dry-run | less`` get the content.

Piped or redirected, lines are not wrapped at the terminal's (or a default 80-column) width:
a table row stays one line for ``grep``. ``COLUMNS`` still sets a width when exported.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

JSON_SCHEMA_VERSION = 1

#: Width of piped output: wide enough that no table row or line wraps.
PIPED_WIDTH = 1000


def _make(stderr: bool) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if not terminal:
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


@cache
def console() -> Console:
    """A rich console on stderr, for progress and diagnostics (colour only on a terminal)."""
    return _make(stderr=True)


@cache
def stdout_console() -> Console:
    """A rich console on stdout, for what the user asked to see: listings, reports, plans."""
    return _make(stderr=False)


def emit_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    """A rich table on stdout (a table is always something the user asked to see)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*row)
    stdout_console().print(t)
