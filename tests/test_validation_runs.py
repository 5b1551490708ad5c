"""Held-out loss during a real trl run on the tiny model (issue 28 items 4-5): ``validation_data_path``
gives ``eval_loss`` lines in ``training_metrics.jsonl``, and with ``save_total_limit 1`` the checkpoint
with the lowest ``eval_loss``, an earlier one, survives TRL's rotation and is result.json's
``best_checkpoint``. (LLaMA-Factory: thub-plugin-llamafactory/tests/test_validation_training.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics
from thub.testing.validation import assert_best_checkpoint_kept, validating_run

pytestmark = pytest.mark.slow


def test_trl_eval_loss_lines_and_the_best_checkpoint_survives_rotation(tiny_model: Path, tmp_path: Path) -> None:
    done, out = validating_run("trl", tiny_model, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = assert_best_checkpoint_kept(out)
    assert json.loads(done.stdout)["best_checkpoint"] == result["best_checkpoint"]
    assert result["final_checkpoint"] == str(out / "final")


def test_a_run_without_validation_names_no_best_checkpoint(tiny_model: Path, demo_data: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "plain"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path",
                           str(tiny_model), "--data-path", str(demo_data / "chat.jsonl"), "--max-steps", "2",
                           "--save-steps", "1", "--ckpt-output-dir", str(out), "--json"],
                          capture_output=True, text=True, env=environ, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["best_checkpoint"] is None
    assert not any("eval_loss" in line for line in read_metrics(out / "training_metrics.jsonl"))
