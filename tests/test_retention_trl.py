"""``save_total_limit`` on a real CPU trl run (issue 27 item 6): TRL's Trainer rotates its own
``checkpoint-N`` folders; the final model stays; ``--resume`` continues from the newest kept one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

ROOT = Path(__file__).parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.needs_backend("trl")]


def thub(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=600, cwd=ROOT)


def _checkpoints(out: Path) -> list[str]:
    return sorted((p.name for p in (out / "checkpoints").glob("checkpoint-*")), key=lambda n: int(n.split("-")[1]))


def test_trl_keeps_the_newest_two_and_the_final_model_and_resumes(tiny_model: Path, demo_data: Path,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
            str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--effective-batch-size", "2",
            "--save-steps", "1", "--save-total-limit", "2"]
    done = thub(*args, "--max-steps", "5")
    assert done.returncode == 0, done.stderr
    assert _checkpoints(out) == ["checkpoint-4", "checkpoint-5"]
    assert (out / "final" / "config.json").is_file()
    record = json.loads((out / "thub_run.json").read_text())
    assert record["parameters"]["save_total_limit"]["value"] == 2
    # as if killed after step 5: --resume continues from checkpoint-5, the newest kept
    (out / "result.json").unlink()
    resumed = thub(*args, "--max-steps", "7", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr and "checkpoint-5" in resumed.stderr
    assert _checkpoints(out) == ["checkpoint-6", "checkpoint-7"]
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == list(range(1, 8))
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    assert (out / "final" / "config.json").is_file()
