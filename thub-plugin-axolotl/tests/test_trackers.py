"""axolotl's tracker runs are named as on every backend: the run directory's name unless
``wandb_run_name`` / ``mlflow_run_name`` is set. axolotl gives HF Trainer one ``run_name`` (its
``wandb_name`` when W&B is on, else ``mlflow_run_name``), so two different names are an error,
never a silent pick."""

from __future__ import annotations

from typing import Any

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "runs/my-run"}


def _config(**params: Any) -> dict[str, Any]:
    registry = load_registry()
    values = resolve(registry, "sft", backend="axolotl", flags={**BASE, **params}, environ={}).values()
    return registry.translate("sft", "axolotl", values)["config"]


def test_unnamed_runs_are_named_after_the_run_directory() -> None:
    assert _config(wandb_project="p")["wandb_name"] == "my-run"
    assert _config(mlflow_tracking_uri="sqlite:///m.db")["mlflow_run_name"] == "my-run"
    both = _config(wandb_project="p", mlflow_tracking_uri="sqlite:///m.db", mlflow_run_name="named")
    assert (both["wandb_name"], both["mlflow_run_name"]) == ("named", "named")


def test_two_different_run_names_are_an_error() -> None:
    with pytest.raises(UsageError, match="wandb_run_name and mlflow_run_name differ"):
        _config(wandb_project="p", mlflow_tracking_uri="sqlite:///m.db", wandb_run_name="a", mlflow_run_name="b")
