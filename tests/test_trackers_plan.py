"""``thub train ... --dry-run`` shows, per tracker the run turns on, which process logs it (the
backend's library or thub's parent sink) and where its run goes; ``--json`` and ``thub.dry_run``
carry the same ``trackers`` entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import thub
from thub.manager import load_registry


def test_dry_run_plan_names_each_trackers_route_and_destination(tmp_path: Path, demo_data: Path) -> None:
    if "mini-trainer" not in load_registry().backends:
        pytest.skip("mini-trainer plugin not installed")
    params = {"model_path": "m", "data_path": str(demo_data / "chat.jsonl"),
              "ckpt_output_dir": str(tmp_path / "my-run"), "tensorboard_log_dir": str(tmp_path / "tb"),
              "wandb_project": "proj",
              "mlflow_tracking_uri": "https://me:s3cret@mlflow.example/"}
    plan = thub.dry_run("sft", backend="mini-trainer", **params)
    assert plan["trackers"]["tensorboard"] == {"route": "thub", "logged_by": "thub (parent process)",
                                               "where": str(tmp_path / "tb")}
    assert plan["trackers"]["mlflow"]["route"] == "library"
    assert plan["trackers"]["mlflow"]["logged_by"] == "mini-trainer's library"
    assert plan["trackers"]["mlflow"]["where"] == "https://<redacted>@mlflow.example/ (run my-run)"
    assert plan["trackers"]["wandb"]["where"].startswith("project proj (run my-run")

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "WANDB_", "MLFLOW_"))}
    args = [f"--{k.replace('_', '-')}={v}" for k, v in params.items()]
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "mini-trainer", "--dry-run",
                           *args], capture_output=True, text=True, env={**environ, "COLUMNS": "200"}, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Experiment trackers" in out
    line = next(x for x in out.splitlines() if "tensorboard" in x and "parent" in x)
    assert str(tmp_path / "tb") in line
    assert "s3cret" not in out


def test_no_tracker_no_section() -> None:
    chat = str(Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl")  # the plan validates the data
    plan = thub.dry_run("sft", backend="trl", model_path="m", data_path=chat, ckpt_output_dir="out")
    assert "trackers" not in plan
