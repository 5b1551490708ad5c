"""Find the root-cause error in a child's log, not the last wrapper's message."""

from __future__ import annotations

import errno
import os
import re
import shutil
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
        blocks.append([line.rstrip() for line in lines[start : index + 1]])
    if blocks:
        return blocks[0]
    tail = [line for line in lines if line.strip()][-context_lines:]
    return tail


def read_section(path: str | Path, offset: int = 0) -> str:
    """The log from byte ``offset`` on (the current attempt's section), or "" without a log."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def root_cause_from_file(path: str | Path, offset: int = 0) -> list[str]:
    """:func:`root_cause` of the log from byte ``offset`` on: a resumed run appends to the same
    log, and an earlier attempt's traceback is not this attempt's cause."""
    return root_cause(read_section(path, offset)) if Path(path).exists() else []


# Less than this free on the run directory's filesystem after a failure: the disk was full.
DISK_FULL_BYTES = 1 << 20
_ENOSPC_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"


def disk_full_cause(log_text: str, run_dir: str | Path) -> str | None:
    """One line saying the disk filled up, when it did; None otherwise.

    The library's own message is used when the log has it; a full disk may also have cut the
    log before the traceback reached it, so the filesystem's free space is asked as well.
    """
    for line in log_text.splitlines():
        if _ENOSPC_TEXT in line or "[Errno 28]" in line:
            match = _EXCEPTION.match(line.strip())
            detail = match.group(0) if match else line.strip()
            return f"disk full: {detail}"[:400]
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None
    if free < DISK_FULL_BYTES:
        return f"disk full: {_ENOSPC_TEXT} on the filesystem of {run_dir} ({free} bytes free)"
    return None


def peak_rss_kib(pid: int) -> int | None:
    """The peak resident memory of process ``pid`` so far (``VmHWM`` in /proc; None elsewhere or
    once it is gone): sampled by the supervisor while the child runs, so that the cause of a
    kill by the OOM killer can say how much the trainer held."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def killed_by_signal_cause(code: int, peak_kib: int | None) -> str:
    """The root cause of a child that a signal killed (exit code ``-N``), nobody having asked for
    it: the OOM killer sends SIGKILL; any other signal is named as itself."""
    import signal

    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    cause = f"the training process was killed by {name} (signal {number})"
    if number == signal.SIGKILL:
        cause += "; out of memory? (see `dmesg`)"
    if peak_kib:
        cause += f"; its peak memory was {peak_kib / 1024:,.0f} MiB"
    return cause
