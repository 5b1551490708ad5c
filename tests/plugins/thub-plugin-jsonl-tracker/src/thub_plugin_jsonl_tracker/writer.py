"""The ``jsonl`` tracker's parameter, writer, plan line and check (imported only when a run uses it)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from thub.params import param
from thub.specs import TrackerProblem


class JsonlParams(BaseModel):
    """The tracker's own parameter, added to every algorithm's parameters."""

    jsonl_tracker_path: str | None = param(path=True, group="logging",
                                           help="Append every metrics line to this JSON-lines file.")


class JsonlWriter:
    """One JSON object a line: the metadata first, then ``{"step", "metrics", "wall_time"}``, then the status."""

    def __init__(self, path: str, metadata: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = self.path.open("a", encoding="utf-8")
        self._write({"metadata": dict(metadata)})

    def _write(self, entry: Mapping[str, Any]) -> None:
        self.handle.write(json.dumps(entry, default=str) + "\n")
        self.handle.flush()

    def log(self, step: int, metrics: Mapping[str, float], wall_time: float | None = None) -> None:
        self._write({"step": step, "metrics": dict(metrics), "wall_time": wall_time or time.time()})

    def close(self, status: str) -> None:
        self._write({"status": status})
        self.handle.close()

    def info(self) -> dict[str, Any]:
        return {"path": str(self.path)}


def open_writer(params: Mapping[str, Any], metadata: Mapping[str, Any],
                previous: Mapping[str, Any] | None = None) -> JsonlWriter:
    """The writer of a run (a resumed run appends to the same file)."""
    return JsonlWriter(str(params["jsonl_tracker_path"]), metadata)


def where(params: Mapping[str, Any]) -> str:
    """Where the dry run says the metrics go."""
    return str(params["jsonl_tracker_path"])


def problems(params: Mapping[str, Any], python: str | None, environ: Mapping[str, str]) -> list[TrackerProblem]:
    """A file that cannot be appended to: refused before the run."""
    path = Path(str(params["jsonl_tracker_path"]))
    folder = path.parent if path.parent.exists() else None
    if path.is_dir():
        return [TrackerProblem("jsonl", f"jsonl_tracker_path: {path} is a directory", "name a file")]
    if folder is not None and not os.access(folder, os.W_OK):
        return [TrackerProblem("jsonl", f"jsonl_tracker_path: {folder} is not writable", "choose a writable file")]
    return []
