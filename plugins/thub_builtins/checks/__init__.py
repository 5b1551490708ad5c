"""Core doctor checks (registered like any plugin's)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from thub import hookimpl
from thub.specs import CheckContext, CheckResult, CheckSpec


def _python_version(_: CheckContext) -> CheckResult:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < (3, 11):
        return CheckResult("fail", f"Python {version} is too old", fix="Use Python 3.11 or newer.")
    return CheckResult("ok", f"Python {version}")


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    register(CheckSpec("core.python", "Python version", _python_version, tags=frozenset({"preflight"})))
