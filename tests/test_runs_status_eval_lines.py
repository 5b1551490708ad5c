"""A run that evaluates (``validation_*``) ends its metrics file on an evaluation line (``eval_loss``,
no ``loss``): ``thub runs status`` and ``thub history`` still show where training is and its loss,
and status adds the last held-out loss."""

from __future__ import annotations

import json
from pathlib import Path

LINES = [{"step": 1, "max_steps": 2, "loss": 2.5, "learning_rate": 1e-3, "epoch": 0.5, "timestamp": 100.0},
         {"step": 2, "max_steps": 2, "loss": 1.5, "learning_rate": 1e-3, "epoch": 1.0, "timestamp": 101.0},
         {"step": 2, "max_steps": 2, "epoch": 1.0, "timestamp": 102.0, "eval_loss": 3.25}]


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "thub_run.json").write_text(json.dumps({
        "schema_version": 1, "algorithm": "sft", "backend": "trl", "created": 99.0,
        "parameters": {"model_path": {"value": "m", "source": "flag"}}}))
    (run / "training_metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return run


def test_status_shows_the_training_loss_and_the_last_eval_loss(thub_cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    done = thub_cli("runs", "status", str(run), "--json")
    assert done.exit_code == 0, done.stderr
    progress = done.json()["progress"]
    assert progress["loss"] == 1.5 and progress["learning_rate"] == 1e-3
    assert progress["eval_loss"] == 3.25 and progress["eval_step"] == 2
    text = thub_cli("runs", "status", str(run)).stdout
    assert "loss 1.5" in text and "eval_loss 3.25 (step 2)" in text


def test_history_reads_the_last_training_line(thub_cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    done = thub_cli("history", "show", str(run), "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["final_value"] == 1.5, done.json()
