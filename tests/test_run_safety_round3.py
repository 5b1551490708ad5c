"""Run safety, round 3 (issue 23 items 1, 3, 7): real ``thub`` processes on the trl backend with
the tiny local model, real signals, a real tmpfs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from thub.runner.lock import LOCK_NAME
from thub.runner.metrics import read_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update(extra or {})
    return environ


def thub(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=_environ(env), timeout=900, cwd=ROOT)  # a hang guard, not a timing assert


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "thub", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_environ(env), cwd=ROOT)


def sft(model: Path | str, data: Path | str, out: Path | str, *extra: str) -> list[str]:
    return ["train", "sft", "--backend", "trl", "--model-path", str(model), "--data-path", str(data),
            "--ckpt-output-dir", str(out), *extra]


def result_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text())


def wait_for(condition: Any, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.time() + 600  # a hang guard
    while time.time() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(f"run ended before {what}: {process.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


def training_child(out: Path) -> int:
    """The training child's pid, as the run's lock file names it (thub.runner.lock)."""
    holder = json.loads((out / LOCK_NAME).read_text().strip("\0") or "{}")
    return int(holder["child"])


# --- item 3: a child killed by a signal (the OOM killer) ---------------------------------------

def test_a_child_killed_by_sigkill_is_the_root_cause(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "oom"
    process = start(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "5000",
                         "--effective-batch-size", "2"))
    try:
        wait_for(lambda: len(read_metrics(out / "training_metrics.jsonl")) >= 2, process, "step 2")
        os.kill(training_child(out), signal.SIGKILL)  # what the kernel's OOM killer does
        _out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err
    result = result_of(out)
    assert result["status"] == "failed" and result["exit_code"] == -9, result
    error = result["error"]
    assert error.startswith("the training process was killed by SIGKILL (signal 9); out of memory? "
                            "(see `dmesg`)"), error
    assert "peak memory" in error and " MiB" in error, error
    assert result["root_cause"] == [error] and "{" not in error
    assert "Traceback" not in err and "killed by SIGKILL" in err

