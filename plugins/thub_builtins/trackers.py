"""Experiment trackers: TensorBoard, MLflow and W&B registered on ``thub_register_trackers`` (their
code: ``thub_builtins.trackers_tensorboard``, ``trackers_mlflow``, ``trackers_wandb``), the parent
process's side of every tracker (``thub_on_event``), and the ``core.trackers`` doctor check.

On ``started`` it records in ``trackers.json`` where each tracker the run turns on will log, and
opens the trackers that the backend's library does not log itself (the ``thub`` route of
:mod:`thub.trackers`); every ``metrics`` event then goes to them and the end event closes their
runs with the run's status. Only the head node logs (every node of a multi-node job runs thub).
Tracker packages are imported only when a run turns one on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from thub import hookimpl
from thub.specs import END_KINDS

_SINKS: dict[str, Any] = {}  # run directory -> ParentSink


def library_info(tracker: str, params: dict[str, Any], backend: str) -> dict[str, Any]:
    """What thub knows of a tracker the library logs (the child may add its run id)."""
    from thub.specs import load_object
    from thub.trackers import by_name

    spec = by_name()[tracker]
    info: dict[str, Any] = {"route": "library", "via": backend}
    if spec.record:
        info.update(load_object(spec.record)(params))
    return info


def start(run_dir: str, resume: bool) -> None:
    from thub.launch.torchrun import is_head_node
    from thub.runner.rundir import read_json
    from thub.trackers import RECORD_FILE, enabled, route, update_record

    if not is_head_node():
        return
    if not resume:  # a replaced run's trackers are not this run's
        from pathlib import Path

        Path(run_dir, RECORD_FILE).unlink(missing_ok=True)
    record = read_json(f"{run_dir}/thub_run.json") or {}
    params = {name: entry.get("value") for name, entry in (record.get("parameters") or {}).items()}
    trackers = enabled(params)
    if not trackers:
        return
    from thub.manager import get_registry

    backend = get_registry().backends.get(str(record.get("backend")))
    if backend is None:
        return
    parent = []
    for tracker in trackers:
        if route(backend, record["algorithm"], tracker) == "thub":
            parent.append(tracker.name)
        else:
            update_record(run_dir, tracker.name, library_info(tracker.name, params, backend.name))
    if parent:
        from thub.trackers.sink import ParentSink

        _SINKS[run_dir] = ParentSink(run_dir, record, parent, resume=resume)


@hookimpl
def thub_on_event(event: Any) -> None:
    if event.kind == "started":
        start(event.run_dir, resume=bool(event.data.get("resume_from")))
    elif event.kind == "metrics":
        sink = _SINKS.get(event.run_dir)
        if sink is not None:
            sink.log(event.data)
    elif event.kind in END_KINDS:
        sink = _SINKS.pop(event.run_dir, None)
        if sink is not None:
            sink.close(event.kind)
        from thub.trackers import RECORD_FILE

        if os.path.exists(os.path.join(event.run_dir, RECORD_FILE)):  # only then: a tracker's package is heavy
            from thub.trackers import finish_library_runs

            finish_library_runs(event.run_dir, event.kind)


@hookimpl
def thub_register_trackers(register: Callable[[Any], None]) -> None:
    from thub.specs import TrackerSpec

    tb, ml, wb = "thub_builtins.trackers_tensorboard", "thub_builtins.trackers_mlflow", "thub_builtins.trackers_wandb"
    register(TrackerSpec(
        "tensorboard", "TensorBoard", "tensorboard_log_dir", ("tensorboard_log_dir",), writer=f"{tb}:open_writer",
        where=f"{tb}:where", module="tensorboard", distributions=("tensorboard",),
        install="pip install 'tensorboard>=2.14'", record=f"{tb}:record", problems=f"{tb}:problems",
        annotate=f"{tb}:annotate", prepare=f"{tb}:prepare", report_to="tensorboard",
        trainer_environment=f"{tb}:trainer_environment",
        # transformers 4.x's TensorBoardCallback reads TrainingArguments.logging_dir instead
        trainer_legacy_args={"TENSORBOARD_LOGGING_DIR": "logging_dir"}, trainer_order=-2,
        summary="Event files in tensorboard_log_dir."))
    register(TrackerSpec(
        "mlflow", "MLflow", "mlflow_tracking_uri", ("mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name"),
        writer=f"{ml}:open_writer", where=f"{ml}:where", module="mlflow", distributions=("mlflow", "mlflow-skinny"),
        install="pip install 'mlflow-skinny>=3'   # or the full: pip install mlflow", record=f"{ml}:record",
        problems=f"{ml}:problems", prepare_launch=f"{ml}:prepare_launch", annotate=f"{ml}:annotate",
        prepare=f"{ml}:prepare", finish=f"{ml}:finish", run_name_param="mlflow_run_name", report_to="mlflow",
        trainer_environment=f"{ml}:trainer_environment", trainer_init=f"{ml}:trainer_init", trainer_order=-1,
        summary="A run in the MLflow store at mlflow_tracking_uri."))
    register(TrackerSpec(
        "wandb", "Weights & Biases", "wandb_project", ("wandb_project", "wandb_entity", "wandb_run_name"),
        writer=f"{wb}:open_writer", where=f"{wb}:where", module="wandb", distributions=("wandb",),
        install="pip install wandb", record=f"{wb}:record", problems=f"{wb}:problems", annotate=f"{wb}:annotate",
        prepare=f"{wb}:prepare", run_name_param="wandb_run_name", report_to="wandb",
        trainer_environment=f"{wb}:trainer_environment", trainer_order=-3,
        summary="A W&B run in wandb_project (WANDB_MODE=offline: local files only)."))


@hookimpl
def thub_register_checks(register: Callable[[Any], None]) -> None:
    from thub.specs import CheckSpec

    register(CheckSpec(id="core.trackers", title="Experiment trackers (TensorBoard, MLflow, W&B)", run=_check,
                       timeout=30, docs="docs/trackers.md#doctor"))


def _check(context: Any) -> Any:
    from thub.trackers.check import check  # urllib, netrc: only when the check runs

    return check(context)
