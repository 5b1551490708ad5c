"""The training child process: ``python -m thub.runner.child RUN_DIR``.

Started by the supervisor (directly, or once per rank by torchrun). It reads ``thub_run.json``,
imports the backend's runner by import string, and calls ``run(context)``. On the main rank it
writes ``result.json`` (succeeded or interrupted); a crash prints its traceback to the log and
exits 1 — the supervisor then writes the ``failed`` result with the root cause.

The child stops when the thub process dies (:mod:`thub.runner.lifeline`); the result it then
writes is final, so it carries every field the supervisor would have added and the reason.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from thub.errors import UsageError
from thub.redact import real_values, redact
from thub.runner.built import DataMismatch
from thub.runner.context import RunContext
from thub.runner.lifeline import PARENT_ENV, parent_alive, watch_parent
from thub.runner.metrics import read_metrics
from thub.runner.result import write_result
from thub.runner.rundir import RunDirectory, read_json, write_json_atomic
from thub.specs import load_object


def _completed(run_dir: RunDirectory) -> bool:
    """The metrics stream reached max_steps: every training step is done."""
    lines = read_metrics(run_dir.metrics)
    last = lines[-1] if lines else {}
    return isinstance(last.get("max_steps"), int) and last.get("step", 0) >= last["max_steps"]


def _orphan_result(run_dir: RunDirectory, context: RunContext, result: dict[str, Any], started: float) -> None:
    """The final result.json of a child whose supervisor died: the supervisor's own writer, so the
    fields (and their redaction) are the same as when the supervisor writes it."""
    result["reason"] = (f"the thub parent process (pid {os.environ.get(PARENT_ENV)}) died; "
                        "the training child stopped with it")
    write_result(run_dir, result, started=started, model_path=str(context.params.get("model_path") or ""))


def run_child(run_path: str) -> int:
    run_dir = RunDirectory(Path(run_path))
    record = read_json(run_dir.record)
    if record is None:
        print(f"thub child: cannot read {run_dir.record}", file=sys.stderr)
        return 2
    context = RunContext(
        algorithm=record["algorithm"],
        backend=record["backend"],
        # thub_run.json holds secrets redacted; the parent passes the real values (thub.redact)
        params=real_values({k: v["value"] for k, v in record["parameters"].items()}, run_path),
        run_dir=run_dir,
        resume_from=record.get("resume_from"),
        record=record,
    )
    context.install_signal_handlers()
    watch_parent()
    started = time.time()
    # the log says when the backend starts importing (a signal until its first step stops at once)
    print(f"thub child: starting {context.backend} (pid {os.getpid()})", flush=True)
    try:
        runner = load_object(record["runner"])
        outcome: dict[str, Any] = runner(context) or {}
    except DataMismatch as exc:
        # measured before step 1 (built.json says why): bad input, not a crash; the supervisor
        # turns it into exit 2 with this message, no traceback
        print(f"thub: {exc}", file=sys.stderr, flush=True)
        return 2
    except UsageError as exc:
        # bad input found in the child (a data file edited into invalid rows since the parent
        # validated it): the message is the root cause, a traceback would bury it
        print(f"UsageError: {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:
        traceback.print_exc()
        sys.stderr.flush()
        if context.is_main and not parent_alive():
            _orphan_result(run_dir, context, {
                "status": "failed", "algorithm": context.algorithm, "backend": context.backend,
                "final_checkpoint": None, "exit_code": 1,
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:400],
                "root_cause": traceback.format_exception_only(exc)[-1:]}, started)
        return 1
    if context.is_main:
        # A stop request that came after the last step (during the final save, say) did not
        # interrupt anything: the runner's own word counts, else whether all steps are done.
        interrupted = outcome.get("interrupted") or (context.stop_requested and not _completed(run_dir))
        result = {
            "status": "interrupted" if interrupted else "succeeded",
            "algorithm": context.algorithm,
            "backend": context.backend,
            "final_checkpoint": outcome.get("final_checkpoint"),
            "summary": outcome.get("summary", {}),
            "train_seconds": round(time.time() - started, 3),
        }
        if parent_alive():
            # the supervisor completes it (thub.runner.result); redacted already, should it never get to
            write_json_atomic(run_dir.result, redact(result))
        else:
            _orphan_result(run_dir, context, result, started)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(run_child(sys.argv[1]))
