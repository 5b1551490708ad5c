"""SIGTERM in the middle of a real run, then ``--resume``: the check every backend's suite makes.

    stopped_at = sigterm_then_resume(["train", "sft", "--backend", "trl", ...], out, steps=30)

The first run is braked with ``THUB_TEST_STEP_SLEEP`` (each training line of the metrics stream
waits that long before it is written, :class:`thub.runner.metrics.MetricsWriter`), so the signal
sent after ``after`` lines always reaches a run that is still training, however busy the machine:
no wall-clock race. The resumed run goes at full speed. What is asserted is what thub promises
(docs/outputs.md): exit 130 and ``interrupted`` with a checkpoint of the step it stopped at, a
hint to ``--resume``, then a resumed run that continues from that checkpoint and leaves each step
``1..steps`` in the metrics exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from thub.runner.metrics import is_eval_line, read_metrics

#: seconds the braked first run waits per training line; with ``after`` lines read, the signal has
#: ``(steps - after) * STEP_PAUSE`` seconds to arrive before that run could have finished
STEP_PAUSE = 0.5
#: a hang guard only: how long the first run may take to write ``after`` lines or to stop
HANG_GUARD_S = 600.0


def clean_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the caller's ``THUB_*`` settings, plus ``extra``."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("THUB_")}
    environ.update(extra or {})
    return environ


def sigterm_then_resume(argv: Sequence[str], out: Path, *, steps: int, after: int = 5,
                        environ: Mapping[str, str] | None = None, step_pause: float = STEP_PAUSE) -> int:
    """Run ``python -m thub ARGV`` (its ``--ckpt-output-dir`` is ``out`` and its ``max_steps`` is
    ``steps``), send SIGTERM once ``after`` metrics lines are written, check the interrupted run,
    resume it with ``ARGV --resume`` and check the whole run. Returns the step the first run
    stopped at. ``environ``: the runs' environment (default: :func:`clean_environ`)."""
    if steps <= after:
        raise ValueError(f"steps ({steps}) must be more than after ({after}), or the run may finish first")
    base = dict(environ) if environ is not None else clean_environ()
    command = [sys.executable, "-m", "thub", *argv]
    metrics = out / "training_metrics.jsonl"
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**base, "THUB_TEST_STEP_SLEEP": str(step_pause)})
    deadline = time.monotonic() + HANG_GUARD_S
    while len(read_metrics(metrics)) < after:
        if process.poll() is not None:
            _stdout, stderr = process.communicate()
            raise AssertionError(f"the run ended (exit {process.returncode}) before {after} steps:\n{stderr[-4000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"no {after} metrics lines in {HANG_GUARD_S:.0f} s: hung")
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _stdout, stderr = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 130, stderr[-4000:]
    assert "--resume" in stderr, stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted", result
    lines = read_metrics(metrics)
    stopped_at = lines[-1]["step"]
    assert after <= stopped_at < steps, [line["step"] for line in lines]
    assert result["final_checkpoint"] == str(out / "checkpoints" / f"checkpoint-{stopped_at}"), result

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=base,
                             timeout=HANG_GUARD_S)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    training = [line["step"] for line in read_metrics(metrics) if not is_eval_line(line)]
    assert training == list(range(1, steps + 1)), training  # each step once: none lost, none repeated
    record = json.loads((out / "thub_run.json").read_text())
    assert record["resume_from"].endswith(f"checkpoint-{stopped_at}"), record["resume_from"]
    return stopped_at
