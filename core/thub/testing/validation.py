"""A real run that validates, for every backend's tests (issue 28): training rows that all answer one
way and held-out rows that answer another, so the held-out loss rises as the model learns and an
early checkpoint is the best; the checks of its evaluation lines, ``best_checkpoint`` and retention.

Used by tests/test_validation_runs.py (trl) and thub-plugin-llamafactory's tests (its managed
environment); a plugin's suite runs it with its backend name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from thub.runner.metrics import EVAL_FIELDS, REQUIRED_FIELDS, read_metrics

__all__ = ["assert_best_checkpoint_kept", "diverging_sets", "validating_run"]


def diverging_sets(folder: Path) -> tuple[Path, Path]:
    """Training rows that all answer one way and held-out rows that answer another: the more the
    model learns the first, the higher its held-out loss, so an early checkpoint is the best."""
    train, held_out = folder / "yes.jsonl", folder / "no.jsonl"
    train.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Question {i}?"},
                                                      {"role": "assistant", "content": "Yes yes yes."}]}) + "\n"
                             for i in range(32)))
    held_out.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Question {i}?"},
                                                         {"role": "assistant", "content": "Nope, never."}]}) + "\n"
                                for i in range(8)))
    return train, held_out


def validating_run(backend: str, model: Path, folder: Path, environ: dict[str, str] | None = None
                   ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """6 steps, evaluated and saved every 2, save_total_limit 1, at a learning rate that overfits."""
    train, held_out = diverging_sets(folder)
    out = folder / "run"
    env = environ or {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    done = subprocess.run(
        [sys.executable, "-m", "thub", "train", "sft", "--backend", backend, "--model-path", str(model),
         "--data-path", str(train), "--validation-data-path", str(held_out), "--validation-frequency", "2",
         "--max-steps", "6", "--save-steps", "2", "--save-total-limit", "1", "--learning-rate", "3e-2",
         "--effective-batch-size", "4", "--ckpt-output-dir", str(out), "--json"],
        capture_output=True, text=True, env=env, timeout=900)
    return done, out


def assert_best_checkpoint_kept(out: Path) -> dict[str, Any]:
    """eval_loss lines at steps 2, 4, 6 (rising), the training lines as ever, checkpoint-2 kept as the best."""
    lines = read_metrics(out / "training_metrics.jsonl")
    evaluations = [line for line in lines if "eval_loss" in line]
    assert [line["step"] for line in evaluations] == [2, 4, 6], evaluations  # once per step
    for line in evaluations:
        assert all(field in line for field in EVAL_FIELDS) and "loss" not in line, line
        assert line["max_steps"] == 6
    assert [line["step"] for line in lines if "loss" in line] == [1, 2, 3, 4, 5, 6]
    assert all(field in line for line in lines if "loss" in line for field in REQUIRED_FIELDS)
    losses = [line["eval_loss"] for line in evaluations]
    assert losses[0] < losses[1] < losses[2], losses  # the held-out loss rises: step 2 is the best
    # an evaluation line comes after its step's training line
    order = [(line["step"], "eval_loss" in line) for line in lines]
    assert order.index((2, True)) == order.index((2, False)) + 1
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    # the last training line, though the run's last line is step 6's evaluation
    assert result["last_metrics"]["step"] == 6 and "loss" in result["last_metrics"]
    best = out / "checkpoints" / "checkpoint-2"
    assert result["best_checkpoint"] == {"path": str(best), "step": 2, "metric": "eval_loss", "value": losses[0]}
    assert (best / "model.safetensors").exists()  # save_total_limit 1 did not delete it
    assert not (out / "checkpoints" / "checkpoint-4").exists()  # an older, worse one was
    return result
