"""Find the root-cause error in a child's log, not the last wrapper's message."""

from __future__ import annotations

import re
from pathlib import Path

_EXCEPTION = re.compile(r"^(?:\[[^\]]*\]:?\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)):?\s?(.*)$")
# Exceptions raised by launchers around the real failure.
_WRAPPERS = ("ChildFailedError", "CalledProcessError", "SignalException", "ProcessExitedException")


def root_cause(log_text: str, context_lines: int = 6) -> list[str]:
    """The lines that explain a crash: the first non-wrapper traceback's tail.

    With torchrun, the worker's traceback comes before the launcher's ``ChildFailedError``;
    the first traceback that is not a wrapper is the cause.
    """
    lines = log_text.splitlines()
    blocks: list[list[str]] = []
    for index, line in enumerate(lines):
        match = _EXCEPTION.match(line.strip())
        if not match or match.group(1).split(".")[-1] in _WRAPPERS:
            continue
        start = index
        # include the traceback frames just above the exception line
        while start > 0 and index - start < context_lines and lines[start - 1].startswith((" ", "\t", "Traceback")):
            start -= 1
        blocks.append([l.rstrip() for l in lines[start : index + 1]])
    if blocks:
        return blocks[0]
    tail = [l for l in lines if l.strip()][-context_lines:]
    return tail


def root_cause_from_file(path: str | Path) -> list[str]:
    try:
        return root_cause(Path(path).read_text(errors="replace"))
    except FileNotFoundError:
        return []
