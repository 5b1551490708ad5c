"""Errors with exit codes: usage/input errors exit 2, run failures exit 1."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class ThubError(Exception):
    """A failure the CLI reports as one clear message (no traceback), exit code 1."""

    exit_code = 1


class UsageError(ThubError):
    """Bad input from the user (flags, config, data): exit code 2, nothing written."""

    exit_code = 2


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: thub's signal handlers raise it, so both stop alike (exit 130)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.result: dict[str, Any] | None = None  # the result.json written for the stop, if any

    @property
    def name(self) -> str:
        """``SIGINT`` / ``SIGTERM``."""
        import signal

        return signal.Signals(self.signum).name


def closest(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The candidate most like ``name`` (difflib ratio >= ``cutoff``), or None."""
    import difflib  # on use: the CLI imports this module at start-up

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest candidate, or ``""``."""
    close = closest(name, candidates)
    return f" (did you mean {close!r}?)" if close is not None else ""


def did_you_mean_path(value: str) -> str:
    """``" (did you mean 'examples/tiny'?)"`` for a path that does not exist: each missing part
    replaced by the closest name in the folder above it (``examples/tiy``, ``exmples/tiny``),
    or ``""`` when some part has no close sibling."""
    import os
    from pathlib import Path

    path = Path(os.path.expanduser(value))
    base = Path(path.anchor) if path.is_absolute() else Path()
    fixed = base
    for part in path.parts[1:] if path.is_absolute() else path.parts:
        if not (fixed / part).exists():
            try:
                names = os.listdir(fixed)
            except OSError:
                return ""
            close = closest(part, names)
            if close is None:
                return ""
            part = close
        fixed = fixed / part
    return f" (did you mean {str(fixed)!r}?)" if str(fixed) != str(path) and fixed.exists() else ""


def json_problem(exc: Any) -> str:
    """A :class:`json.JSONDecodeError` as ``WHAT at column N``: some of json's messages end in "at"
    already ("Unterminated string starting at"), which would read "at at column"."""
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
