"""Training Hub 0.11.2's embedding_sft calls and command lines, through thub's compat table (dry runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import thub
from thub.errors import UsageError


def _th_cli(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", "embedding-sft", *args], capture_output=True, text=True,
                          env=environ, timeout=300)


def test_command_line_maps_training_hubs_names(labelled: Path, tmp_path: Path) -> None:
    done = _th_cli("--model-path", "m", "--data-path", str(labelled), "--ckpt-output-dir", str(tmp_path / "o"),
                   "--batch-size", "8", "--loss-type", "mnrl", "--warmup-ratio", "0.2", "--eval-data-path",
                   str(labelled), "--text-column", "text", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    params = plan["parameters"]
    assert plan["backend"] == "sentence-transformers"  # Training Hub's default backend
    assert params["effective_batch_size"]["value"] == 8
    assert "training-hub name batch_size → effective_batch_size" in params["effective_batch_size"]["source"]
    assert params["validation_data_path"]["value"] == str(labelled)
    args = plan["translation"]["args"]
    assert (args["per_device_train_batch_size"], args["warmup_steps"], args["batch_sampler"]) == (8, 0.2,
                                                                                                  "no_duplicates")
    assert "thub train embedding_sft --backend sentence-transformers" in done.stderr


def test_another_column_name_is_refused_with_the_rename(labelled: Path, tmp_path: Path) -> None:
    done = _th_cli("--model-path", "m", "--data-path", str(labelled), "--ckpt-output-dir", str(tmp_path / "o"),
                   "--label-column", "category", "--dry-run")
    assert done.returncode == 2 and "rename 'category' to 'label'" in done.stderr and "Traceback" not in done.stderr


def test_python_api_takes_a_loss_class_and_refuses_a_loss_object(labelled: Path, tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer import losses

    from thub_builtins.training_hub import rules

    fields = {"loss_fn": None}
    converted = rules.rule_for("loss_fn", fields).convert(losses.BatchSemiHardTripletLoss, {})
    assert converted["loss_fn"].endswith(":BatchSemiHardTripletLoss")
    with pytest.raises(UsageError, match="loss object .* is bound to a model"):
        thub.embedding_sft("m", str(labelled), str(tmp_path / "o"), loss_fn=object())


@pytest.mark.slow
def test_training_hubs_command_line_and_python_call_train(tiny_embedder: Path, labelled: Path, tmp_path: Path) -> None:
    """``thub embedding-sft ...`` and ``thub.embedding_sft(...)`` with Training Hub's names train for real."""
    out = tmp_path / "cli"
    done = _th_cli("--model-path", str(tiny_embedder), "--data-path", str(labelled), "--ckpt-output-dir", str(out),
                   "--batch-size", "8", "--num-epochs", "1", "--learning-rate", "1e-3")
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and result["summary"]["global_step"] == 3  # 24 rows, 8 a batch

    api_out = tmp_path / "api"
    returned = thub.embedding_sft(str(tiny_embedder), str(labelled), str(api_out), loss_type="batch_hard_triplet",
                                  num_epochs=1, batch_size=12, progress=False)
    assert returned["status"] == "succeeded"
    assert json.loads((api_out / "result.json").read_text())["summary"]["global_step"] == 2
    assert (api_out / "final" / "modules.json").exists()
