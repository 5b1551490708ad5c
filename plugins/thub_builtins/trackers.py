"""Experiment trackers from the parent process (built-in plugin on ``thub_on_event``), and the
``core.trackers`` doctor check.

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
    from thub.trackers import run_name

    info: dict[str, Any] = {"route": "library", "via": backend}
    if tracker == "tensorboard":
        info["log_dir"] = params["tensorboard_log_dir"]
    elif tracker == "mlflow":
        info.update(tracking_uri=params["mlflow_tracking_uri"], experiment=params.get("mlflow_experiment_name"),
                    run_name=run_name(params, "mlflow"))
    else:
        info.update(project=params["wandb_project"], run_name=run_name(params, "wandb"))
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

        if os.path.exists(os.path.join(event.run_dir, RECORD_FILE)):  # only then: mlflow is heavy
            from thub.trackers.library import end_library_runs

            end_library_runs(event.run_dir, event.kind)


@hookimpl
def thub_register_checks(register: Callable[[Any], None]) -> None:
    from thub.specs import CheckSpec

    register(CheckSpec(id="core.trackers", title="Experiment trackers (TensorBoard, MLflow, W&B)", run=_check,
                       timeout=30, docs="docs/trackers.md#doctor"))


def _check(context: Any) -> Any:
    from thub.trackers.check import check  # urllib, netrc: only when the check runs

    return check(context)
