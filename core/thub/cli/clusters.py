"""``thub clusters``: list and validate cluster profiles (see docs/slurm.md)."""

from __future__ import annotations

import sys
from typing import Any

import click

from thub.ui.output import console, emit_json, table


@click.command()
@click.option("--cluster-file", type=click.Path(dir_okay=False), help="Extra YAML file of cluster profiles.")
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
@click.option("--show", metavar="NAME", help="Print one profile in full.")
def clusters(cluster_file: str | None, as_json: bool, show: str | None) -> None:
    from thub.launch.profiles import load_profiles, search_paths

    loaded = load_profiles(cluster_file, strict=False)
    if show:
        from thub.launch.profiles import get_profile

        profile = get_profile(show, cluster_file)
        data = {**profile.model_dump(), "origin": loaded.origins.get(show)}
        if as_json:
            emit_json(data)
        else:
            import yaml

            click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
        return
    rows: list[dict[str, Any]] = []
    for name, profile in sorted(loaded.profiles.items()):
        rows.append({"name": name, "scheduler": profile.scheduler, "partition": profile.partition,
                     "gpus_per_node": profile.gpus_per_node, "max_time": profile.max_time,
                     "offline": profile.offline, "origin": loaded.origins[name],
                     "description": profile.description})
    if as_json:
        emit_json({"clusters": rows, "errors": loaded.errors,
                   "searched": [str(p) for p in search_paths(cluster_file)]})
    else:
        table("Cluster profiles", ["name", "scheduler", "partition", "GPUs/node", "max time", "offline", "from"],
              [[r["name"], r["scheduler"], r["partition"] or "-", str(r["gpus_per_node"]), r["max_time"] or "-",
                "yes" if r["offline"] else "no", r["origin"]] for r in rows])
        for error in loaded.errors:
            console().print(f"[red]invalid:[/red] {error}", highlight=False)
    if loaded.errors:
        sys.exit(2)
