"""The ``library`` route, in the training child: once the training library has opened its tracker
runs, add thub's run metadata to them and record where they are.

Called on the main rank (for HF Trainer: ``on_train_begin`` of thub's callback, which runs after
the ``report_to`` integrations started their runs). What is added: W&B ``config.thub``; MLflow
params ``thub.<name>`` and the artifact ``thub/run_metadata.json``; TensorBoard a text summary
``thub/parameters`` in the log directory. A failure here is a warning, never a failed run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.trackers import BY_NAME, metadata_markdown, run_metadata, update_record

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
    from thub.runner.rundir import read_json

    metadata = run_metadata(read_json(context.run_dir.record) or {})
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
