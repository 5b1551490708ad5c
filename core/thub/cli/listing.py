"""``thub plugins``, ``thub algorithms`` and ``thub backends``: what is installed."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from thub.manager import get_registry
from thub.selection import backend_status, missing_requirements
from thub.ui.output import JSON_SCHEMA_VERSION, console, emit_json, stdout_console, table

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


def plugins_data() -> dict[str, Any]:
    registry = get_registry()
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "plugins": [asdict(info) for info in registry.plugins.values()],
        "failures": [asdict(failure) for failure in registry.failures],
        "managed": _managed_plugins(registry),
        "shadowed": list(registry.shadowed),
    }


def _managed_plugins(registry: Any) -> list[dict[str, Any]]:
    """Plugins of managed environments (from their manifests), with where they live."""
    from thub.envs.manifest import list_manifests

    return [
        {**plugin, "environment": m.name, "python": m.python,
         "backends": [b["name"] for b in m.backends if b.get("distribution") == plugin.get("distribution")]}
        for m in list_manifests() for plugin in m.data.get("plugins", [])
    ]


def _location(registry: Any, spec: Any) -> dict[str, Any]:
    """Where a backend lives: the current environment, or a managed one with its interpreter."""
    env = registry.environments.get(spec.name)
    if env is None:
        import sys

        return {"environment": "current", "python": sys.executable}
    from thub.envs.manifest import find_manifest

    manifest = find_manifest(env)
    entry = manifest.backend(spec.name) if manifest else None
    return {
        "environment": env,
        "python": spec.python,
        "path": str(manifest.env_path) if manifest else None,
        "requirements": entry.get("requirements", []) if entry else [],
        "library": entry.get("library") if entry else None,
    }


@click.command()
@json_option
def plugins(as_json: bool) -> None:
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
    for plugin in data["managed"]:
        stdout_console().print(f"{plugin['name']}: {plugin['distribution']} {plugin['version']} in managed environment "
                        f"{plugin['environment']!r} ({plugin['python']}); backends: "
                        f"{', '.join(plugin['backends']) or '-'}",
                        markup=False)
    for note in data["shadowed"]:
        console().print(f"[yellow]note:[/yellow] {note}")
    for failure in data["failures"]:
        stdout_console().print(
            f"[red]✗ {failure['name']}[/red] ({failure['distribution'] or 'built-in'}) "
            f"failed at {failure['stage']}: {failure['error']}"
        )


@click.command()
@json_option
def algorithms(as_json: bool) -> None:
    from thub.data.kinds import accepted_kinds

    registry = get_registry()
    data: list[dict[str, Any]] = []
    for spec in registry.algorithms.values():
        kinds = accepted_kinds(spec)
        data.append({
            "name": spec.name,
            "summary": spec.summary,
            "data_kinds": kinds,  # empty: any kind
            # the formats those kinds are read from (a kind no installed plugin registers has none)
            "data_formats": [name for kind in kinds if kind in registry.data_kinds
                             for name in registry.data_kinds[kind].format_names()],
            "backends": [b.name for b in registry.backends_for(spec.name)],
            "plugin": spec.provenance.plugin,
        })
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "algorithms": data})
        return
    table("Algorithms", ["algorithm", "data", "backends", "summary"],
          [[a["name"], ", ".join(a["data_kinds"]) or "any", ", ".join(a["backends"]) or "(none installed)",
            a["summary"]] for a in data])


def installable(registry: Any, algorithm: str | None) -> list[dict[str, Any]]:
    """The backends ``thub install`` offers (its catalog) that run ``algorithm`` (any, when None)
    and whose plugin is installed nowhere thub looks, each with the command that installs it."""
    from thub.envs.catalog import CATALOG
    from thub.selection import cuda_visible

    here = {spec.provenance.distribution for spec in registry.backends.values()}
    return [{"name": entry.name, "distribution": entry.distribution, "algorithms": sorted(entry.algorithms),
             "install": entry.install_command(gpu=cuda_visible())}
            for entry in CATALOG.values()
            if entry.kind == "backend" and entry.distribution not in here
            and (algorithm is None or algorithm in entry.algorithms)]


@click.command()
@click.argument("algorithm", required=False)
@json_option
def backends(algorithm: str | None, as_json: bool) -> None:
    registry = get_registry()
    if algorithm:
        registry.algorithm(algorithm)  # unknown name -> clear error
    chosen = registry.backends_for(algorithm) if algorithm else sorted(registry.backends.values(), key=lambda b: b.name)
    data = []
    for spec in chosen:
        ready, why = backend_status(spec)
        where = _location(registry, spec)
        data.append({
            "name": spec.name,
            "summary": spec.summary,
            "algorithms": sorted(spec.algorithms),
            "requirements": where.pop("requirements", None) or list(spec.requirements),
            "missing": missing_requirements(spec),
            **where,
            "needs_cuda": spec.needs_cuda,
            "priority": spec.priority,
            "ready": ready,
            "status": why,
            "plugin": spec.provenance.describe(),
            # the table's short form (its distribution: --json, thub plugins): a long distribution name
            # such as thub-plugin-sentence-transformers is one unbreakable word a 100-column table cannot fit
            "plugin_short": " ".join(filter(None, (spec.provenance.plugin, spec.provenance.version))),
        })
    offered = installable(registry, algorithm)
    if as_json:
        for b in data:
            b.pop("plugin_short")
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "backends": data, "installable": offered,
                   "shadowed": list(registry.shadowed)})
        return
    rows = [[b["name"], ", ".join(b["algorithms"]), "✓ ready" if b["ready"] else f"✗ {b['status']}",
             b.pop("plugin_short"),
             "current" if b["environment"] == "current" else f"env {b['environment']}: {b['path'] or b['python']}"]
            for b in data]
    rows += [[b["name"], ", ".join(b["algorithms"]), f"– not installed: {b['install']}", b["distribution"], "-"]
             for b in offered]
    if rows:
        table("Backends", ["backend", "algorithms", "status", "plugin", "lives in"], rows)
    for note in registry.shadowed:
        console().print(f"[yellow]note:[/yellow] {note}")
    if not data:
        from thub.envs.catalog import install_advice

        what = f"No installed backend runs {algorithm}" if algorithm else "No backend installed"
        advice = install_advice(algorithm) if algorithm else "install one, e.g. `thub install trl`"
        console().print(f"{what}; {advice}.", markup=False)
