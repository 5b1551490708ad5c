"""``thub doctor``: checks as data, a concurrent runner with timeouts, and rendering.

Checks come from plugins through ``thub_register_checks`` (the core's own live in
``thub_builtins.checks``). This package selects and runs them (:mod:`thub.doctor.execution`),
renders the report (:mod:`thub.doctor.render`) and collects the ``thub env`` report
(:mod:`thub.doctor.envreport`). :func:`preflight` is what ``thub train`` calls before launching.
"""

from __future__ import annotations

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

__all__ = [
    "PREFLIGHT_TAG",
    "SLOW_TAG",
    "STATUSES",
    "Outcome",
    "blocking",
    "counts",
    "exit_code",
    "format_problems",
    "make_context",
    "order_checks",
    "plugin_labels",
    "preflight",
    "run_checks",
    "select_checks",
]


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
    return run_checks(specs, make_context(backend=backend, output_dir=output_dir, env=env))


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
