"""Output conventions (as pip, git and kubectl): what the user asked to see (listings, reports,
plans, dry runs) goes to stdout, progress and diagnostics (warnings, errors, spinners) to stderr,
and ``--json`` prints nothing but JSON on stdout. So ``thub algorithms | grep lora``,
``thub doctor > report.txt`` and ``thub train ... --dry-run | less`` get the content.

Piped or redirected, lines are not wrapped at the terminal's (or a default 80-column) width:
a table row stays one line for ``grep``, and no line ends in blanks. ``COLUMNS`` still sets a
width when exported. On a narrow screen table cells wrap between words, not inside them.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

JSON_SCHEMA_VERSION = 1

#: Width of piped output: wide enough that no table row or line wraps.
PIPED_WIDTH = 1000


class _StripTrailing:
    """A text stream for rich that drops trailing blanks from every line it writes: rich pads
    each table line to the table's width (hundreds of spaces when piped at PIPED_WIDTH). The
    target stream is looked up on each write, as rich does, so click's test runner still
    captures it."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._pending = ""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr if self._stderr else sys.stdout

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self.stream.write("".join(line.rstrip() + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        # A line without its newline yet is written as it is (a prompt, a progress line).
        if self._pending:
            self.stream.write(self._pending)
            self._pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _make(stderr: bool) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal:
        return Console(stderr=stderr, highlight=False, soft_wrap=False)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH
    stripped: Any = _StripTrailing(stderr)  # a text stream in all rich uses (write, flush, isatty)
    return Console(file=stripped, highlight=False, soft_wrap=False, width=width)


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


def column_widths(columns: list[str], rows: list[list[str]], width: int) -> list[int] | None:
    """Widths for a table ``width`` characters wide (columns one blank apart) that wrap its cells
    between words: each column gets its longest word and the rest is shared in proportion to
    what each column lacks. When not even the longest words fit, the widest ones give way first
    (only they are folded). None when the table fits as it is (two blanks apart), or nothing can."""
    cells = [[column, *(str(row[index]) for row in rows)] for index, column in enumerate(columns)]
    natural = [max(len(line) for cell in column for line in cell.splitlines() or [""]) for column in cells]
    # a header stays on one line: it counts as one word
    words = [max([len(column[0]), *(len(word) for cell in column[1:] for word in cell.split())]) for column in cells]
    if sum(natural) + 2 * (len(columns) - 1) <= width:
        return None
    room = width - (len(columns) - 1)
    if room < 4 * len(columns):
        return None
    while sum(words) > room:
        words[words.index(max(words))] -= 1
    lacking = [n - w for n, w in zip(natural, words)]
    spare = room - sum(words)
    return [w + spare * lack // max(1, sum(lacking)) for w, lack in zip(words, lacking)]


def table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    """A rich table on stdout (a table is always something the user asked to see). On a screen
    narrower than the table, cells wrap between words (:func:`column_widths`)."""
    from rich.table import Table

    out = stdout_console()
    fitted = column_widths(columns, rows, out.width)
    widths: list[int | None] = list(fitted) if fitted else [None] * len(columns)
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None, header_style="bold",
              padding=(0, 1, 0, 0) if fitted else (0, 1))
    for column, width in zip(columns, widths):
        t.add_column(column, overflow="fold", width=width)
    for row in rows:
        t.add_row(*row)
    out.print(t)
