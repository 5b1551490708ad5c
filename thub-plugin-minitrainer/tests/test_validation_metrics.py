"""mini-trainer's validation (val_* in its training line of the step) -> thub's evaluation lines (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

from thub_plugin_minitrainer.metrics import MetricsConverter

from thub.runner.metrics import EVAL_FIELDS, MetricsWriter, read_metrics


def _line(step: int, **extra: object) -> dict:
    """A line as mini_trainer.train writes it (batch_metrics, val_* merged in at a validated step)."""
    return {"step": step, "epoch": 0, "steps_per_epoch": 4, "lr": 1e-5, "loss": 2.0 / step, "num_samples": 8,
            "total_samples_accumulated": 8 * step, "val_loss": None,
            "timestamp": f"2026-11-30T12:00:{step:02d}.000000", **extra}


def test_a_validated_step_gives_its_training_line_and_an_evaluation_line(tmp_path: Path) -> None:
    source, target = tmp_path / "training_metrics_0.jsonl", tmp_path / "training_metrics.jsonl"
    raw = [_line(1), _line(2, val_loss=1.5, val_num_samples=16, val_num_loss_counted_tokens=300,
                           val_num_batches=2), _line(3), _line(4, val_loss=1.25, val_num_samples=16)]
    source.write_text("".join(json.dumps(line) + "\n" for line in raw))
    # logging_steps 3 keeps steps 3 and 4 of the training lines; every evaluation is written
    MetricsConverter(source, MetricsWriter(target), max_steps=4, logging_steps=3).poll()
    lines = read_metrics(target)
    assert [(line["step"], "eval_loss" in line) for line in lines] == [(2, True), (3, False), (4, False), (4, True)]
    first = lines[0]
    assert all(field in first for field in EVAL_FIELDS) and "loss" not in first and "learning_rate" not in first
    assert (first["eval_loss"], first["eval_num_samples"], first["eval_num_batches"]) == (1.5, 16, 2)
    assert first["epoch"] == 0.5 and first["max_steps"] == 4
    assert not any(key.startswith("val_") for line in lines for key in line)
    assert lines[3]["timestamp"] == lines[2]["timestamp"]  # mini-trainer's own time of the step
