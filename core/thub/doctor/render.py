"""How a doctor report looks: rich lines on stdout for people, versioned JSON for machines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from thub.doctor.execution import Outcome, counts

#: Bumped when a field is removed or changes meaning; adding a field keeps the version.
SCHEMA_VERSION = 1

SYMBOLS: dict[str, tuple[str, str]] = {
    # status -> (symbol, rich style)
    "ok": ("✓", "green"),
    "warn": ("!", "yellow"),
    "fail": ("✗", "red"),
    "error": ("✗", "red bold"),
    "skip": ("–", "dim"),
}

_RESULT_PROPERTIES: dict[str, Any] = {
    "id": {"type": "string"},
    "title": {"type": "string"},
    "plugin": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "status": {"enum": ["ok", "warn", "fail", "skip", "error"]},
    "summary": {"type": "string"},
    "details": {"type": "array", "items": {"type": "string"}},
    "fix": {"type": ["string", "null"]},
    "docs": {"type": ["string", "null"]},
    "duration_ms": {"type": "number", "minimum": 0},
}

#: JSON Schema (draft 2020-12) of ``thub doctor --json``; docs/doctor.md shows an example.
REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "thub doctor report",
    "type": "object",
    "required": ["schema_version", "thub_version", "ok", "exit_code", "strict", "summary", "checks",
                 "plugin_failures"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "thub_version": {"type": "string"},
        "ok": {"type": "boolean"},
        "exit_code": {"enum": [0, 1]},
        "strict": {"type": "boolean"},
        "backend": {"type": ["string", "null"]},
        "duration_ms": {"type": "number", "minimum": 0},
        "summary": {
            "type": "object",
            "required": ["total", "ok", "warn", "fail", "skip", "error"],
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
        "checks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": list(_RESULT_PROPERTIES),
                "properties": _RESULT_PROPERTIES,
            },
        },
        "plugin_failures": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "stage", "error"],
                "properties": {
                    "name": {"type": "string"},
                    "distribution": {"type": ["string", "null"]},
                    "version": {"type": ["string", "null"]},
                    "stage": {"type": "string"},
                    "error": {"type": "string"},
                },
            },
        },
    },
}


def summary_line(outcomes: Sequence[Outcome]) -> str:
    """``"12 checks: 9 ok, 1 warning, 1 failed, 0 errors, 1 skipped"``."""
    c = counts(outcomes)

    def n(count: int, word: str, plural: str | None = None) -> str:
        return f"{count} {word if count == 1 else (plural or word + 's')}"

    return (
        f"{n(c['total'], 'check')}: {c['ok']} ok, {n(c['warn'], 'warning')}, {c['fail']} failed, "
        f"{n(c['error'], 'error')}, {c['skip']} skipped"
    )


def report_dict(
    outcomes: Sequence[Outcome],
    *,
    exit_code: int,
    strict: bool,
    thub_version: str,
    backend: str | None = None,
    duration_ms: float = 0.0,
    plugin_failures: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The ``thub doctor --json`` document (validates against :data:`REPORT_SCHEMA`)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "thub_version": thub_version,
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "strict": strict,
        "backend": backend,
        "duration_ms": round(duration_ms, 1),
        "summary": counts(outcomes),
        "checks": [outcome.to_dict() for outcome in outcomes],
        "plugin_failures": [dict(failure) for failure in plugin_failures],
    }


def outcome_line(outcome: Outcome, verbose: bool = False) -> str:
    """One rich-markup line: symbol, title, summary, id (and duration when verbose)."""
    from rich.markup import escape

    symbol, style = SYMBOLS[outcome.status]
    timing = f" {outcome.duration_ms:.0f} ms" if verbose else ""
    summary_style = "dim" if outcome.status == "skip" else ""
    summary = escape(outcome.result.summary)
    if summary_style:
        summary = f"[{summary_style}]{summary}[/{summary_style}]"
    return (
        f"  [{style}]{symbol}[/{style}] {escape(outcome.title)}: {summary} "
        f"[dim]\\[{escape(outcome.id)}]{timing}[/dim]"
    )


def render_report(
    outcomes: Sequence[Outcome],
    *,
    plugin_labels: Mapping[str, str] | None = None,
    verbose: bool = False,
    strict: bool = False,
    duration_ms: float | None = None,
) -> None:
    """Print the report on stdout (`thub doctor > report.txt`): lines grouped by plugin, a summary
    line, then "Fixes"."""
    from rich.markup import escape

    from thub.ui.output import stdout_console

    out = stdout_console()
    labels = plugin_labels or {}
    current: str | None = None
    for outcome in outcomes:
        if outcome.plugin != current:
            current = outcome.plugin
            out.print(f"\n[bold]{escape(labels.get(current, current))}[/bold]")
        out.print(outcome_line(outcome, verbose), soft_wrap=True)
        # Details explain a problem; for ok/skip they are noise unless asked for (flutter -v).
        if outcome.result.details and (verbose or outcome.status in ("warn", "fail", "error")):
            for line in outcome.result.details:
                out.print(f"      [dim]•[/dim] {escape(line)}", soft_wrap=True)

    c = counts(outcomes)
    timing = f" in {duration_ms / 1000:.1f} s" if duration_ms is not None else ""
    bad = c["fail"] + c["error"] + (c["warn"] if strict else 0)
    style = "red" if bad else ("yellow" if c["warn"] else "green")
    out.print(f"\n[{style}]{summary_line(outcomes)}{timing}[/{style}]", soft_wrap=True)

    fixes = [o for o in outcomes if o.status in ("warn", "fail", "error") and o.result.fix]
    if fixes:
        out.print("\n[bold]Fixes[/bold]")
        for outcome in sorted(fixes, key=lambda o: ("error", "fail", "warn").index(o.status)):
            symbol, sym_style = SYMBOLS[outcome.status]
            out.print(f"  [{sym_style}]{symbol}[/{sym_style}] [bold]{escape(outcome.id)}[/bold]: "
                      f"{escape(outcome.result.summary)}", soft_wrap=True)
            for line in (outcome.result.fix or "").splitlines():
                # No markup, no wrapping: fixes are meant to be copied into a shell.
                out.print(f"      {escape(line)}", soft_wrap=True)
            if outcome.result.docs:
                out.print(f"      [dim]docs: {escape(outcome.result.docs)}[/dim]")
    elif not bad and not c["warn"]:
        out.print("No issues found.")


def render_list(checks: Sequence[Any], plugin_labels: Mapping[str, str] | None = None) -> None:
    """``thub doctor --list-checks``: id, tags and title of every check, grouped by plugin."""
    from rich.markup import escape

    from thub.ui.output import stdout_console

    out = stdout_console()
    labels = plugin_labels or {}
    current: str | None = None
    width = max((len(spec.id) for spec in checks), default=0)
    for spec in checks:
        plugin = spec.provenance.plugin
        if plugin != current:
            current = plugin
            out.print(f"\n[bold]{escape(labels.get(plugin, plugin))}[/bold]")
        tags = ", ".join(sorted(spec.tags))
        backends = f" (backends: {', '.join(sorted(spec.backends))})" if spec.backends else ""
        out.print(f"  {escape(spec.id.ljust(width))}  {escape(spec.title)}{escape(backends)}"
                  f"  [dim]{escape(tags)}[/dim]", soft_wrap=True)
