"""``mlflow://MODEL_NAME[?tracking_uri=URI&registry_uri=URI&experiment=NAME]``: ``thub checkpoint push`` to
MLflow's model registry (moved from ``thub.checkpoint.push``; registered by :mod:`thub_builtins.storage`).

A new version of MODEL_NAME: an MLflow run (experiment ``thub-push`` unless named) carrying the thub run's
parameters (``thub.<name>``, as thub's trackers log them) and final metrics, the folder logged as its
``model`` artifact, and ``create_model_version`` on it. The tracking URI is the query's, else
``MLFLOW_TRACKING_URI``, else the run's ``mlflow_tracking_uri`` parameter (never ``./mlruns``). mlflow is
imported only when a push runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from thub.checkpoint.collect import staged
from thub.checkpoint.storage import Target
from thub.errors import UsageError

MLFLOW_EXPERIMENT = "thub-push"


def parse(uri: str, rest: str) -> Target:
    """``mlflow://MODEL_NAME[?tracking_uri=...&registry_uri=...&experiment=...]``: the name and the query."""
    name, _, query = rest.partition("?")
    if not name.strip("/"):
        raise UsageError("no model name (mlflow://MODEL_NAME)")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = sorted(set(options) - {"tracking_uri", "registry_uri", "experiment"})
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r} (expected tracking_uri, registry_uri, experiment)")
    return Target("mlflow", uri, name.strip("/"), options=options)


def check(target: Target, values: dict[str, Any]) -> None:
    """A run's post-run push (``push: mlflow://...``) needs a tracking URI before it trains: the query's,
    ``MLFLOW_TRACKING_URI`` or the run's ``mlflow_tracking_uri``."""
    if not (target.options.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
            or values.get("mlflow_tracking_uri")):
        raise UsageError("no MLflow tracking URI: add ?tracking_uri=URI, set MLFLOW_TRACKING_URI, or train with "
                         "mlflow_tracking_uri")


def _tracking_uri(target: Target, run_dir: Path | None) -> str:
    uri = target.options.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri and run_dir is not None:
        from thub.checkpoint.layouts import run_parameters
        from thub.redact import real_values

        uri = real_values(run_parameters(run_dir) or {}, run_dir).get("mlflow_tracking_uri")
    if not uri:
        raise UsageError(f"--to {target.shown}: no MLflow tracking URI: add ?tracking_uri=URI, set "
                         "MLFLOW_TRACKING_URI, or push a run trained with mlflow_tracking_uri")
    return str(uri)


def push(plan: dict[str, Any], extras: dict[str, bytes]) -> dict[str, Any]:
    """Send a planned push to MLflow's model registry (``StorageSpec.push`` of ``mlflow``): a run in
    the experiment (``thub-push`` unless named) with the thub run's parameters and final metrics, the
    folder as its ``model`` artifact, and a new version of the registered model."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException

    from thub_builtins.trackers_mlflow import ensure_experiment

    target: Target = plan["_target"]
    run_dir = Path(plan["run_dir"]) if plan["run_dir"] else None
    uri = _tracking_uri(target, run_dir)
    # before any MlflowClient opens the store: a new SQLite store made by one gets MLflow's default
    # artifact root, ./mlruns of whatever folder the push ran in, for its Default experiment
    experiment = ensure_experiment(uri, target.options.get("experiment") or MLFLOW_EXPERIMENT)
    client = MlflowClient(tracking_uri=uri, registry_uri=target.options.get("registry_uri") or uri)
    facts = plan["card_facts"]
    run = client.create_run(experiment, run_name=f"push {Path(plan['source']).name}",
                            tags={"thub.source": plan["source"], "thub.run_dir": plan["run_dir"] or "",
                                  "thub.algorithm": facts.get("algorithm") or "",
                                  "thub.backend": facts.get("backend") or ""})
    run_id = run.info.run_id
    try:
        if run_dir is not None:  # the run's parameters as thub's trackers log them (thub.<name>, with sources)
            from thub.runner.rundir import read_json
            from thub.trackers import run_metadata
            from thub_builtins.trackers_mlflow import log_metadata_mlflow

            log_metadata_mlflow(client, run_id, run_metadata(read_json(run_dir / "thub_run.json") or {}))
        now = int(time.time() * 1000)
        step = int((facts.get("final_metrics") or {}).get("step") or 0)
        metrics = [Metric(k, float(v), now, step) for k, v in (facts.get("final_metrics") or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
        with staged(Path(plan["source"]), plan["files"], extras) as staging:
            client.log_artifacts(run_id, str(staging), "model")
        client.set_terminated(run_id)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    try:
        client.create_registered_model(target.location)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(target.location, source=f"{run.info.artifact_uri}/model", run_id=run_id,
                                          tags={"thub.source": plan["source"]},
                                          description=f"pushed by thub checkpoint push from {plan['source']}")
    return {"revision": str(version.version), "url": f"models:/{target.location}/{version.version}",
            "mlflow_run_id": run_id}
