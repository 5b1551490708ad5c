"""MLflow, a tracker registered by ``thub_builtins.trackers``: its writer for the ``thub`` route
(a run created with ``MlflowClient``), the run thub creates for a library that logs MLflow itself,
its plan line and checks (a file, SQLite or HTTP store), and the end of a run a library left open
(moved here from ``thub.trackers``). Imported only when a run turns MLflow on (``mlflow_tracking_uri``).
"""

from __future__ import annotations

import base64
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.specs import TrackerProblem as Problem
from thub.trackers import run_name
from thub.trackers.check import find_module as _find
from thub.trackers.check import pip as _pip
from thub.trackers.check import writable_dir as _writable_dir

if TYPE_CHECKING:
    from thub.runner.context import RunContext

HTTP_TIMEOUT = 5.0


def mlflow_params(metadata: Mapping[str, Any], limit: int = 6000) -> dict[str, str]:
    """``thub.<name>`` -> value (and ``thub.algorithm``/``thub.backend``), cut to MLflow's length limit.

    The prefix keeps them apart from what a library logs itself (HF Trainer logs ``learning_rate``
    etc. from TrainingArguments; MLflow refuses a param logged twice with two values).
    """
    params = {"thub.algorithm": str(metadata["algorithm"]), "thub.backend": str(metadata["backend"])}
    for name, entry in metadata["parameters"].items():
        if entry["value"] is not None:
            params[f"thub.{name}"] = str(entry["value"])[:limit]
    return params


class MlflowWriter:
    """A run created with ``MlflowClient`` (no global active run in the parent process)."""

    def __init__(self, params: Mapping[str, Any], metadata: Mapping[str, Any], run_id: str | None = None) -> None:
        from mlflow import MlflowClient

        self.uri = str(params["mlflow_tracking_uri"])
        self.experiment = params.get("mlflow_experiment_name") or "Default"
        experiment_id = ensure_experiment(self.uri, self.experiment)
        self.client = MlflowClient(tracking_uri=self.uri)
        if run_id:  # resume: keep logging to the same run
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return
        run = self.client.create_run(experiment_id, run_name=run_name(params, "mlflow"),
                                     tags={"thub.run_dir": str(params["ckpt_output_dir"])})
        self.run_id = run.info.run_id
        log_metadata_mlflow(self.client, self.run_id, metadata)

    def log(self, step: int, metrics: Mapping[str, float], wall_time: float | None = None) -> None:
        from mlflow.entities import Metric

        stamp = int((wall_time or time.time()) * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, stamp, step) for k, v in metrics.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=mlflow_status(status))

    def info(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.uri, "experiment": self.experiment}


def mlflow_status(status: str) -> str:
    """MLflow's terminal run status for a thub run status (succeeded, interrupted, failed)."""
    return {"succeeded": "FINISHED", "interrupted": "KILLED"}.get(status, "FAILED")


def ensure_experiment(uri: str, name: str) -> str:
    """The id of experiment ``name`` in the store at ``uri``, created if missing.

    Under a ``sqlite:///DB`` store, artifacts go to ``mlartifacts/`` beside the database file, for
    a new store's ``Default`` experiment too: MLflow's default is ``./mlruns`` in whatever directory
    the run happened to start from. Call it before any other MLflow client opens a new store.
    """
    from mlflow import MlflowClient

    location = None
    if uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
        location = (database.parent / "mlartifacts").as_uri()
        if not database.exists():
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            SqlAlchemyStore(uri, location)  # creates the tables and "Default" with that location
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(name)
    if found:
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=location))


def log_metadata_mlflow(client: Any, run_id: str, metadata: Mapping[str, Any]) -> None:
    """thub's parameters as MLflow params (``thub.<name>``), and the whole metadata with sources as
    the artifact ``thub/run_metadata.json``."""
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

    items = [Param(k, v) for k, v in mlflow_params(metadata, MAX_PARAM_VAL_LENGTH).items()]
    for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=items[start:start + MAX_PARAMS_TAGS_PER_BATCH])
    client.log_dict(run_id, dict(metadata), "thub/run_metadata.json")


def open_writer(params: Mapping[str, Any], metadata: Mapping[str, Any],
                previous: Mapping[str, Any] | None = None) -> MlflowWriter:
    """The ``thub``-route writer; ``previous`` (its ``trackers.json`` entry) resumes its run."""
    return MlflowWriter(params, metadata, (previous or {}).get("run_id"))


def where(params: Mapping[str, Any]) -> str:
    from thub.redact import redact

    experiment = params.get("mlflow_experiment_name")
    return (f"{redact(str(params['mlflow_tracking_uri']), 'mlflow_tracking_uri')} ("
            f"{f'experiment {experiment}, ' if experiment else ''}run {run_name(params, 'mlflow')})")


def record(params: Mapping[str, Any]) -> dict[str, Any]:
    return {"tracking_uri": params["mlflow_tracking_uri"], "experiment": params.get("mlflow_experiment_name"),
            "run_name": run_name(params, "mlflow")}


def problems(params: Mapping[str, Any], python: str | None, environ: Mapping[str, str]) -> list[Problem]:
    return _mlflow_problems(str(params["mlflow_tracking_uri"]), python, environ)


def _mlflow_problems(uri: str, python: str | None, environ: Mapping[str, str]) -> list[Problem]:
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        path = Path(urllib.request.url2pathname(parsed.path) if scheme else uri).expanduser()
        why = _writable_dir(path)
        if why:
            return [Problem("mlflow", f"MLflow store {uri}: {why}", "choose a writable mlflow_tracking_uri")]
        origin = _find("mlflow", python)
        gated = False
        if origin and origin != "namespace":
            variables = Path(origin).parent / "environment_variables.py"
            gated = variables.is_file() and "MLFLOW_ALLOW_FILE_STORE" in variables.read_text(errors="replace")
        allowed = environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true", "yes")
        if gated and not allowed:
            return [Problem(
                "mlflow", f"MLflow store {uri}: this MLflow refuses a file store unless MLFLOW_ALLOW_FILE_STORE=true",
                f"use a SQLite store: mlflow_tracking_uri: sqlite:///{(path.parent / 'mlflow.db').resolve()}\n"
                "# or keep the file store: export MLFLOW_ALLOW_FILE_STORE=true")]
        return []
    if scheme == "sqlite":
        location = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        problems = []
        if location and location != ":memory:":
            why = _writable_dir(Path(location).expanduser().parent)
            if why:
                problems.append(Problem("mlflow", f"MLflow store {uri}: {why}", "choose a writable sqlite:/// path"))
        missing = [m for m in ("sqlalchemy", "alembic") if _find(m, python) is None]
        if missing:
            problems.append(Problem("mlflow", f"MLflow store {uri} needs {' and '.join(missing)} (SQL stores)",
                                    _pip(python, "pip install " + " ".join(missing))))
        return problems
    if scheme in ("http", "https"):
        return _http_problems(uri, parsed, environ)
    return []  # databricks, uc, ...: reached with the platform's own credentials


def _http_problems(uri: str, parsed: urllib.parse.ParseResult, environ: Mapping[str, str]) -> list[Problem]:
    """Whether the MLflow server answers ``/health``. Credentials in the URI (``user:pw@host``)
    are sent as HTTP basic auth, as MLflow's client sends them (``requests`` takes them from the
    URL), else ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``; they are never part of the host name."""
    from thub.redact import redact_text

    shown = redact_text(uri)
    host = parsed.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parsed.port}" if parsed.port else "")
    plain = urllib.parse.urlunparse(parsed._replace(netloc=netloc, query="", fragment=""))
    request = urllib.request.Request(plain.rstrip("/") + "/health")
    if parsed.username is not None:
        user, password = urllib.parse.unquote(parsed.username), urllib.parse.unquote(parsed.password or "")
    else:
        user, password = environ.get("MLFLOW_TRACKING_USERNAME", ""), environ.get("MLFLOW_TRACKING_PASSWORD", "")
    sent = bool(user or password)
    if sent:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        urllib.request.urlopen(request, timeout=HTTP_TIMEOUT).close()
    except urllib.error.HTTPError as exc:
        if sent and exc.code in (401, 403):
            return [Problem("mlflow", f"MLflow server {shown} refused the credentials (HTTP {exc.code})",
                            "fix the user and password in mlflow_tracking_uri (or MLFLOW_TRACKING_USERNAME/"
                            "MLFLOW_TRACKING_PASSWORD)")]
        # it answered: reachable (without credentials, authentication is the server's business)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = redact_text(str(getattr(exc, "reason", exc)))
        return [Problem("mlflow", f"MLflow server {shown} is unreachable: {reason}",
                        "start it (mlflow server --host 0.0.0.0 --port 5000) or fix mlflow_tracking_uri")]
    return []


def annotate(metadata: dict[str, Any]) -> dict[str, Any] | None:
    import mlflow

    active = mlflow.active_run()
    if active is None:
        return None
    log_metadata_mlflow(mlflow.MlflowClient(), active.info.run_id, metadata)
    return {"run_id": active.info.run_id, "tracking_uri": mlflow.get_tracking_uri(),
            "experiment_id": active.info.experiment_id}


def prepare(context: RunContext, metadata: dict[str, Any],
                    experiment: str | None) -> tuple[dict[str, str], dict]:
    from mlflow import MlflowClient

    params = context.params
    uri = str(params["mlflow_tracking_uri"])
    experiment = experiment or params.get("mlflow_experiment_name") or os.environ.get(
        "MLFLOW_EXPERIMENT_NAME") or "Default"
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(ensure_experiment(uri, experiment), run_name=run_name(params, "mlflow"),
                            tags={"thub.run_dir": str(context.run_dir.path)})
    log_metadata_mlflow(client, run.info.run_id, metadata)
    return ({"MLFLOW_RUN_ID": run.info.run_id},
            {"run_id": run.info.run_id, "tracking_uri": uri, "experiment": experiment})


def end_library_runs(run_dir: str | Path, status: str) -> None:
    """End the MLflow run thub created for a library (``library_tracker_environment``) if it is still
    running once the run is over: a library that failed or was killed before attaching (or before its
    own ``end_run``) leaves it RUNNING forever. A run the library ended is left as it is. Called by the
    parent at the run's end event; a tracker problem is a warning, never the run's failure."""
    from thub.redact import REDACTED
    from thub.trackers import read_record

    info = read_record(run_dir).get("mlflow") or {}
    run_id, uri = info.get("run_id"), str(info.get("tracking_uri") or "")
    if info.get("route") != "library" or not run_id or not uri or REDACTED in uri:
        return  # nothing thub opened, or a store whose credentials were not written down
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, status=mlflow_status(status))
    except Exception as exc:  # noqa: BLE001 - a tracker never changes the run's outcome
        print(f"thub: WARNING: could not end the MLflow run {run_id}: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)


def finish(run_dir: str | Path, info: Mapping[str, Any], status: str) -> None:
    """``TrackerSpec.finish``: :func:`end_library_runs` (the parent, at the run's end)."""
    end_library_runs(run_dir, status)


def trainer_environment(params: Mapping[str, Any]) -> dict[str, str]:
    env = {"MLFLOW_TRACKING_URI": params["mlflow_tracking_uri"]}
    if params.get("mlflow_experiment_name"):
        env["MLFLOW_EXPERIMENT_NAME"] = params["mlflow_experiment_name"]
    return env


def trainer_init() -> None:
    """Before HF's MLflowCallback calls set_experiment (on_train_begin): a new experiment keeps its
    artifacts beside a sqlite store, not in ./mlruns of the working directory."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri:
        ensure_experiment(uri, os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default")


def prepare_launch(params: Mapping[str, Any], backend: Any) -> None:
    """A new local MLflow store: created once, under its lock (:mod:`thub_builtins.trackers_mlflow_store`)."""
    from thub_builtins.trackers_mlflow_store import prepare_store

    prepare_store(params, backend)
