"""The ``library`` route, in the training child: thub's run metadata goes into the tracker runs that
the training library opens itself, and ``trackers.json`` records where they are.

What each tracker adds is its plugin's (``TrackerSpec.annotate`` / ``TrackerSpec.prepare``); a
failure here is a warning, never a failed run. Two ways in, called on the main rank:

* :func:`annotate_library_runs`, after the library opened its runs, where thub has a hook in the
  library's process (HF Trainer: ``on_train_begin`` of thub's callback, which runs after the
  ``report_to`` integrations started their runs).
* :func:`library_tracker_environment`, before the library starts, where thub has no hook (verl,
  instructlab-training, mini-trainer, ART run their own processes): environment variables that
  the tracker packages themselves read when the library opens its run, in any process that
  inherits them (a config file the package loads, a run id it attaches to).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from thub.specs import load_object
from thub.trackers import enabled, run_metadata, update_record
from thub.trackers import trackers as all_trackers

if TYPE_CHECKING:
    from thub.runner.context import RunContext


def annotate_library_runs(context: RunContext, trackers: list[str], via: str) -> None:
    """Log thub's metadata to the library's open runs of ``trackers``; update ``trackers.json``."""
    metadata = run_metadata(_record(context))
    # ``trackers`` are HF Trainer report_to names (or tracker names): each the tracker that has it
    known = {spec.report_to or spec.name: spec for spec in all_trackers()}
    for reported in trackers:
        spec = known.get(reported)
        if spec is None or spec.annotate is None:
            continue  # a report_to integration thub has no parameter for
        name = spec.name
        try:
            info = load_object(spec.annotate)(metadata)
        except Exception as exc:  # noqa: BLE001 - a tracker never stops training
            print(f"thub: WARNING: could not add thub's metadata to the {spec.title} run: "
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
    for spec in (t for t in all_trackers() if t.name in wanted and t.prepare):
        name = spec.name
        try:
            assert spec.prepare is not None
            found, info = load_object(spec.prepare)(context, metadata, mlflow_experiment)
        except Exception as exc:  # noqa: BLE001 - a tracker never stops training
            print(f"thub: WARNING: could not prepare thub's metadata for the {spec.title} run: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        env.update(found)
        if info:
            update_record(context.run_dir.path, name, {"route": "library", "via": via, **info})
    return env
