"""Errors with exit codes: usage/input errors exit 2, run failures exit 1."""

from __future__ import annotations

from collections.abc import Iterable


class ThubError(Exception):
    """A failure the CLI reports as one clear message (no traceback), exit code 1."""

    exit_code = 1


class UsageError(ThubError):
    """Bad input from the user (flags, config, data): exit code 2, nothing written."""

    exit_code = 2


def closest(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The candidate most like ``name`` (difflib ratio >= ``cutoff``), or None."""
    import difflib  # on use: the CLI imports this module at start-up

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest candidate, or ``""``."""
    close = closest(name, candidates)
    return f" (did you mean {close!r}?)" if close is not None else ""
