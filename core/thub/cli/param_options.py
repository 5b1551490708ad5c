"""Click options generated from an algorithm's parameter model (never written by hand), shared by
``thub train ALGO`` and ``thub estimate ALGO``: one option per field, the values the user gave,
which parameters any installed backend honours (``thub config schema`` marks the others), and the
group of one subcommand per registered algorithm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from thub.config.fields import ParamInfo, format_value, parse_text


def option_for(info: ParamInfo, honoured: bool = True) -> click.Option:
    """A click option for one parameter; its default is None so 'not given' is visible.
    ``honoured=False``: no installed backend honours it for this algorithm (setting it is an error)."""
    # An unset default (None) leaves the value to the backend (its defaults, then its library's).
    default = ("required" if info.required else
               "default: the backend's" if info.default is None else f"default: {format_value(info.default)}")
    bounds = f"; {info.bounds}" if info.bounds else ""
    help_text = (f"{info.help} [{info.group}; {default}{bounds}"
                 + ("" if honoured else "; honoured by: none installed") + "]")
    if info.is_flag:
        name = info.option.removeprefix("--")
        return click.Option([f"--{name}/--no-{name}", info.name], default=None, help=help_text)
    if info.is_list:
        return click.Option([info.option, info.name], multiple=True, metavar="A[,B]" if info.split else "VALUE",
                            help=help_text + (" Repeatable or comma-separated." if info.split else " Repeatable."))
    kinds = set(info.base_types)
    if info.choices:
        click_type: click.ParamType = click.Choice(info.choices)
    elif kinds == {int}:
        click_type = click.INT
    elif kinds == {float}:
        click_type = click.FLOAT
    else:
        click_type = click.STRING
    return click.Option([info.option, info.name], type=click_type, default=None,
                        metavar=info.type_label().upper(), help=help_text)


def honoured_somewhere(registry: Any, algorithm: str) -> frozenset[str]:
    """Parameters of ``algorithm`` that thub's core or at least one installed backend honours."""
    from thub.config.fields import core_applied
    from thub.trackers import parent_logged_params

    names = set(core_applied(registry.algorithm(algorithm).load_parameters()))
    for backend in registry.backends_for(algorithm):
        names |= set(backend.honours(algorithm)) | set(parent_logged_params(backend, algorithm))
    return frozenset(names)


def flag_values(infos: dict[str, ParamInfo], given: dict[str, Any]) -> dict[str, Any]:
    """The parameter values of the options the user gave (``given``: click's keyword arguments,
    None or () when not given), split and parsed as the parameter's type says."""
    values: dict[str, Any] = {}
    for name, value in given.items():
        info = infos[name]
        if value is None or value == ():
            continue
        if info.is_list and not info.split:
            values[name] = list(value)
        elif info.is_list:
            values[name] = [part.strip() for item in value for part in item.split(",") if part.strip()]
        elif isinstance(value, str) and not info.choices and str not in info.base_types:
            values[name] = parse_text(info, value)  # e.g. dicts, int|"auto"
        else:
            values[name] = value
    return values


class AlgorithmGroup(click.Group):
    """One subcommand per registered algorithm (``thub train``, ``thub estimate``), each built by
    ``make_command(algorithm)`` when asked for. An unknown algorithm is a usage error with a
    did-you-mean (``sfft``, ``lora-sft``) rather than click's bare "No such command" (exit 2)."""

    def __init__(self, *args: Any, make_command: Callable[[str], click.Command], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.make_command = make_command

    def list_commands(self, ctx: click.Context) -> list[str]:
        from thub.manager import get_registry

        return sorted(get_registry().algorithms)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        from thub.manager import get_registry

        if args and not args[0].startswith("-") and not ctx.resilient_parsing \
                and args[0] not in get_registry().algorithms:  # (not while completing a shell word)
            get_registry().algorithm(args[0])  # raises UsageError with the suggestion
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        from thub.manager import get_registry

        if name not in get_registry().algorithms:
            return None
        return self.make_command(name)
