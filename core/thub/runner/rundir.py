"""The run directory (``ckpt_output_dir``): one layout for every backend.

    thub_run.json            resolved config with sources, versions, command line, the run id
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
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

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

#: what a run id is: one path component of a remote store, never ``..`` (it names ``checkpoint_storage``'s prefix)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: the run id's shape that :func:`new_run_id` makes (told apart from other names in a bucket's top level)
NEW_RUN_ID = re.compile(r".+-\d{8}T\d{6}Z-[0-9a-f]{8}")


def new_run_id(path: str | Path) -> str:
    """A new run's id, ``<run directory name>-<UTC time>-<8 hex digits>`` (``out-20260101T120000Z-1a2b3c4d``).

    Made once, when a run starts afresh (a new directory, ``--overwrite``); ``--resume`` keeps it
    (``thub_run.json`` ``run_id``). It names the run's own prefix in ``checkpoint_storage``
    (:mod:`thub.runner.mirror`): the folder's name says in a bucket's listing which run a prefix is,
    the time tells a run from the one it replaced (and sorts them), and 32 random bits tell apart
    two runs of the same folder name started in the same second (two machines, one team bucket)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(os.path.abspath(path)).name).strip("-._")[:48] or "run"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{name}-{stamp}-{secrets.token_hex(4)}"

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

    def run_id(self) -> str | None:
        """The run id ``thub_run.json`` records (:func:`new_run_id`); None for a run an older thub
        started (none recorded). A record that does not read, or an id thub would not have made (a
        path, ``..``, not a string), is a UsageError: the id names where the run's remote copies are."""
        try:
            record = json.loads(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{self.record}: cannot be read ({exc}); it holds the run's id (run_id), which "
                             "names where its checkpoint_storage copies are: restore it, or start a new run "
                             f"with {option('overwrite')}") from None
        if not isinstance(record, dict):
            self._bad_run_id("not a JSON object")
        if "run_id" not in record:
            return None
        value = record["run_id"]
        if not isinstance(value, str) or not RUN_ID.fullmatch(value):
            self._bad_run_id(f"run_id {value!r:.80} is not a run id thub makes (expected letters, digits, '.', "
                             "'_' and '-', at most 128, starting with a letter or digit)")
        return value

    def _bad_run_id(self, what: str) -> NoReturn:
        raise UsageError(f"{self.record}: {what}; the run id names where the run's checkpoint_storage copies are: "
                         f"restore it, or start a new run with {option('overwrite')}")

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
