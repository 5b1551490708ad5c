"""The thub command-line interface (click). One module per command, imported lazily."""

from thub.cli.main import cli, main

__all__ = ["cli", "main"]
