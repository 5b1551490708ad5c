"""``thub checkpoint ls|merge|verify|consolidate``: turn any backend's output into one verified HF model.

One module per subcommand in this package, each defining a click command named like the module
(``ls.py`` -> ``ls``) and its one-line ``SUMMARY``; the group finds them with :mod:`pkgutil`,
so adding a subcommand is adding its module (nothing to register here). A subcommand is
imported only when it runs: ``thub checkpoint --help`` imports each module for its summary,
and the modules import torch/transformers/peft only inside their functions.

Every subcommand has ``--json`` (nothing but JSON on stdout) and ``--dry-run`` (says what would
be done, writes nothing). Exit codes: 0 ok, 1 a check failed, 2 bad input (not a checkpoint, a
missing base model), no traceback.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import click

from thub.errors import ThubError


def _modules() -> list[str]:
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


class CheckpointGroup(click.Group):
    """Finds its subcommands as the modules of this package; shows a thub error as ``Error: ...``
    with its exit code (also when the group is invoked on its own, as in tests)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return _modules()

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _modules():
            return None
        module = importlib.import_module(f"{__name__}.{name}")
        command = getattr(module, name.replace("-", "_"), None)
        if not isinstance(command, click.Command):
            return None
        summary = getattr(module, "SUMMARY", "")
        if summary and command.short_help != summary:
            command.short_help = summary
            # click dedents a docstring only when it builds the command; help composed here is
            # dedented here, or the second paragraph keeps the docstring's indentation mid-line
            command.help = summary + (f"\n\n{inspect.cleandoc(command.help)}" if command.help else "")
        return command

    def invoke(self, ctx: click.Context) -> object:
        from thub.cli.main import Failure

        try:
            return super().invoke(ctx)
        except ThubError as exc:
            raise Failure(str(exc), exc.exit_code) from None


@click.group(cls=CheckpointGroup, context_settings={"help_option_names": ["-h", "--help"]})
def checkpoint() -> None:
    """Every subcommand takes --json (JSON only on stdout) and --dry-run (writes nothing).
    Exit 0 ok, 1 a check failed, 2 bad input."""


def emit(data: dict[str, Any], text: str, *, as_json: bool, dry_run: bool) -> None:
    """What a subcommand did (or, with --dry-run, would do): ``data`` as JSON with ``--json``, else ``text``."""
    from thub.ui.output import emit_json, stdout_console

    if as_json:
        emit_json({"schema_version": 1, "dry_run": dry_run, **data})
    else:
        stdout_console().print(text)


def json_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--json``: print the outcome as JSON on stdout (the same for every subcommand)."""
    return click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON on stdout.")(function)


def dry_run_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--dry-run``: say what would be done, write nothing (the same for every subcommand)."""
    return click.option("--dry-run", is_flag=True, help="Say what would be done; write nothing.")(function)
