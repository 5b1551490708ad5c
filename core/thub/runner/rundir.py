"""The run directory (``ckpt_output_dir``): one layout for every backend.

    thub_run.json            resolved config with sources, versions, command line
    training_metrics.jsonl   the unified metrics stream
    events.jsonl             checkpoints reported by the child
    result.json              status, final checkpoint, summary metrics (written atomically)
    logs/train.log           the child's full stdout and stderr
    checkpoints/             the backend's checkpoints
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thub.errors import UsageError

FINISHED = ("succeeded",)


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to a temp file in the same directory, then rename over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


@dataclass(frozen=True)
class RunDirectory:
    path: Path

    @property
    def record(self) -> Path:
        return self.path / "thub_run.json"

    @property
    def metrics(self) -> Path:
        return self.path / "training_metrics.jsonl"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def result(self) -> Path:
        return self.path / "result.json"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def log_file(self) -> Path:
        return self.logs / "train.log"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def latest_checkpoint(self) -> tuple[Path, int] | None:
        """The newest ``checkpoints/checkpoint-N`` (HF Trainer layout), with N."""
        found = []
        if self.checkpoints.is_dir():
            for child in self.checkpoints.iterdir():
                match = _CHECKPOINT.search(child.name)
                if match and child.is_dir():
                    found.append((int(match.group(1)), child))
        if not found:
            return None
        step, path = max(found)
        return path, step

    def prepare(self, *, overwrite: bool, resume: bool) -> None:
        """Create the directory, refusing to clobber a finished run unless ``overwrite``."""
        previous = read_json(self.result)
        if resume:
            if not self.record.exists():
                raise UsageError(f"{self.path}: nothing to resume (no thub_run.json); run without --resume")
            if previous and previous.get("status") in FINISHED:
                raise UsageError(f"{self.path}: the run already finished ({previous['status']}); nothing to resume")
            self.result.unlink(missing_ok=True)
            return
        if self.path.exists() and any(self.path.iterdir()):
            if previous and previous.get("status") in FINISHED and not overwrite:
                raise UsageError(
                    f"{self.path} holds a finished run (status {previous['status']}); "
                    "pass --overwrite to replace it or choose another ckpt_output_dir"
                )
            if self.record.exists() and not overwrite:
                raise UsageError(
                    f"{self.path} holds an unfinished run; continue it with --resume or replace it with --overwrite"
                )
            if overwrite:
                for name in ("thub_run.json", "training_metrics.jsonl", "events.jsonl", "result.json"):
                    (self.path / name).unlink(missing_ok=True)
                for folder in (self.logs, self.checkpoints):
                    shutil.rmtree(folder, ignore_errors=True)
        self.path.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
