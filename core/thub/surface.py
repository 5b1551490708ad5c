"""Where the caller is: the ``thub`` command line or the Python API.

A message names what the caller can type where they are: ``--overwrite`` on the command line,
``overwrite=True`` from Python. The Python API (:mod:`thub.api`) runs its calls inside
:func:`python_api`; every message that names a control option spells it with :func:`option`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_SURFACE: ContextVar[str] = ContextVar("thub_surface", default="cli")


@contextlib.contextmanager
def python_api() -> Iterator[None]:
    """Messages raised (or printed) inside the block are for a Python caller."""
    token = _SURFACE.set("api")
    try:
        yield
    finally:
        _SURFACE.reset(token)


def from_python() -> bool:
    """True inside :func:`python_api`."""
    return _SURFACE.get() == "api"


def option(name: str, value: str | None = None) -> str:
    """The option ``name`` as the caller types it: ``--resume`` / ``resume=True``, or with a
    value ``--backend NAME`` / ``backend="NAME"``."""
    if from_python():
        return f"{name}=True" if value is None else f'{name}="{value}"'
    flag = "--" + name.replace("_", "-")
    return flag if value is None else f"{flag} {value}"


def without(name: str) -> str:
    """``run without --resume`` / ``call without resume=True``."""
    return f"{'call' if from_python() else 'run'} without {option(name)}"


def again() -> str:
    """What repeats the run: ``the same command`` / ``the same call``."""
    return "the same call" if from_python() else "the same command"
