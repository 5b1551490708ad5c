"""Errors with exit codes: usage/input errors exit 2, run failures exit 1."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ThubError(Exception):
    """A failure the CLI reports as one clear message (no traceback), exit code 1."""

    exit_code = 1


class UsageError(ThubError):
    """Bad input from the user (flags, config, data): exit code 2, nothing written."""

    exit_code = 2


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest candidate, or ``""``."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
