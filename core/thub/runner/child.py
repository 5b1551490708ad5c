"""The training child process: ``python -m thub.runner.child RUN_DIR``.

Started by the supervisor (directly, or once per rank by torchrun). It reads ``thub_run.json``,
imports the backend's runner by import string, and calls ``run(context)``. On the main rank it
writes ``result.json`` (succeeded or interrupted); a crash prints its traceback to the log and
exits 1 — the supervisor then writes the ``failed`` result with the root cause.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

from thub.redact import real_values
from thub.runner.context import RunContext
from thub.runner.rundir import RunDirectory, read_json, write_json_atomic
from thub.specs import load_object


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
    )
    context.install_signal_handlers()
    started = time.time()
    try:
        runner = load_object(record["runner"])
        outcome: dict[str, Any] = runner(context) or {}
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    if context.is_main:
        status = "interrupted" if context.stop_requested or outcome.get("interrupted") else "succeeded"
        write_json_atomic(run_dir.result, {
            "status": status,
            "algorithm": context.algorithm,
            "backend": context.backend,
            "final_checkpoint": outcome.get("final_checkpoint"),
            "summary": outcome.get("summary", {}),
            "train_seconds": round(time.time() - started, 3),
        })
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(run_child(sys.argv[1]))
