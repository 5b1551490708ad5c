"""Experiment trackers on the trl backend: TrainingArguments built by TRL itself, and real CPU
runs whose TensorBoard, MLflow and W&B (offline) records are read back with each tool's reader."""

from __future__ import annotations

from pathlib import Path

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
