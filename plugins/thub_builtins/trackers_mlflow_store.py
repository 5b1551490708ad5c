"""A local MLflow store (``sqlite:///PATH``) is created and migrated once, before the launch (the built-in
MLflow tracker; moved here from ``thub.trackers.store``).

MLflow creates a new SQLite store's tables (alembic migrations) in whichever process opens it
first; five runs started together on a new store all race through those migrations and fail,
leaving a store no later run can open. So the parent creates the store, with its experiment,
under a file lock beside the database (``PATH.lock``) before the child starts: concurrent
launches wait for each other there, and the first one's store is the others' store.

The lock covers only what races: creating the database, migrating it and creating the
experiment. A store that is already at MLflow's schema and holds the experiment (read with
``sqlite3``, read-only) needs nothing, and its runs never touch the lock: importing MLflow,
opening the store and starting the run happen outside it, so runs on one store start together
instead of one at a time. A run that has to wait says so once on stderr, naming the holder.

Run as ``python -m thub_builtins.trackers_mlflow_store URI EXPERIMENT`` in a backend's own interpreter when
MLflow is installed only there (a managed environment).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thub.specs import BackendSpec

#: the first words of the line a waiting run prints (prepare_store relays it from a backend's interpreter)
WAITING = "thub: waiting for the MLflow store lock"


def local_database(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` tracking URI (None for any other store)."""
    if not uri.startswith("sqlite:///") or uri == "sqlite:///:memory:":
        return None
    return Path(uri[len("sqlite:///"):]).expanduser().resolve()


def lock_path(database: Path) -> Path:
    """The lock file beside ``database`` (``mlflow.db`` -> ``mlflow.db.lock``)."""
    return database.with_name(database.name + ".lock")


def _holder(handle: IO[str]) -> str:
    """Who holds the lock, as the holder wrote it (``PID COMMAND``): ``pid N (COMMAND)``."""
    try:
        handle.seek(0)
        text = handle.read(400).strip()
    except OSError:
        text = ""
    pid, _, command = text.partition(" ")
    if not pid.isdigit():
        return "another process"
    return f"pid {pid} ({command.strip()})" if command.strip() else f"pid {pid}"


@contextmanager
def store_lock(database: Path) -> Iterator[None]:
    """Hold ``database``'s lock file exclusively: write this process's pid and command into it (for
    the message of whoever waits), and say once on stderr when another process holds it."""
    with open(lock_path(database), "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{WAITING} {lock_path(database)} held by {_holder(handle)}: it is held only while the store is "
                  "created or migrated", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()} {shlex.join(sys.argv)[:300]}\n")
            handle.flush()
        except OSError:
            pass  # the lock holds without the note
        yield  # dropped when the file closes


def _schema_head() -> str | None:
    """The alembic revision MLflow's store must be at (None when this MLflow does not say)."""
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision

        return str(_get_latest_schema_revision())
    except Exception:  # noqa: BLE001 - a private helper: without it the store is checked under the lock
        return None


def ready(database: Path, experiment: str) -> bool:
    """Whether the store needs nothing: MLflow's schema is at ``head`` and ``experiment`` exists.

    Read with sqlite3, read-only (a missing file stays missing), outside the lock: a store whose
    creation is under way is not at head or has no such experiment yet (the experiment is created
    last), so it reads as not ready and the caller waits for the lock."""
    head = _schema_head()
    if head is None or not database.is_file():
        return False
    try:
        connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return False
    try:
        version = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        found = connection.execute("SELECT 1 FROM experiments WHERE name = ?", (experiment,)).fetchone()
        default = connection.execute("SELECT 1 FROM experiments WHERE experiment_id = 0").fetchone()
    except sqlite3.Error:  # no tables yet, or a locked file: the lock decides
        return False
    finally:
        connection.close()
    return version == [(head,)] and found is not None and default is not None


def initialise(uri: str, experiment: str) -> None:
    """Create (and migrate) the store at ``uri`` and its ``experiment``, once, under the lock; a
    store that is ready already is left alone, without the lock."""
    database = local_database(uri)
    if database is None:
        return
    from thub_builtins.trackers_mlflow import ensure_experiment  # imports MLflow: outside the lock

    if ready(database, experiment):
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    with store_lock(database):
        if not ready(database, experiment):  # the holder before us may have made it ready
            ensure_experiment(uri, experiment)


def _run_elsewhere(python: str, uri: str, experiment: str) -> None:
    """:func:`initialise` in ``python`` (MLflow installed only there): its waiting line is relayed
    as it comes; a failure is a usage error with its last line."""
    from thub.errors import UsageError

    process = subprocess.Popen([python, "-m", "thub_builtins.trackers_mlflow_store", uri, experiment],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    last = ""
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith(WAITING):
            print(line.rstrip("\n"), file=sys.stderr, flush=True)
        elif line.strip():
            last = line.strip()
    code = process.wait()
    if code != 0:
        raise UsageError(f"MLflow store {uri}: cannot create it: {last or 'exit code ' + str(code)}") from None


def prepare_store(params: Mapping[str, Any], backend: BackendSpec) -> None:
    """Before a launch: the run's local MLflow store made ready (:func:`initialise`), in this
    process when MLflow is installed here, else in the backend's interpreter. A failure is a
    usage error naming the store (exit 2, nothing written)."""
    uri = params.get("mlflow_tracking_uri")
    if not uri or local_database(str(uri)) is None:
        return
    from thub.errors import UsageError

    experiment = str(params.get("mlflow_experiment_name") or "Default")
    try:
        import mlflow  # noqa: F401  (is it here?)
    except ImportError:
        _run_elsewhere(backend.python or sys.executable, str(uri), experiment)
        return
    try:
        initialise(str(uri), experiment)
    except Exception as exc:  # noqa: BLE001 - any MLflow/SQLAlchemy failure is the store's problem
        raise UsageError(f"MLflow store {uri}: cannot create it: {type(exc).__name__}: {exc}") from None


if __name__ == "__main__":
    initialise(sys.argv[1], sys.argv[2])
