"""The ``thub`` command group. Subcommands are imported only when invoked (lazy group).

Exit codes: 0 ok, 1 failure, 2 usage or input error, 130 interrupted.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from thub import __version__
from thub.errors import ThubError

# command name -> "module:attribute"; one module per command, imported on use.
COMMANDS: dict[str, str] = {
    "train": "thub.cli.train:train",
    "plugins": "thub.cli.listing:plugins",
    "algorithms": "thub.cli.listing:algorithms",
    "backends": "thub.cli.listing:backends",
    "config": "thub.cli.config_cmd:config",
    "doctor": "thub.cli.doctor:doctor",
    "env": "thub.cli.doctor:env",
    "data": "thub.cli.data:data",
    "runs": "thub.cli.runs:runs",
    "estimate": "thub.cli.estimate:estimate",
    "plot": "thub.cli.plot:plot",
    "history": "thub.cli.history:history",
    "install": "thub.cli.install:install",
    "uninstall": "thub.cli.install:uninstall",
    "envs": "thub.cli.install:envs",
    "clusters": "thub.cli.clusters:clusters",
}


class Failure(click.ClickException):
    """A :class:`ThubError` shown as ``Error: ...`` with its exit code (no traceback)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class LazyGroup(click.Group):
    """Lists built-in commands without importing them; adds plugin commands on demand."""

    def _plugin_commands(self) -> dict[str, click.Command]:
        if not hasattr(self, "_from_plugins"):
            from thub.manager import get_registry

            holder = click.Group()
            get_registry().pm.hook.thub_register_commands(cli=holder)
            self._from_plugins = dict(holder.commands)
        return self._from_plugins

    def list_commands(self, ctx: click.Context) -> list[str]:
        available = [name for name in COMMANDS if _module_exists(COMMANDS[name])]
        return sorted(set(available) | set(self._plugin_commands()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS and _module_exists(COMMANDS[name]):
            module_name, _, attribute = COMMANDS[name].partition(":")
            return getattr(importlib.import_module(module_name), attribute)
        return self._plugin_commands().get(name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ThubError as exc:
            raise Failure(str(exc), exc.exit_code) from None


def _module_exists(target: str) -> bool:
    from importlib.util import find_spec

    return find_spec(target.partition(":")[0]) is not None


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from thub.manager import get_registry

    click.echo(f"thub {__version__} (Python {sys.version.split()[0]})")
    for info in get_registry().plugins.values():
        if not info.builtin:
            click.echo(f"  plugin {info.name}: {info.distribution} {info.version}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show thub's version and its plugins, then exit.")
def cli() -> None:
    """thub: LLM post-training (SFT, OSFT, LoRA, GRPO) on the backend of your choice.

    \b
    Examples:
      thub backends                      which backend runs which algorithm
      thub train sft --backend trl --config sft.yaml --dry-run
      thub train sft --model-path m --data-path d.jsonl --ckpt-output-dir out
      thub doctor                        find what is broken in this environment

    Docs: docs/cli.md
    """


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="thub", standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
