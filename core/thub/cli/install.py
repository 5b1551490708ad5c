"""``thub install`` / ``thub uninstall`` / ``thub envs``: backends in the current environment or
in managed environments of their own (see docs/install.md and :mod:`thub.envs`)."""

from __future__ import annotations

import shutil
import sys
from typing import Any

import click

from thub.errors import ThubError, UsageError
from thub.selection import installed_version
from thub.ui.output import JSON_SCHEMA_VERSION, console, emit_json, table

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
dry_run_option = click.option("--dry-run", is_flag=True, help="Print the exact commands; change nothing.")


def _current_backends() -> dict[str, str]:
    """Backend name -> distribution for the plugins loaded in this interpreter."""
    from thub.manager import get_registry

    registry = get_registry()
    return {name: spec.provenance.distribution or spec.provenance.plugin
            for name, spec in registry.backends.items() if spec.python is None}


def _conflict_text(conflicts: list[Any]) -> str:
    return "\n".join(f"  - {c.message()}" for c in conflicts)


@click.command()
@click.argument("backends", nargs=-1)
@click.option("--package", "packages", multiple=True, metavar="SPEC",
              help="Install this requirement from the package index, e.g. 'thub-plugin-x>=1' (repeatable).")
@click.option("--into", type=click.Choice(["auto", "current", "managed"]), default="auto", show_default=True,
              help="current: this environment (refused on conflicts); managed: an environment of its own; "
                   "auto: current unless that would conflict.")
@click.option("--env", "env_name", metavar="NAME",
              help="Managed environment name (default: one per backend, named after it).")
@click.option("--extra", "extras", multiple=True, metavar="EXTRA",
              help="Extra of the plugin distribution to add (repeatable).")
@click.option("--gpu", is_flag=True, help="Add the plugin's GPU-only extras (CUDA builds, flash-attn, ...).")
@click.option("--torch", "torch_spec", metavar="SPEC",
              help="torch for a managed environment (default: $THUB_TORCH, else the torch beside thub).")
@click.option("--installer", type=click.Choice(["auto", "pip", "uv"]), default="auto", show_default=True,
              help="auto: uv when on PATH, else pip (torch always goes in with pip).")
@click.option("--editable/--no-editable", default=None,
              help="Install local plugin folders editable (default: when thub itself is).")
@click.option("--force", is_flag=True, help="Recreate an existing managed environment.")
@click.option("--resolve", is_flag=True,
              help="With --dry-run: also ask pip's resolver what would be installed (--report).")
@dry_run_option
@json_option
def install(backends: tuple[str, ...], packages: tuple[str, ...], into: str, env_name: str | None,
            extras: tuple[str, ...], gpu: bool,
            torch_spec: str | None, installer: str, editable: bool | None, force: bool, resolve: bool,
            dry_run: bool, as_json: bool) -> None:
    """\b
    Examples:
      thub install trl                          here, unless that would break another plugin
      thub install mini-trainer --into managed  its own environment under thub's data directory
      thub install trl --into managed --dry-run print the exact commands
      thub install ./my-plugin --env lab        any plugin folder, into environment "lab"
      thub install --package 'thub-plugin-x>=1' a plugin from the package index

    Backends thub can install by name: see docs/install.md (trl, mini-trainer, instructlab, ...).
    """
    from thub.envs.catalog import resolve_source
    from thub.envs.planner import check_current, plan_current, plan_managed

    if not backends and not packages:
        raise UsageError("install: expected a backend name, a plugin folder or --package SPEC, found none")
    try:
        sources = [resolve_source(b, extras, gpu) for b in backends]
        sources += [resolve_source(p, extras, gpu, package=True) for p in packages]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = console()
    plans = []
    reports: list[dict[str, Any]] = []
    target = into
    if into in ("auto", "current"):
        already = [s for s in sources if installed_version(s.distribution)]
        if into == "auto" and len(already) == len(sources) and not force:
            for s in already:
                elsewhere = "" if s.evaluator else "; use --into managed for an environment of its own"
                out.print(f"{s.distribution} {installed_version(s.distribution)} is already installed in the current "
                          f"environment ({sys.executable}){elsewhere}.")
            if as_json:
                emit_json({"schema_version": JSON_SCHEMA_VERSION, "installed": [],
                           "already": [s.distribution for s in already]})
            return
        plan = plan_current(sources, installer=installer, torch=torch_spec, editable=bool(editable))
        try:
            conflicts, _planned = check_current(sources, plan)
        except RuntimeError as exc:
            raise ThubError(str(exc)) from None
        if conflicts and into == "current":
            raise UsageError("refusing to install into the current environment: it would break installed "
                             f"plugins' requirements:\n{_conflict_text(conflicts)}\n"
                             "install it into an environment of its own instead: "
                             f"thub install {' '.join([*backends, *(f'--package {p!r}' for p in packages)])} --into "
                             "managed")
        if conflicts:
            out.print("[yellow]The current environment would conflict[/yellow]; using a managed environment:\n"
                      + _conflict_text(conflicts), markup=True)
            target = "managed"
        else:
            target = "current"
            plans.append(plan)
    if target == "managed":
        evaluators = [s.name for s in sources if s.evaluator]
        if evaluators:  # thub eval imports the evaluator in its own process: one in another env is never found
            raise UsageError(f"{', '.join(evaluators)} is an evaluator: it runs in thub's own environment "
                             f"({sys.executable}), not a managed one"
                             + (f"; it would conflict there:\n{_conflict_text(conflicts)}" if into == "auto" else ""))
        here = _current_backends()
        groups = [sources] if env_name else [[s] for s in sources]
        for group in groups:
            try:
                plan = plan_managed(group, name=env_name, installer=installer, torch=torch_spec,
                                    editable=editable, force=force)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            for s in group:
                shadow = [b for b, dist in here.items() if dist == s.distribution]
                if shadow:
                    plan.notes.append(f"the current environment also provides {', '.join(shadow)} ({s.distribution}); "
                                      "the current environment wins (THUB_DISABLE_PLUGINS hides it)")
            plans.append(plan)
    if dry_run:
        for plan in plans:
            entry = plan.as_json()
            if resolve:
                entry["resolve"] = _resolve_preview(plan)
            reports.append(entry)
            if not as_json:
                for line in plan.lines():
                    click.echo(line)
                if resolve:
                    _print_resolve(entry["resolve"])
        if as_json:
            emit_json({"schema_version": JSON_SCHEMA_VERSION, "dry_run": True, "plans": reports})
        return
    from thub.envs.installer import execute

    results = []
    for plan in plans:
        where = (f"managed environment {plan.env_name!r} ({plan.env_path})" if plan.env_path
                 else f"the current environment ({plan.python})")
        out.print(f"Installing {', '.join(s.argument() for s in plan.sources)} into {where}")
        result = execute(plan, echo=None if as_json else (lambda line: out.print(line, markup=False, style="dim")))
        manifest = result.get("manifest")
        names = [b["name"] for b in manifest["backends"]] if manifest else []
        out.print(f"[green]✓[/green] installed in {result['seconds']} s"
                  + (f"; backends: {', '.join(names)}" if names else "")
                  + ("" if result["pip_check"] == "ok" else f"; pip check: {result['pip_check']}"))
        results.append({"target": plan.target, "environment": plan.env_name,
                        "path": str(plan.env_path) if plan.env_path else None,
                         "python": plan.python, "backends": names,
                        **{k: v for k, v in result.items() if k != "manifest"}})
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "installed": results})


def _resolve_preview(plan: Any) -> dict[str, Any]:
    """What pip would install for ``plan`` into a fresh environment, and any CUDA packages."""
    import tempfile
    from pathlib import Path

    from thub.envs.planner import cuda_packages, planned_from_report, resolve_report, thub_requirement

    args = [s.argument() for s in plan.sources]
    if plan.target == "managed":
        args = [a for a in thub_requirement(False) if a != "-e"] + args
    with tempfile.TemporaryDirectory(prefix="thub-resolve-") as tmp:
        constraints = None
        if plan.torch:
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text(plan.torch + "\n")
        try:
            report = resolve_report(sys.executable, args, constraints, ignore_installed=plan.target == "managed")
        except RuntimeError as exc:
            return {"error": str(exc)}
    planned = planned_from_report(report)
    return {"install": {d.name: d.version for d in planned.values()}, "cuda_packages": cuda_packages(planned)}


def _print_resolve(data: dict[str, Any]) -> None:
    if "error" in data:
        click.echo(f"# resolver: {data['error']}")
        return
    click.echo(f"# resolver would install {len(data['install'])} distributions: "
               + ", ".join(f"{n} {v}" for n, v in sorted(data["install"].items())))
    click.echo("# CUDA packages: " + (", ".join(data["cuda_packages"]) or "none"))


@click.command()
@click.argument("backend")
@click.option("--from", "where", type=click.Choice(["auto", "current", "managed"]), default="auto", show_default=True,
              help="Where to remove it from (auto: the managed environment holding it, else the current one).")
@dry_run_option
def uninstall(backend: str, where: str, dry_run: bool) -> None:
    """In the current environment only the plugin distribution is removed; its training library
    stays (other plugins may use it).
    """
    from thub.envs.catalog import resolve_source
    from thub.envs.manifest import list_manifests

    out = console()
    holders = [m for m in list_manifests() if m.name == backend or m.backend(backend)]
    if where in ("auto", "managed") and holders:
        for manifest in holders:
            entry = manifest.backend(backend)
            dist = entry["distribution"] if entry else None
            others = [p for p in manifest.data.get("plugins", []) if p.get("distribution") != dist]
            if entry is None or not others:
                _remove_env(manifest, dry_run)
                continue
            cmd = [manifest.python, "-m", "pip", "uninstall", "-y", entry["distribution"]]
            click.echo(" ".join(cmd) if dry_run else f"$ {' '.join(cmd)}", err=not dry_run)
            if not dry_run:
                import subprocess

                from thub.envs.installer import refresh_manifest

                subprocess.run(cmd, check=True, capture_output=True)
                refresh_manifest(manifest)
                out.print(f"removed {dist} from managed environment {manifest.name!r}")
        return
    if where == "managed":
        raise UsageError(f"no managed environment holds {backend!r} (see `thub envs`)")
    here = _current_backends()
    dist = here.get(backend)
    if dist is None:
        try:
            dist = resolve_source(backend).distribution
        except ValueError:
            dist = None
    if not dist or not installed_version(dist):
        raise UsageError(f"backend {backend!r} is not installed here or in a managed environment")
    cmd = [sys.executable, "-m", "pip", "uninstall", "-y", dist]
    if dry_run:
        click.echo(" ".join(cmd))
        return
    import subprocess

    subprocess.run(cmd, check=True, capture_output=True)
    out.print(f"removed {dist} from the current environment ({sys.executable}); its library stays installed")


def _remove_env(manifest: Any, dry_run: bool) -> None:
    if dry_run:
        click.echo(f"rm -r {manifest.env_path}")
        return
    shutil.rmtree(manifest.env_path)
    console().print(f"removed managed environment {manifest.name!r} ({manifest.env_path})")


def env_summary(manifest: Any) -> dict[str, Any]:
    """One managed environment for ``thub envs`` (from its manifest only)."""
    from pathlib import Path

    return {
        "name": manifest.name,
        "path": str(manifest.env_path),
        "python": manifest.python,
        "python_exists": Path(manifest.python).exists(),
        "backends": [b["name"] for b in manifest.backends],
        "plugins": {p["distribution"]: p["version"] for p in manifest.data.get("plugins", [])},
        "libraries": {b["library"]["name"]: b["library"]["version"] for b in manifest.backends
                      if b.get("library", {}).get("name")},
        "torch": manifest.data.get("torch"),
        "installer": manifest.data.get("installer"),
        "lock": str(manifest.lock_path) if manifest.lock_path else None,
        "pip_check": manifest.data.get("pip_check"),
    }


def _manifest_or_fail(name: str) -> Any:
    from thub.envs.manifest import find_manifest

    try:
        manifest = find_manifest(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if manifest is None:
        from thub.envs.manifest import list_manifests
        from thub.errors import did_you_mean

        names = [m.name for m in list_manifests()]
        raise UsageError(f"no managed environment {name!r}{did_you_mean(name, names)}; have: "
                         f"{', '.join(names) or 'none'}")
    return manifest


@click.group(invoke_without_command=True)
@click.pass_context
def envs(ctx: click.Context) -> None:
    """\b
    Examples:
      thub envs                 list them (also: thub envs list --json)
      thub envs show trl
      thub envs lock trl -o trl.lock
      thub envs remove trl --dry-run
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(envs_list, as_json=False)


@envs.command("list")
@json_option
def envs_list(as_json: bool) -> None:
    """List managed environments and the backends each holds."""
    from thub.envs.manifest import list_manifests
    from thub.envs.paths import envs_dir

    data = [env_summary(m) for m in list_manifests()]
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "root": str(envs_dir()), "environments": data})
        return
    rows = [[e["name"], ", ".join(e["backends"]), ", ".join(f"{k} {v}" for k, v in e["libraries"].items()) or "-",
             e["path"] if e["python_exists"] else f"{e['path']} (interpreter missing)"] for e in data]
    table(f"Managed environments ({envs_dir()})", ["env", "backends", "libraries", "path"], rows)
    if not data:
        console().print("None yet: `thub install BACKEND --into managed` creates one.")


@envs.command("show")
@click.argument("name")
@json_option
def envs_show(name: str, as_json: bool) -> None:
    """Show one managed environment's manifest."""
    manifest = _manifest_or_fail(name)
    if as_json:
        emit_json(manifest.data)
        return
    summary = env_summary(manifest)
    for key, value in summary.items():
        click.echo(f"{key}: {value}")
    from packaging.requirements import Requirement

    for backend in manifest.backends:
        installed = backend.get("installed") or {}
        reqs = [f"{r} (installed {installed.get(Requirement(r).name) or '?'})" for r in backend.get("requirements", [])]
        click.echo(f"backend {backend['name']}: {', '.join(sorted(backend['algorithms']))}; requires "
                   f"{', '.join(reqs) or '-'}")


@envs.command("remove")
@click.argument("name")
@dry_run_option
def envs_remove(name: str, dry_run: bool) -> None:
    """Delete a managed environment (its folder, manifest and lock)."""
    _remove_env(_manifest_or_fail(name), dry_run)


@envs.command("lock")
@click.argument("name")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the lock here instead of stdout.")
def envs_lock(name: str, output: str | None) -> None:
    """Export a managed environment's lock (pip freeze at install time)."""
    manifest = _manifest_or_fail(name)
    if manifest.lock_path is None or not manifest.lock_path.exists():
        raise ThubError(f"environment {name!r} has no lock; reinstall it with `thub install ... --env {name} --force`")
    text = manifest.lock_path.read_text()
    if output:
        from pathlib import Path

        Path(output).write_text(text)
        console().print(f"wrote {output}")
    else:
        click.echo(text, nl=False)


