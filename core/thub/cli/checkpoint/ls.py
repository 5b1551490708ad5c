"""``thub checkpoint ls RUN_DIR|DIR``: every checkpoint under a run or folder, whatever wrote it."""

from __future__ import annotations

from pathlib import Path

import click

from thub.cli.checkpoint import dry_run_option, json_option
from thub.errors import UsageError

SUMMARY = "List every checkpoint under a run or folder: layout, step, complete or not (why), size, dtype, loadable."


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


@click.command("ls", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", type=click.Path())
@json_option
@dry_run_option
def ls(directory: str, as_json: bool, dry_run: bool) -> None:
    """DIRECTORY is a run directory, a folder of checkpoints or one checkpoint. Reads file names
    and headers only (no tensor is loaded); writes nothing, so --dry-run changes nothing."""
    from thub.checkpoint.layouts import find
    from thub.ui.output import emit_json, stdout_console, table

    path = Path(directory)
    if not path.is_dir():
        raise UsageError(f"{directory}: {'no such folder' if not path.exists() else 'not a folder'}")
    found = find(path)
    if as_json:
        emit_json({"schema_version": 1, "directory": str(path), "checkpoints": [c.to_dict() for c in found]})
        return
    if not found:
        stdout_console().print(f"no checkpoint of a known layout under {directory} (docs/checkpoints.md lists them)")
        return
    rows = [[c.path, c.layout, "-" if c.step is None else str(c.step),
             "yes" if c.complete else f"no: {c.problem}", _size(c.size_bytes), c.dtype or "-",
             "yes" if c.loadable else "no"] for c in found]
    table(None, ["checkpoint", "layout", "step", "complete", "size", "dtype", "loadable"], rows)
