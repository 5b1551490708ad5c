"""``thub doctor --config FILE``: the trackers a run's config turns on are checked as ``thub train``
checks them (the same preflight), exit 1 with the fix named; a bad config file is exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _thub(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "WANDB_", "MLFLOW_"))}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env={**environ, **env}, timeout=600)  # a hang guard


def _config(tmp_path: Path, tiny_model: Path, demo_data: Path, **trackers: str) -> Path:
    path = tmp_path / "run.yaml"
    values = {"algorithm": "sft", "backend": "trl", "model_path": str(tiny_model),
              "data_path": str(demo_data / "chat.jsonl"), "ckpt_output_dir": str(tmp_path / "out"), **trackers}
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in values.items()))
    return path


@pytest.mark.needs_module("mlflow")
def test_doctor_config_names_an_unreachable_store_and_a_missing_package(tmp_path: Path, tiny_model: Path,
                                                                        demo_data: Path, without_wandb: Path) -> None:
    config = _config(tmp_path, tiny_model, demo_data, mlflow_tracking_uri="http://127.0.0.1:9", wandb_project="p")
    done = _thub("doctor", "--config", str(config), "core.trackers", "--json", "--timeout", "600",
                 PYTHONPATH=str(without_wandb),
                 WANDB_MODE="offline")
    assert done.returncode == 1, done.stdout + done.stderr
    check = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "core.trackers")
    assert check["status"] == "fail", check
    assert "MLflow server http://127.0.0.1:9 is unreachable" in check["summary"]
    assert "the wandb package is not installed" in check["summary"]
    assert "pip install wandb" in check["fix"] and "mlflow server" in check["fix"]

    # the same preflight as `thub train --config` (which refuses the launch, exit 2)
    train = _thub("train", "sft", "--config", str(config), PYTHONPATH=str(without_wandb), WANDB_MODE="offline")
    assert train.returncode == 2 and "MLflow server http://127.0.0.1:9 is unreachable" in train.stderr


@pytest.mark.needs_module("tensorboard", "mlflow")
def test_doctor_config_ok_and_bad_file(tmp_path: Path, tiny_model: Path, demo_data: Path) -> None:
    config = _config(tmp_path, tiny_model, demo_data, tensorboard_log_dir=str(tmp_path / "tb"),
                     mlflow_tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    done = _thub("doctor", "--config", str(config), "core.trackers", "--json", "--timeout", "600")  # hang guard
    assert done.returncode == 0, done.stdout + done.stderr
    check = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "core.trackers")
    assert check["summary"] == "TensorBoard, MLflow ready", check
    assert "logged by trl's library" in "\n".join(check["details"])  # the backend from the config file

    broken = tmp_path / "broken.yaml"
    broken.write_text("tensorboard_log_dir: [unclosed\n")
    bad = _thub("doctor", "--config", str(broken), "core.trackers")
    assert bad.returncode == 2 and str(broken) in bad.stderr and "Traceback" not in bad.stderr
