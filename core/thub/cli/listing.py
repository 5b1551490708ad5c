"""``thub plugins``, ``thub algorithms`` and ``thub backends``: what is installed."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from thub.cli.output import JSON_SCHEMA_VERSION, console, emit_json, table
from thub.manager import get_registry
from thub.selection import backend_status, missing_requirements

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


def plugins_data() -> dict[str, Any]:
    registry = get_registry()
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "plugins": [asdict(info) for info in registry.plugins.values()],
        "failures": [asdict(failure) for failure in registry.failures],
    }


@click.command()
@json_option
def plugins(as_json: bool) -> None:
    """List loaded plugins, what each registered, and plugins that failed to load."""
    data = plugins_data()
    if as_json:
        emit_json(data)
        return
    rows = [
        [
            p["name"],
            f"{p['distribution'] or '-'} {p['version'] or ''}".strip(),
            "; ".join(f"{kind}: {', '.join(names)}" for kind, names in p["registered"].items()) or "-",
        ]
        for p in data["plugins"]
    ]
    table("Plugins", ["plugin", "distribution", "registered"], rows)
    for failure in data["failures"]:
        console().print(
            f"[red]✗ {failure['name']}[/red] ({failure['distribution'] or 'built-in'}) "
            f"failed at {failure['stage']}: {failure['error']}"
        )


@click.command()
@json_option
def algorithms(as_json: bool) -> None:
    """List algorithms and the backends that run them."""
    registry = get_registry()
    data = [
        {
            "name": spec.name,
            "summary": spec.summary,
            "data_formats": list(spec.data_formats),
            "backends": [b.name for b in registry.backends_for(spec.name)],
            "plugin": spec.provenance.plugin,
        }
        for spec in registry.algorithms.values()
    ]
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "algorithms": data})
        return
    table("Algorithms", ["algorithm", "backends", "summary"],
          [[a["name"], ", ".join(a["backends"]) or "(none installed)", a["summary"]] for a in data])


@click.command()
@click.argument("algorithm", required=False)
@json_option
def backends(algorithm: str | None, as_json: bool) -> None:
    """List backends, the algorithms they run and whether they can run here."""
    registry = get_registry()
    if algorithm:
        registry.algorithm(algorithm)  # unknown name -> clear error
    chosen = registry.backends_for(algorithm) if algorithm else sorted(registry.backends.values(), key=lambda b: b.name)
    data = []
    for spec in chosen:
        ready, why = backend_status(spec)
        data.append({
            "name": spec.name,
            "summary": spec.summary,
            "algorithms": sorted(spec.algorithms),
            "requirements": list(spec.requirements),
            "missing": missing_requirements(spec),
            "needs_cuda": spec.needs_cuda,
            "priority": spec.priority,
            "ready": ready,
            "status": why,
            "plugin": spec.provenance.describe(),
        })
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "backends": data})
        return
    rows = [[b["name"], ", ".join(b["algorithms"]), "✓ ready" if b["ready"] else f"✗ {b['status']}", b["plugin"]] for b in data]
    table("Backends", ["backend", "algorithms", "status", "plugin"], rows)
    if not data:
        console().print("No backend installed. Install one, e.g. [bold]pip install thub-plugin-trl[/bold].")
