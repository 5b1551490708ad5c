"""Read a run back from each tracker with the tracker's own reader (for backend tests).

* TensorBoard: ``EventAccumulator`` over the log directory.
* MLflow: ``MlflowClient.get_metric_history`` on the store.
* W&B (offline): ``wandb leet inspect --json``, wandb's reader of a run's ``.wandb`` log.

Each returns ``{step: value}`` so a test compares it with ``training_metrics.jsonl``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def tensorboard_scalars(log_dir: str | Path, tag: str = "train/loss") -> dict[int, float]:
    """Scalars of ``tag`` by step, from every event file in ``log_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return {event.step: event.value for event in accumulator.Scalars(tag)}


def tensorboard_texts(log_dir: str | Path) -> dict[str, str]:
    """Text summaries (tag -> text) in ``log_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    texts = {}
    for tag in accumulator.Tags()["tensors"]:
        for event in accumulator.Tensors(tag):
            if event.tensor_proto.string_val:
                texts[tag] = event.tensor_proto.string_val[0].decode()
    return texts


def mlflow_history(tracking_uri: str, run_id: str, key: str = "loss") -> dict[int, float]:
    from mlflow import MlflowClient

    return {m.step: m.value for m in MlflowClient(tracking_uri=tracking_uri).get_metric_history(run_id, key)}


def wandb_records(run_path: str | Path) -> list[dict[str, Any]]:
    """Every record of an offline run directory (``offline-run-*``), as wandb's reader prints them."""
    wandb = Path(sys.executable).with_name("wandb")
    command = [str(wandb)] if wandb.exists() else [sys.executable, "-m", "wandb"]
    done = subprocess.run([*command, "leet", "inspect", "--json", str(run_path)], capture_output=True, text=True,
                          check=True, timeout=120, env={**os.environ, "WANDB_SILENT": "true"})
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def wandb_history(run_path: str | Path, key: str = "train/loss",
                  step_key: str = "train/global_step") -> dict[int, float]:
    """``key`` by training step (``step_key``, as HF Trainer and thub log it) from the history."""
    found = {}
    for record in wandb_records(run_path):
        item = record.get("history", {}).get("item", {}) if record.get("type") == "history" else {}
        if key in item and step_key in item:
            found[int(item[step_key])] = float(item[key])
    return found


def wandb_run(run_path: str | Path) -> dict[str, Any]:
    """The ``run`` record (name, project, config updates at start) of an offline run."""
    return next(r["run"] for r in wandb_records(run_path) if r.get("type") == "run")


def wandb_config(run_path: str | Path) -> dict[str, Any]:
    """The run's config: the start record's and every later ``config`` update, merged."""
    config: dict[str, Any] = {}
    for record in wandb_records(run_path):
        if record.get("type") == "run":
            config.update(record["run"].get("config", {}).get("update", {}))
        elif record.get("type") == "config":
            config.update(record["config"].get("update", {}))
    return config
