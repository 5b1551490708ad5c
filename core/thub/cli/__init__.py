"""The thub command-line interface (click). One module per command, imported only when it runs:
every command is registered through ``thub_register_commands`` (the built-ins by
``thub_builtins.commands``, with their one-line help) and listed from a cache
(:mod:`thub.cli.plugin_commands`). What commands print goes through :mod:`thub.ui`."""

from thub.cli.main import cli, main

__all__ = ["cli", "main"]
