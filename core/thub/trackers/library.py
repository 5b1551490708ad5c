"""The ``library`` route, in the training child: thub's run metadata goes into the tracker runs that
the training library opens itself, and ``trackers.json`` records where they are.

What is added, either way: W&B ``config.thub``; MLflow params ``thub.<name>`` and the artifact
``thub/run_metadata.json``; TensorBoard a text summary ``thub/parameters`` in the log directory.
A failure here is a warning, never a failed run. Two ways in, called on the main rank:

* :func:`annotate_library_runs`, after the library opened its runs, where thub has a hook in the
  library's process (HF Trainer: ``on_train_begin`` of thub's callback, which runs after the
  ``report_to`` integrations started their runs).
* :func:`library_tracker_environment`, before the library starts, where thub has no hook (verl,
  instructlab-training, mini-trainer, ART run their own processes): environment variables that
  the tracker packages themselves read when the library opens its run, in any process that
  inherits them. W&B: ``WANDB_SWEEP_PARAM_PATH`` names a YAML file (``logs/wandb_config.yaml``)
  that ``wandb.init`` loads into the run's config. MLflow: thub creates the run (experiment, name,
  its params) and hands its id in ``MLFLOW_RUN_ID``, which ``mlflow.start_run`` attaches to.
  TensorBoard: thub's text summary in its own event file in the log directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.trackers import BY_NAME, TRACKERS, enabled, metadata_markdown, run_metadata, run_name, update_record

if TYPE_CHECKING:
    from thub.runner.context import RunContext


def _wandb(metadata: dict[str, Any]) -> dict[str, Any] | None:
    import wandb

    run = wandb.run
    if run is None:
        return None
    run.config.update({"thub": metadata}, allow_val_change=True)
    return {"run_id": run.id, "path": str(Path(run.dir).parent), "project": run.project,
            "mode": "offline" if run.offline else "online"}


def _mlflow(metadata: dict[str, Any]) -> dict[str, Any] | None:
    import mlflow

    from thub.trackers.sink import log_metadata_mlflow

    active = mlflow.active_run()
    if active is None:
        return None
    log_metadata_mlflow(mlflow.MlflowClient(), active.info.run_id, metadata)
    return {"run_id": active.info.run_id, "tracking_uri": mlflow.get_tracking_uri(),
            "experiment_id": active.info.experiment_id}


def _tensorboard(metadata: dict[str, Any]) -> dict[str, Any] | None:
    from thub.trackers.sink import TensorBoardWriter

    log_dir = os.environ.get("TENSORBOARD_LOGGING_DIR")
    if not log_dir:
        return None
    writer = TensorBoardWriter(log_dir)  # its own event file next to the library's
    writer.text("thub/parameters", metadata_markdown(metadata))
    writer.close("running")
    return {"path": log_dir}


_ANNOTATE = {"wandb": _wandb, "mlflow": _mlflow, "tensorboard": _tensorboard}


def annotate_library_runs(context: RunContext, trackers: list[str], via: str) -> None:
    """Log thub's metadata to the library's open runs of ``trackers``; update ``trackers.json``."""
    metadata = run_metadata(_record(context))
    for name in trackers:
        if name not in _ANNOTATE:
            continue  # a report_to integration thub has no parameter for
        try:
            info = _ANNOTATE[name](metadata)
        except Exception as exc:  # noqa: BLE001 - a tracker never stops training
            print(f"thub: WARNING: could not add thub's metadata to the {BY_NAME[name].title} run: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        if info:
            update_record(context.run_dir.path, name, {"route": "library", "via": via, **info})


def _record(context: RunContext) -> dict[str, Any]:
    """``thub_run.json`` as the child read it (a context built without it: read from the file)."""
    if context.record:
        return context.record
    from thub.runner.rundir import read_json

    return read_json(context.run_dir.record) or {}


def library_tracker_environment(context: RunContext, trackers: Iterable[str], *, via: str,
                                mlflow_experiment: str | None = None) -> dict[str, str]:
    """Environment variables that put thub's metadata into the tracker runs a library opens itself.

    Call it in the runner before the library starts (it may open its runs in other processes:
    merge the result into their environment). ``trackers``: those the library logs (the backend
    honours their parameters); only those the run turns on are prepared. ``mlflow_experiment``:
    the experiment the library would use (default: ``mlflow_experiment_name``, else
    ``MLFLOW_EXPERIMENT_NAME``, else MLflow's ``Default``): a library that calls
    ``mlflow.set_experiment`` refuses a run id of another experiment. Empty on other ranks and nodes.
    """
    from thub.launch.torchrun import is_head_node

    if not context.is_main or not is_head_node():  # one node, one process opens the runs
        return {}
    params = context.params
    metadata = run_metadata(_record(context))
    wanted = {t.name for t in enabled(params)} & set(trackers)
    env: dict[str, str] = {}
    for name in (t.name for t in TRACKERS if t.name in wanted):
        try:
            found, info = _PREPARE[name](context, metadata, mlflow_experiment)
        except Exception as exc:  # noqa: BLE001 - a tracker never stops training
            print(f"thub: WARNING: could not prepare thub's metadata for the {BY_NAME[name].title} run: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        env.update(found)
        if info:
            update_record(context.run_dir.path, name, {"route": "library", "via": via, **info})
    return env


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

        from thub.trackers.sink import mlflow_status

        client = MlflowClient(tracking_uri=uri)
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_terminated(run_id, status=mlflow_status(status))
    except Exception as exc:  # noqa: BLE001 - a tracker never changes the run's outcome
        print(f"thub: WARNING: could not end the MLflow run {run_id}: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)


def wandb_key_environment(params: Mapping[str, Any], library: str,
                          environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """For a library that logs to W&B only when ``WANDB_API_KEY`` is set and never reads
    ``~/.netrc`` (mini-trainer refuses to start without it, ART leaves W&B out silently), offline
    too. Offline (``WANDB_MODE`` offline/disabled/dryrun) an empty key lets it log locally (W&B
    needs none); online without the variable is a usage error naming the fix, before the run."""
    environ = os.environ if environ is None else environ
    if not params.get("wandb_project") or environ.get("WANDB_API_KEY") is not None:
        return {}
    if environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return {"WANDB_API_KEY": ""}
    from thub.errors import UsageError

    raise UsageError(f"{library} logs to W&B only with WANDB_API_KEY set (it does not read ~/.netrc): "
                     "export WANDB_API_KEY=...; or log locally without an account: export WANDB_MODE=offline")


def _prepare_wandb(context: RunContext, metadata: dict[str, Any], _: str | None) -> tuple[dict[str, str], dict]:
    import yaml

    # wandb.init loads the YAML file named by WANDB_SWEEP_PARAM_PATH (wandb's config-file format,
    # key: {value: ...}) into run.config, in whatever process the library opens its run; the keys
    # are locked against changes by the library, which suits parameters thub set. (WANDB_CONFIG_PATHS
    # would be the plain way, but wandb 0.31's settings reject its value: a str, not a list.)
    content: dict[str, Any] = {"thub": {"value": metadata}}
    agent = os.environ.get("WANDB_SWEEP_PARAM_PATH")
    if agent and Path(agent).is_file():  # a W&B sweep agent started this run: keep its parameters
        content = {**(yaml.safe_load(Path(agent).read_text()) or {}), **content}
    path = context.run_dir.path / "logs" / "wandb_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return {"WANDB_SWEEP_PARAM_PATH": str(path)}, {}


def _prepare_mlflow(context: RunContext, metadata: dict[str, Any],
                    experiment: str | None) -> tuple[dict[str, str], dict]:
    from mlflow import MlflowClient

    from thub.trackers.sink import ensure_experiment, log_metadata_mlflow

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


def _prepare_tensorboard(context: RunContext, metadata: dict[str, Any], _: str | None) -> tuple[dict[str, str], dict]:
    from thub.trackers.sink import TensorBoardWriter

    log_dir = str(context.params["tensorboard_log_dir"])
    writer = TensorBoardWriter(log_dir)  # its own event file next to the library's
    writer.text("thub/parameters", metadata_markdown(metadata))
    writer.close("running")
    return {}, {"path": log_dir}


_PREPARE = {"wandb": _prepare_wandb, "mlflow": _prepare_mlflow, "tensorboard": _prepare_tensorboard}
