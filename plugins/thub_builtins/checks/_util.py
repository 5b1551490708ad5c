"""Small helpers shared by the core checks: results, metadata, commands, paths."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Sequence

from thub.selection import installed_version as dist_version  # noqa: F401 - re-exported for the checks
from thub.specs import CheckContext, CheckResult

DOCS = "docs/doctor.md"


def ok(summary: str, details: Iterable[str] = ()) -> CheckResult:
    return CheckResult("ok", summary, tuple(details))


def skip(summary: str, details: Iterable[str] = ()) -> CheckResult:
    return CheckResult("skip", summary, tuple(details))


def warn(summary: str, fix: str, details: Iterable[str] = (), anchor: str | None = None) -> CheckResult:
    return CheckResult("warn", summary, tuple(details), fix=fix, docs=_docs(anchor))


def fail(summary: str, fix: str, details: Iterable[str] = (), anchor: str | None = None) -> CheckResult:
    return CheckResult("fail", summary, tuple(details), fix=fix, docs=_docs(anchor))


def _docs(anchor: str | None) -> str | None:
    return f"{DOCS}#{anchor}" if anchor else None


def which(context: CheckContext, program: str) -> str | None:
    """``shutil.which`` on the context's PATH (tests put fake tools there)."""
    return shutil.which(program, path=context.env.get("PATH", os.defpath))


def run_command(
    argv: Sequence[str], context: CheckContext, timeout: float = 10.0
) -> subprocess.CompletedProcess[str] | None:
    """Run a command with the context's environment; None if it cannot be started."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False,
            env=dict(context.env) or None,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def home(context: CheckContext) -> str:
    return context.env.get("HOME") or os.path.expanduser("~")


def tmpdir(context: CheckContext) -> tuple[str, str]:
    """(directory, variable) Python's ``tempfile`` and most JIT builders would use."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        if context.env.get(name):
            return context.env[name], name
    return "/tmp", "default"


def cache_home(context: CheckContext) -> str:
    return context.env.get("XDG_CACHE_HOME") or os.path.join(home(context), ".cache")


def hf_home(context: CheckContext) -> str:
    return context.env.get("HF_HOME") or os.path.join(cache_home(context), "huggingface")


def hf_hub_cache(context: CheckContext) -> str:
    """Where huggingface_hub stores models (``HF_HUB_CACHE`` > ``HF_HOME/hub``)."""
    return (
        context.env.get("HF_HUB_CACHE")
        or context.env.get("HUGGINGFACE_HUB_CACHE")
        or os.path.join(hf_home(context), "hub")
    )


def existing_ancestor(path: str) -> str:
    """``path`` or its nearest existing parent (free space is a property of the filesystem)."""
    path = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover


def quote(value: str) -> str:
    return shlex.quote(value)


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``"12.8"`` -> ``(12, 8)``; None when it does not start with a number."""
    if not text:
        return None
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts) or None
