"""The run directory (``ckpt_output_dir``): one layout for every backend.

    thub_run.json            resolved config with sources, versions, command line
    training_metrics.jsonl   the unified metrics stream
    events.jsonl             checkpoints reported by the child
    result.json              status, final checkpoint, summary metrics (written atomically)
    logs/train.log           the child's full stdout and stderr (one section per attempt)
    checkpoints/             the backend's checkpoints
    final/, merged/          the final model (and merged export) where the backend saves one
    thub_data/               the rows the parent validated, read back by the child (context.rows())
    .thub.lock               held (flock) by the live run's processes: one live run per directory
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thub.errors import UsageError
from thub.fileio import write_text_atomic
from thub.surface import option, without

FINISHED = ("succeeded",)


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON with :func:`thub.fileio.write_text_atomic` (owner-only, as
    the run's record and result always were)."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n", mode=0o600)


def read_json(path: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")

# What thub's run layout owns in a run directory: --overwrite removes these (and what the run
# itself created there, see RunDirectory.owned_entries), never anything else.
LAYOUT = ("thub_run.json", "training_metrics.jsonl", "events.jsonl", "result.json", "logs", "checkpoints",
          "final", "merged", "slurm", "thub_data")


def _non_empty(path: Path) -> bool:
    try:
        return path.is_file() or (path.is_dir() and any(path.iterdir()))
    except OSError:
        return True  # unreadable: assume it holds something (never replaced without --overwrite)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


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

    def checkpoint_dirs(self) -> list[tuple[int, Path]]:
        """Every ``checkpoints/checkpoint-N`` folder with N, newest first (complete or not)."""
        found = []
        if self.checkpoints.is_dir():
            for child in self.checkpoints.iterdir():
                match = _CHECKPOINT.search(child.name)
                if match and child.is_dir():
                    found.append((int(match.group(1)), child))
        return sorted(found, reverse=True)

    def resume_point(self) -> tuple[tuple[Path, int] | None, list[tuple[Path, str]]]:
        """The newest complete checkpoint (path, step) and the newer incomplete ones skipped
        on the way, each with what is wrong with it."""
        from thub.runner.checkpoints import checkpoint_problem

        skipped: list[tuple[Path, str]] = []
        for step, path in self.checkpoint_dirs():
            problem = checkpoint_problem(path)
            if problem is None:
                return (path, step), skipped
            skipped.append((path, problem))
        return None, skipped

    def latest_checkpoint(self) -> tuple[Path, int] | None:
        """The newest complete ``checkpoints/checkpoint-N`` (HF Trainer layout), with N.

        A half-written or foreign ``checkpoint-N`` is passed over (see :meth:`resume_point`).
        """
        return self.resume_point()[0]

    def reached_step(self) -> int:
        """The highest training step logged in the directory (every attempt's), 0 when none was."""
        from thub.runner.metrics import read_metrics

        steps = [line["step"] for line in read_metrics(self.metrics) if isinstance(line.get("step"), int)]
        return max(steps, default=0)

    def never_trained(self) -> bool:
        """Whether the run held here stopped before its first training step (a bad value found
        late, a signal or a full disk while it started): no step logged, no checkpoint or final
        model saved. Such a directory holds nothing to resume or to lose."""
        previous = read_json(self.result) or {}
        if previous.get("reached_step", 0) or self.reached_step():
            return False
        return not any(_non_empty(self.path / name) for name in ("checkpoints", "final", "merged"))

    def entries(self) -> list[str]:
        """Names in the directory, the lock file left out."""
        from thub.runner.lock import LOCK_NAME

        if not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if p.name != LOCK_NAME)

    def check_not_foreign(self) -> None:
        """Refuse a path that is a file, or a non-empty directory that holds no thub run: thub
        never writes into (or deletes from) what it did not create, whatever the flags."""
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"ckpt_output_dir {self.path} is a file, not a directory")
        if self.record.exists():
            return
        # an empty logs/ is what an attempt stopped before its thub_run.json leaves behind
        foreign = [name for name in self.entries()
                   if not (name in LAYOUT and (self.path / name).is_dir() and not any((self.path / name).iterdir()))]
        if foreign:
            shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
            raise UsageError(
                f"{self.path} is not a thub run directory (no thub_run.json) and is not empty: it holds {shown}; "
                "choose a new or empty ckpt_output_dir (thub never overwrites what it did not create)")

    def owned_entries(self) -> list[str]:
        """What ``--overwrite`` removes: the run layout plus what the previous run created.

        ``result.json`` lists the run's ``outputs`` (what appeared in the directory while it
        ran); for a run that ended without one, everything not recorded as the user's when it
        started (``user_entries`` in ``thub_run.json``). Anything else stays.
        """
        present = set(self.entries())
        owned = set(LAYOUT)
        result, record = read_json(self.result), read_json(self.record)
        if result and isinstance(result.get("outputs"), list):
            owned |= set(result["outputs"])
        elif record and isinstance(record.get("user_entries"), list):
            owned |= present - set(record["user_entries"])
        return sorted(owned & present)

    def prepare(self, *, overwrite: bool, resume: bool) -> list[str]:
        """Create the directory, refusing to clobber a finished run unless ``overwrite``, and an
        unfinished one unless ``overwrite`` or it never reached its first step (:meth:`never_trained`:
        the same command simply runs again, replacing what the run layout holds).

        Call it holding the directory's :class:`~thub.runner.lock.RunLock`. Returns the entries
        that belong to the user (kept, never removed), for ``user_entries`` in thub_run.json.
        """
        self.check_not_foreign()
        previous = read_json(self.result)
        if resume:
            if not self.record.exists():
                raise UsageError(f"{self.path}: nothing to resume (no thub_run.json); {without('resume')}")
            if previous and previous.get("status") in FINISHED:
                raise UsageError(f"{self.path}: the run already finished ({previous['status']}); nothing to resume")
            record = read_json(self.record) or {}
            self.result.unlink(missing_ok=True)
            self.logs.mkdir(exist_ok=True)
            kept = record.get("user_entries")
            return list(kept) if isinstance(kept, list) else [n for n in self.entries() if n not in LAYOUT]
        if self.record.exists():
            if previous and previous.get("status") in FINISHED and not overwrite:
                raise UsageError(
                    f"{self.path} holds a finished run (status {previous['status']}); "
                    f"pass {option('overwrite')} to replace it or choose another ckpt_output_dir"
                )
            if not overwrite and not self.never_trained():
                raise UsageError(
                    f"{self.path} holds an unfinished run; continue it with {option('resume')} "
                    f"or replace it with {option('overwrite')}"
                )
            for name in self.owned_entries():
                _remove(self.path / name)
        self.path.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        return [name for name in self.entries() if name not in LAYOUT]

    def outputs_since(self, user_entries: list[str] | None) -> list[str]:
        """What the run created in the directory: everything but the user's entries."""
        kept = set(user_entries or ())
        return [name for name in self.entries() if name not in kept]
