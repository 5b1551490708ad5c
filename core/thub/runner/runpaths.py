"""Paths a run recorded, found where the run directory is now.

``result.json`` names the run's models and checkpoints (``final_checkpoint``, ``checkpoints``,
``best_checkpoint``, ``final_model``, ``export``) as training saw them: under ``run_dir`` as it was
typed (``runs/demo/final``, relative to where training ran) or absolute. A run directory that was
moved, copied or reached from another folder must still mean itself: :func:`read_result` reads
``result.json`` with every path that was inside the recorded ``run_dir`` re-anchored at the run
directory it was read from. Every command that reads a run's result (``thub eval``, export and push,
``thub history``, the model card, the template check) reads it through here, so a copy never scores,
exports or publishes the original's model (or whatever now sits at its old path).
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any

__all__ = ["in_run", "read_result", "rebase_result", "rebased"]

#: result.json fields that are a path, and the lists / objects whose ``path`` is one
_PATH_FIELDS = ("final_checkpoint", "log")
_ENTRY_FIELDS = ("final_model", "best_checkpoint", "export", "merged")
_LIST_FIELDS = ("checkpoints",)


def _anchors(recorded: str, working_dir: str | None) -> list[PurePath]:
    """The spellings the recorded run directory may have in the paths beside it."""
    anchors = [PurePath(recorded)]
    if not anchors[0].is_absolute() and working_dir:
        anchors.append(PurePath(working_dir) / recorded)
    return anchors


def in_run(run: Path, value: str, recorded_run_dir: str | None, working_dir: str | None = None) -> str:
    """``value`` (a path result.json recorded) where it is now: a path inside the recorded run
    directory re-anchored at ``run``; a relative path outside it taken from where training ran
    (``working_dir``); anything else as it was."""
    path = PurePath(value)
    if recorded_run_dir:
        for anchor in _anchors(recorded_run_dir, working_dir):
            try:
                inside = path.relative_to(anchor)
            except ValueError:
                continue
            return str(run / inside) if inside.parts else str(run)
    if not path.is_absolute() and working_dir:
        return str(Path(working_dir) / path)
    return value


def rebase_result(run: Path, result: dict[str, Any], working_dir: str | None = None) -> dict[str, Any]:
    """A copy of ``result`` (read from ``run/result.json``) with its paths found from ``run``."""
    recorded = result.get("run_dir") if isinstance(result.get("run_dir"), str) else None

    def moved(value: Any) -> Any:
        return in_run(run, value, recorded, working_dir) if isinstance(value, str) and value else value

    out = dict(result)
    for name in _PATH_FIELDS:
        if name in out:
            out[name] = moved(out[name])
    for name in _ENTRY_FIELDS:
        entry = out.get(name)
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            out[name] = {**entry, "path": moved(entry["path"])}
    for name in _LIST_FIELDS:
        entries = out.get(name)
        if isinstance(entries, list):
            out[name] = [{**e, "path": moved(e["path"])} if isinstance(e, dict) and isinstance(e.get("path"), str)
                         else e for e in entries]
    out["run_dir"] = str(run)
    return out


def rebased(run: str | Path, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (of the run at ``run``) with its paths found from ``run``, reading where training
    ran from the run's ``thub_run.json``."""
    from thub.runner.rundir import read_json

    record = read_json(Path(run) / "thub_run.json")
    working_dir = record.get("working_dir") if isinstance(record, dict) else None
    return rebase_result(Path(run), result, working_dir if isinstance(working_dir, str) else None)


def read_result(run: str | Path) -> dict[str, Any] | None:
    """``run/result.json`` with its paths found from ``run`` (:func:`rebase_result`); None when it is
    missing, unreadable or not an object."""
    from thub.runner.rundir import read_json

    result = read_json(Path(run) / "result.json")
    return rebased(run, result) if isinstance(result, dict) else None
