"""``thub doctor``: checks as data, a concurrent runner with timeouts, and rendering.

Checks come from plugins through ``thub_register_checks`` (the core's own live in
``thub_builtins.checks``). This package selects and runs them (:mod:`thub.doctor.execution`),
renders the report (:mod:`thub.doctor.render`) and collects the ``thub env`` report
(:mod:`thub.doctor.envreport`). :func:`preflight` is what ``thub train`` calls before launching.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from thub.doctor.execution import (
    PREFLIGHT_TAG,
    SLOW_TAG,
    STATUSES,
    Outcome,
    counts,
    exit_code,
    make_context,
    order_checks,
    run_checks,
    select_checks,
)

if TYPE_CHECKING:
    from thub.manager import Registry
    from thub.specs import CheckResult, CheckSpec

#: seconds each preflight check may take, overriding its own budget (the load scaling too)
PREFLIGHT_TIMEOUT_ENV = "THUB_PREFLIGHT_TIMEOUT"
#: the most a preflight check's own timeout is stretched on a loaded machine
MAX_LOAD_SCALE = 8.0
#: how a preflight check that did not finish in its budget is reported: a note, not an error
SLOW_MACHINE = "skipped: slow machine"

__all__ = [
    "PREFLIGHT_TAG",
    "SLOW_TAG",
    "STATUSES",
    "Outcome",
    "blocking",
    "counts",
    "exit_code",
    "format_problems",
    "load_scale",
    "make_context",
    "order_checks",
    "plugin_labels",
    "preflight",
    "run_checks",
    "select_checks",
]


def load_scale(load: float | None = None, cores: int | None = None) -> float:
    """How many times its own timeout a preflight check may take now: the 1-minute load average per
    core (``os.getloadavg``; both read when not given), at least 1, at most :data:`MAX_LOAD_SCALE`.
    A machine busy with other runs answers slower, not wrongly; 1 where the load is unknown."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows)
            return 1.0
    cores = cores or os.cpu_count() or 1
    return min(MAX_LOAD_SCALE, max(1.0, load / cores))


def _preflight_budget(environ: Mapping[str, str]) -> float | None:
    """``THUB_PREFLIGHT_TIMEOUT`` in seconds, None when unset; UsageError when it is no number >= 0."""
    raw = environ.get(PREFLIGHT_TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        from thub.errors import UsageError

        raise UsageError(f"{PREFLIGHT_TIMEOUT_ENV}={raw!r}: expected seconds (a number >= 0) for each preflight check")
    return value


def _slow_machine(spec: CheckSpec, seconds: float) -> CheckResult:
    """A preflight check that did not finish within ``seconds``: skipped, said as a note."""
    from thub.specs import CheckResult

    try:
        load = f"; load {os.getloadavg()[0]:.1f} on {os.cpu_count() or 1} cores"
    except (AttributeError, OSError):
        load = ""
    return CheckResult("skip", f"{SLOW_MACHINE} (not finished within {seconds:g} s{load})",
                       (f"`thub doctor {spec.id}` runs it alone, with time to finish",))


def preflight(
    backend: str | None,
    output_dir: str | None,
    *,
    registry: Registry | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Outcome]:
    """Run the checks tagged ``preflight`` that apply to a run on ``backend``; return outcomes.

    ``thub train`` calls this after resolving its configuration and before creating the run
    directory or starting the backend (brew's ``fatal_preinstall_checks``). Selected are checks
    tagged ``preflight`` that are general (declare no ``backends``) or declare ``backend``;
    with ``backend=None`` only the general ones. ``output_dir`` is the run's
    ``ckpt_output_dir`` (disk space, write access). ``env`` defaults to ``os.environ``; pass the
    environment the child process will get when it differs.

    Preflight checks are quick by contract (metadata, ``statvfs``, one ``nvidia-smi`` call), so
    this costs well under a second and imports neither torch nor any training library.

    Typical use::

        outcomes = preflight("trl", "out/run1")
        if blocking(outcomes):
            raise ThubError("preflight checks failed:\\n" + format_problems(outcomes))

    Each check gets its own timeout times :func:`load_scale` (``THUB_PREFLIGHT_TIMEOUT`` seconds
    instead, when set); one that has not finished by then is ``skip`` with a summary starting
    :data:`SLOW_MACHINE`, a note :func:`format_problems` shows on one line: on a machine too
    busy to answer in time, every run would otherwise open with an error block it cannot act on.

    Returns the outcomes in report order; the caller decides what blocks (see :func:`blocking`).
    """
    from thub.manager import get_registry

    registry = registry or get_registry()
    specs = [
        spec
        for spec in registry.checks.values()
        if PREFLIGHT_TAG in spec.tags
        and (backend in spec.backends if spec.backends else True)
    ]
    specs = order_checks(specs, list(registry.plugins))
    budget = _preflight_budget(os.environ if env is None else env)
    return run_checks(specs, make_context(backend=backend, output_dir=output_dir, env=env), timeout=budget,
                      scale=load_scale() if budget is None else 1.0, timed_out=_slow_machine)


def blocking(outcomes: Sequence[Outcome], strict: bool = False) -> list[Outcome]:
    """The outcomes that should stop a run: ``fail`` (and ``warn`` when ``strict``).

    A check that *crashed* (``error``) does not block training: it says nothing about the
    environment, and a buggy third-party check must not hold every run hostage. It is still
    shown by :func:`format_problems`.
    """
    bad = {"fail", "warn"} if strict else {"fail"}
    return [outcome for outcome in outcomes if outcome.status in bad]


def format_problems(outcomes: Sequence[Outcome]) -> str:
    """Plain text of every non-ok outcome with its details and fix, for an error message."""
    symbols = {"warn": "!", "fail": "✗", "error": "✗"}
    lines: list[str] = []
    for outcome in outcomes:
        if outcome.status == "skip" and outcome.result.summary.startswith(SLOW_MACHINE):
            lines.append(f"- {outcome.id}: {outcome.result.summary}")  # a note: nothing to fix
            continue
        if outcome.status not in symbols:
            continue
        lines.append(f"{symbols[outcome.status]} {outcome.id}: {outcome.result.summary}")
        lines.extend(f"    • {detail}" for detail in outcome.result.details)
        if outcome.result.fix:
            lines.append("    fix:")
            lines.extend(f"      {line}" for line in outcome.result.fix.splitlines())
    return "\n".join(lines)


def plugin_labels(registry: Registry) -> dict[str, str]:
    """Plugin name -> heading shown in the report (``core`` for built-ins, else dist + version)."""
    labels: dict[str, str] = {}
    for name, info in registry.plugins.items():
        if info.builtin:
            labels[name] = "core" if name == "thub_builtins.checks" else f"core ({name})"
        elif info.distribution:
            labels[name] = f"{name} ({info.distribution} {info.version or ''})".replace(" )", ")")
        else:
            labels[name] = name
    return labels
