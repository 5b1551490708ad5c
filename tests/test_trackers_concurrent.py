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
