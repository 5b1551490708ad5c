"""Five real runs started together on a new local MLflow store all succeed, and the store works
afterwards (issue 23 item 2): the parent creates and migrates it once, under a lock, before launch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("mlflow")]

ROOT = Path(__file__).resolve().parents[1]
WARNING = "thub: warning: the mlflow tracker failed"


def test_five_concurrent_runs_on_a_new_sqlite_store(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "MLFLOW_"))}
    runs = [subprocess.Popen([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl",
                              "--model-path", str(tiny_model), "--data-path", str(demo_data / "chat.jsonl"),
                              "--ckpt-output-dir", str(tmp_path / f"run{i}"), "--max-steps", "2",
                              "--no-save-final-checkpoint", "--mlflow-tracking-uri", uri,
                              "--mlflow-experiment-name", "together"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=ROOT)
            for i in range(5)]
    outcomes = [(run.wait(timeout=1800), run.communicate()[1]) for run in runs]  # a hang guard
    assert [code for code, _ in outcomes] == [0] * 5, [err[-2000:] for code, err in outcomes if code]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("together")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id])
    assert len(found) == 5 and {run.info.status for run in found} == {"FINISHED"}, found
    later = client.create_run(experiment.experiment_id)  # the store still works
    client.log_metric(later.info.run_id, "x", 1.0)
    assert client.get_run(later.info.run_id).data.metrics == {"x": 1.0}


def test_a_store_that_fails_during_training_is_a_warning(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    import json
    import sqlite3
    import time

    from thub.runner.metrics import read_metrics

    database = tmp_path / "store" / "mlflow.db"
    out = tmp_path / "run"
    log = out / "logs" / "train.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "MLFLOW_"))}
    process = subprocess.Popen([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl",
                                "--model-path", str(tiny_model), "--data-path", str(demo_data / "chat.jsonl"),
                                "--ckpt-output-dir", str(out), "--max-steps", "8", "--effective-batch-size", "2",
                                "--no-save-final-checkpoint", "--mlflow-tracking-uri", f"sqlite:///{database}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ, cwd=ROOT)
    holder = None
    try:
        deadline = time.time() + 900  # a hang guard
        while len(read_metrics(out / "training_metrics.jsonl")) < 2:
            assert process.poll() is None and time.time() < deadline, process.communicate()
            time.sleep(0.05)
        # the store becomes unusable while the run trains: another process holds it locked, until the
        # tracker has failed (MLflow waits 20 s for a locked SQLite file; every later write of the run's,
        # such as MLflow's own end_run at exit, would wait as long again)
        holder = sqlite3.connect(database, isolation_level=None, timeout=60)
        holder.execute("BEGIN EXCLUSIVE")
        while WARNING not in log.read_text(errors="replace") and process.poll() is None:
            assert time.time() < deadline, "hang guard"
            time.sleep(0.1)
        holder.execute("ROLLBACK")
        holder.close()
        holder = None
        _out, err = process.communicate(timeout=900)
    finally:
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    assert WARNING in log.read_text()
    steps = [line["step"] for line in read_metrics(out / "training_metrics.jsonl")]
    assert steps == list(range(1, 9)), steps  # training went on after the failure
