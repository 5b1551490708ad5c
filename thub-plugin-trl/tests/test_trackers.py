"""Experiment trackers on the trl backend: TrainingArguments built by TRL itself, and real CPU
runs whose TensorBoard, MLflow and W&B (offline) records are read back with each tool's reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.manager import load_registry

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


def _plan(algorithm: str, **params):
    registry = load_registry()
    resolved = resolve(registry, algorithm, backend="trl", flags={**BASE, **params}, environ={})
    return registry.translate(algorithm, "trl", resolved.values())


def test_tensorboard_log_dir_builds_a_real_sft_config(tmp_path: Path) -> None:
    """transformers 5 removed TrainingArguments.logging_dir: the directory goes through
    TENSORBOARD_LOGGING_DIR, which TensorBoardCallback reads."""
    import trl

    plan = _plan("sft", ckpt_output_dir=str(tmp_path / "run"), tensorboard_log_dir=str(tmp_path / "tb"))
    config = trl.SFTConfig(**plan["config"])  # failed: unexpected keyword argument 'logging_dir'
    assert config.report_to == ["tensorboard"]
    assert plan["environment"]["TENSORBOARD_LOGGING_DIR"] == str(tmp_path / "tb")


@pytest.mark.slow
def test_tensorboard_mlflow_and_wandb_get_the_loss_of_every_step(tiny_model: Path, demo_data: Path,
                                                                  mlflow_store: str, tmp_path: Path) -> None:
    """One CPU run with all three trackers on (HF Trainer's own integrations logging); each
    tracker's reader gives back the loss of every step of training_metrics.jsonl. MLflow: the session's
    SQLite store (created and migrated once; a new store is tests/test_trackers_concurrent.py's)."""
    from thub.runner.metrics import read_metrics
    from thub.testing import trackers

    out, tb, store = tmp_path / "tracked-run", tmp_path / "tb", mlflow_store
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "WANDB_", "MLFLOW_"))}
    environ.update(WANDB_MODE="offline", WANDB_SILENT="true")
    done = subprocess.run(
        [sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", str(tiny_model),
         "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "4",
         "--learning-rate", "5e-3", "--tensorboard-log-dir", str(tb), "--mlflow-tracking-uri", store,
         "--mlflow-experiment-name", "thub-tests", "--wandb-project", "thub-tests", "--json"],
        capture_output=True, text=True, env=environ, timeout=600)
    assert done.returncode == 0, done.stderr + (out / "logs" / "train.log").read_text()
    losses = {line["step"]: line["loss"] for line in read_metrics(out / "training_metrics.jsonl")}
    assert sorted(losses) == [1, 2, 3, 4]
    record = json.loads((out / "trackers.json").read_text())
    assert {name: entry["route"] for name, entry in record.items()} == dict.fromkeys(
        ("tensorboard", "mlflow", "wandb"), "library")

    # TensorBoard: float32 scalars; thub's parameters in the Text tab
    assert trackers.tensorboard_scalars(tb) == pytest.approx(losses, rel=1e-6)
    text = trackers.tensorboard_texts(tb)["thub/parameters/text_summary"]
    assert "| `learning_rate` | `0.005` | flag --learning-rate |" in text

    # MLflow: the run named after the run directory, thub's parameters, their sources as an artifact
    from mlflow import MlflowClient

    run_id = record["mlflow"]["run_id"]
    assert trackers.mlflow_history(store, run_id) == losses
    run = MlflowClient(tracking_uri=store).get_run(run_id)
    assert run.info.run_name == "tracked-run" and run.info.status == "FINISHED"
    # artifacts beside the sqlite store, never in ./mlruns of the directory the run started from
    beside = Path(store.removeprefix("sqlite:///")).parent / "mlartifacts"
    assert run.info.artifact_uri.startswith(beside.as_uri()), run.info.artifact_uri
    assert run.data.params["thub.learning_rate"] == "0.005" and run.data.params["thub.backend"] == "trl"
    artifact = Path(MlflowClient(tracking_uri=store).download_artifacts(run_id, "thub/run_metadata.json",
                                                                        str(tmp_path)))
    assert json.loads(artifact.read_text())["parameters"]["max_steps"] == {"value": 4, "source": "flag --max-steps"}

    # W&B offline: the run directory inside the thub run, history per training step, config.thub
    wandb_dir = Path(record["wandb"]["path"])
    assert wandb_dir.parent == out / "wandb" and record["wandb"]["mode"] == "offline"
    assert trackers.wandb_history(wandb_dir) == losses
    assert trackers.wandb_run(wandb_dir)["display_name"] == "tracked-run"
    assert trackers.wandb_config(wandb_dir)["thub"]["parameters"]["learning_rate"]["source"] == \
        "flag --learning-rate"

    # where the runs went, as `thub history show` prints it
    shown = subprocess.run([sys.executable, "-m", "thub", "history", "show", str(out), "--json"],
                           capture_output=True, text=True, env=environ, timeout=60)
    assert json.loads(shown.stdout)["trackers"]["mlflow"]["run_id"] == run_id
