"""Real embedding_sft runs on the tiny local embedder, on CPU: every loss, the unified metrics,
the held-out triplet accuracy, SIGTERM -> checkpoint -> --resume, and the refusals (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from thub.runner.metrics import read_metrics
from thub.testing.interrupt import sigterm_then_resume

pytestmark = pytest.mark.slow

METRIC_FIELDS = ("step", "max_steps", "epoch", "timestamp", "learning_rate", "loss", "grad_norm")


def thub(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=timeout)


def common(model: Path, data: Path, out: Path) -> list[str]:
    return ["--backend", "sentence-transformers", "--model-path", str(model), "--data-path", str(data),
            "--ckpt-output-dir", str(out), "--effective-batch-size", "8", "--learning-rate", "1e-3"]


def finished(out: Path, status: str = "succeeded") -> dict[str, Any]:
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == status, result
    lines = read_metrics(out / "training_metrics.jsonl")
    assert lines and [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    for line in lines:
        assert all(field in line for field in METRIC_FIELDS), line
    record = json.loads((out / "thub_run.json").read_text())
    assert record["versions"]["library"]["name"] == "sentence-transformers"
    return result


@pytest.mark.parametrize("loss", ["--loss-type=batch_all_triplet", "--loss-type=batch_hard_triplet",
                                  "--loss-type=mnrl",
                                  "--loss-fn=sentence_transformers.sentence_transformer.losses:BatchSemiHardTripletLoss",
                                  "--batch-sampler=default"])
def test_each_loss_trains_and_reports_held_out_triplet_accuracy(loss: str, tiny_embedder: Path, labelled: Path,
                                                                 tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = thub("train", "embedding_sft", *common(tiny_embedder, labelled, out), "--max-steps", "3",
                "--validation-split", "0.25", loss)
    assert done.returncode == 0, done.stderr
    result = finished(out)
    assert len(read_metrics(out / "training_metrics.jsonl")) == 3
    summary = result["summary"]
    assert summary["global_step"] == 3
    assert summary["held_out_triplets"] > 0
    for key in ("held_out_triplet_accuracy", "held_out_triplet_accuracy_before"):
        assert 0.0 <= summary[key] <= 1.0, summary
    # 18 training rows (6 held out); mnrl trains on the pairs of one label built from them (k texts: k(k-1)/2)
    built = json.loads((out / "built.json").read_text())
    assert summary["train_examples"] == built["examples"]
    if "mnrl" in loss:
        assert built["examples"] > 18 and built["matches"] is None  # nothing to compare pairs with
    else:
        assert built["examples"] == 18 and built["matches"] is True
    assert result["final_checkpoint"] == str(out / "final")
    from sentence_transformers import SentenceTransformer

    assert SentenceTransformer(str(out / "final"), device="cpu").encode(["reset my password"]).shape == (1, 32)


def test_sigterm_checkpoints_and_resume_continues(tiny_embedder: Path, labelled: Path, tmp_path: Path) -> None:
    out = tmp_path / "resume"
    steps = 20
    args = ["train", "embedding_sft", *common(tiny_embedder, labelled, out), "--max-steps", str(steps)]
    sigterm_then_resume(args, out, steps=steps, after=3)
    finished(out)


def test_bad_rows_exit_2_with_file_and_line(tiny_embedder: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine", "label": 1}\n{"text": "", "label": 0}\n{"text": "ok", "label": true}\n')
    done = thub("train", "embedding_sft", *common(tiny_embedder, bad, tmp_path / "out"), "--max-steps", "1")
    assert done.returncode == 2, done.stderr
    assert f"{bad}:2" in done.stderr and "text" in done.stderr
    assert f"{bad}:3" in done.stderr and "label" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "result.json").exists()


def test_a_parameter_the_backend_does_not_honour_exits_2(tiny_embedder: Path, labelled: Path,
                                                         tmp_path: Path) -> None:
    done = thub("train", "embedding_sft", *common(tiny_embedder, labelled, tmp_path / "out"), "--max-steps", "1",
                "--nproc-per-node", "2")
    assert done.returncode == 2, done.stderr
    assert "nproc_per_node" in done.stderr and "Traceback" not in done.stderr
