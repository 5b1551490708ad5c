"""``thub config schema|init``: editor schema and a commented template, from the models."""

from __future__ import annotations

import click
import yaml

from thub.config.fields import ParamInfo, param_infos
from thub.manager import get_registry
from thub.ui.output import emit_json


@click.group()
def config() -> None:
    pass


@config.command()
@click.argument("algorithm")
def schema(algorithm: str) -> None:
    """Print the JSON Schema of ALGORITHM's parameters (for editors' YAML support)."""
    from thub.cli.param_options import honoured_somewhere

    registry = get_registry()
    model = registry.algorithm(algorithm).load_parameters()
    data = model.model_json_schema()
    honoured = honoured_somewhere(registry, algorithm)
    for name, prop in data["properties"].items():
        if name not in honoured:  # setting it is an error with every installed backend
            prop["description"] = (prop.get("description", "") + " Honoured by: none installed.").strip()
    data["properties"]["backend"] = {"type": "string", "description": "Backend to run on."}
    data["properties"]["algorithm"] = {"const": algorithm}
    emit_json(data)


def render_template(algorithm: str) -> str:
    """A YAML template: every parameter, commented, grouped, with default and help."""
    spec = get_registry().algorithm(algorithm)
    infos = param_infos(spec.load_parameters())
    lines = [f"# thub config for `thub train {algorithm} --config FILE` ({spec.summary})",
             f"algorithm: {algorithm}", "# backend: trl", ""]
    # Each group once, in the order groups first appear (the algorithm's own fields come after
    # the shared ones, and some of them belong to a group already shown).
    groups: dict[str, list[ParamInfo]] = {}
    for info in infos.values():
        groups.setdefault(info.group, []).append(info)
    for group, members in groups.items():
        lines.append(f"# --- {group} ---")
        lines.extend(_template_lines(members))
    return "\n".join(lines) + "\n"


def _template_lines(infos: list[ParamInfo]) -> list[str]:
    """The commented lines of one group's parameters: help and type, then the default."""
    lines: list[str] = []
    for info in infos:
        lines.append(f"# {info.help} ({info.type_label()}{', ' + info.bounds if info.bounds else ''})")
        if info.required:
            lines.append(f"{info.name}:   # required")
        else:
            dumped = yaml.safe_dump({info.name: info.default}, default_flow_style=True).strip().strip("{}")
            lines.append(f"# {dumped}")
    return lines


@config.command()
@click.argument("algorithm")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(algorithm: str, output: str | None, force: bool) -> None:
    """Print (or write) a commented YAML template with every ALGORITHM parameter."""
    text = render_template(algorithm)
    if output is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    path = Path(output)
    if path.exists() and not force:
        raise click.UsageError(f"{path} exists; pass --force to overwrite")
    path.write_text(text)
    click.echo(f"wrote {path}", err=True)
