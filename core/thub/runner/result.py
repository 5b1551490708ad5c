"""The one writer of a run's final ``result.json``.

Two processes may write the final result: the supervisor (normally), and the training child when
the supervisor died (:mod:`thub.runner.lifeline`: nobody else would write it). Both complete the
record here, so it has the same fields either way, redacted the same way, written atomically.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from thub.redact import redact
from thub.runner.metrics import is_eval_line, read_metrics
from thub.runner.rundir import RunDirectory, read_json, write_json_atomic


def write_result(run_dir: RunDirectory, result: dict[str, Any], *, started: float, model_path: str,
                 checkpoints: list[dict[str, Any]] | None = None,
                 last_metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """Complete ``result`` with the run's fields, redact it and write ``result.json`` atomically.

    ``result`` holds the outcome (``status``, ``error``, ``reason``, ...); this adds ``run_dir``,
    ``checkpoints`` and ``last_metrics`` (the last training line; from the run's event and metrics files unless the
    caller followed them already), ``wall_seconds`` since ``started``, ``log``, ``outputs``,
    ``final_checkpoint`` (None unless set), ``best_checkpoint``
    (:func:`thub.runner.best.best_checkpoint`: the lowest ``eval_loss`` among the complete
    checkpoints, or None), ``final_model`` (its layout and whether it loads as it is,
    :func:`thub.checkpoint.layouts.final_model`), ``reached_step``, ``built`` (what the library
    built, where it was measured: ``built.json``) and the chat-template check of the saved checkpoints
    against ``model_path``; then redacts every value (an error may quote a URI with its
    password). A write error (a full disk) is one line on stderr and a ``note``, not a
    traceback. Returns the record as written.
    """
    if checkpoints is None:
        checkpoints = [{"path": e["path"], "step": e["step"]} for e in read_metrics(run_dir.events) if "path" in e]
    if last_metrics is None or is_eval_line(last_metrics):
        # the last training line (an evaluation line after the last step has no loss)
        lines = [line for line in read_metrics(run_dir.metrics) if not is_eval_line(line)]
        last_metrics = lines[-1] if lines else last_metrics
    record = read_json(run_dir.record) or {}
    result = {
        **result,
        # 0: no training step ever ran in this directory (kept steps of earlier attempts count):
        # the same command runs again without --resume or --overwrite (RunDirectory.prepare)
        "reached_step": run_dir.reached_step(),
        "run_dir": str(run_dir.path),
        "checkpoints": checkpoints,
        "last_metrics": last_metrics,
        "wall_seconds": round(time.time() - started, 3),
        "log": str(run_dir.log_file),
        # result.json itself is one, whether or not a result was written before this one
        "outputs": sorted({*run_dir.outputs_since(record.get("user_entries")), run_dir.result.name}),
    }
    result.setdefault("final_checkpoint", None)
    from thub.runner.best import best_checkpoint

    # the lowest eval_loss among the checkpoints still there (None: the run did not validate, or
    # saved no checkpoint at an evaluated step); `thub eval --checkpoints best` reads it
    result["best_checkpoint"] = best_checkpoint(read_metrics(run_dir.metrics), checkpoints)
    from thub.checkpoint.layouts import final_model

    result["final_model"] = final_model(result["final_checkpoint"])  # its layout, loadable as it is
    from thub.runner.built import SUMMARY_FIELDS, read_built

    built = read_built(run_dir.path)  # what the library built, measured before step 1 (thub.runner.built)
    if built is not None:
        result["built"] = {k: built.get(k) for k in (*SUMMARY_FIELDS, "refused")}
    from thub.data.template_check import attach as check_templates

    check_templates(result, model_path)  # saved chat templates vs the input model's
    result = redact(result)
    try:
        write_json_atomic(run_dir.result, result)
    except OSError as exc:
        result["note"] = f"result.json could not be written: {exc.strerror or exc}"
        print(f"thub: cannot write {run_dir.result}: {exc.strerror or exc}", file=sys.stderr)
    return result
