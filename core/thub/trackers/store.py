"""A local MLflow store (``sqlite:///PATH``) is created and migrated once, before the launch.

MLflow creates a new SQLite store's tables (alembic migrations) in whichever process opens it
first; five runs started together on a new store all race through those migrations and fail,
leaving a store no later run can open. So the parent creates the store, with its experiment,
under a file lock beside the database (``PATH.lock``) before the child starts: concurrent
launches wait for each other there, and the first one's store is the others' store.

Run as ``python -m thub.trackers.store URI EXPERIMENT`` in a backend's own interpreter when
MLflow is installed only there (a managed environment).
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thub.specs import BackendSpec


def local_database(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` tracking URI (None for any other store)."""
    if not uri.startswith("sqlite:///") or uri == "sqlite:///:memory:":
        return None
    return Path(uri[len("sqlite:///"):]).expanduser().resolve()


def initialise(uri: str, experiment: str) -> None:
    """Create (and migrate) the store at ``uri`` and its ``experiment``, once, under the lock."""
    database = local_database(uri)
    if database is None:
        return
    from thub.trackers.sink import ensure_experiment

    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the store and experiment exist; dropped on close
        ensure_experiment(uri, experiment)


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
        python = backend.python or sys.executable
        done = subprocess.run([python, "-m", "thub.trackers.store", str(uri), experiment], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)])[-1]
            raise UsageError(f"MLflow store {uri}: cannot create it: {last}") from None
        return
    try:
        initialise(str(uri), experiment)
    except Exception as exc:  # noqa: BLE001 - any MLflow/SQLAlchemy failure is the store's problem
        raise UsageError(f"MLflow store {uri}: cannot create it: {type(exc).__name__}: {exc}") from None


if __name__ == "__main__":
    initialise(sys.argv[1], sys.argv[2])
