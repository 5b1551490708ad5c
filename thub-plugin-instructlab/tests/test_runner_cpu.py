"""The runner on a CPU machine, up to instructlab-training's CUDA boundary (the GPU part: scripts/gpu_smoke.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thub.runner.context import RunContext
from thub.runner.rundir import RunDirectory
from thub.selection import cuda_visible

pytest.importorskip("instructlab.training")


@pytest.mark.slow
@pytest.mark.skipif(cuda_visible(), reason="checks the failure on a machine without an NVIDIA GPU")
def test_launch_on_cpu_reports_instructlab_root_cause(tiny_model: Path, demo_data: Path, tmp_path: Path,
                                                      mlflow_store: str, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Also the trackers: instructlab-training's own rank-0 process opens its MLflow and W&B runs
    (its hparams record) before the CUDA boundary; they carry thub's parameters."""
    from thub_plugin_instructlab.runner import run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    params = {"model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl"),
              "ckpt_output_dir": str(run_dir),
              "data_format": "auto", "num_epochs": 1, "effective_batch_size": 4, "learning_rate": 1e-5,
              "max_seq_len": 256, "seed": 1, "document_column_name": "document", "unmask_messages": False,
              "mlflow_tracking_uri": mlflow_store, "wandb_project": "thub-tests",
              "tensorboard_log_dir": str(tmp_path / "tb")}
    for name in ("MLFLOW_RUN_ID", "WANDB_SWEEP_PARAM_PATH"):
        monkeypatch.setenv(name, "")  # the runner sets them in os.environ: removed again after the test
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)  # a wandb.init earlier in this test process left it
    monkeypatch.setenv("WANDB_SILENT", "true")
    record = {"algorithm": "sft", "backend": "instructlab-training",
              "parameters": {k: {"value": v, "source": "test"} for k, v in params.items()}}
    context = RunContext("sft", "instructlab-training", params, RunDirectory(run_dir), record=record)
    with pytest.raises(RuntimeError, match="instructlab-training failed: .*_cuda_setDevice"):
        run(context)
    from mlflow import MlflowClient

    from thub.testing import trackers

    mlflow_run = MlflowClient(tracking_uri=mlflow_store).get_run(
        json.loads((run_dir / "trackers.json").read_text())["mlflow"]["run_id"])
    assert mlflow_run.data.params["thub.backend"] == "instructlab-training"
    assert mlflow_run.data.params["model_name_or_path"] == str(tiny_model)  # instructlab's own, same run
    offline = next((run_dir / "wandb").glob("offline-run-*"))
    assert trackers.wandb_config(offline)["thub"]["parameters"]["learning_rate"] == {"value": 1e-5, "source": "test"}
    assert "thub/parameters/text_summary" in trackers.tensorboard_texts(tmp_path / "tb")
    out = capsys.readouterr().out
    # the demo chat has many samples under 20 tokens: counted and warned about before the launch
    assert "thub: WARNING: instructlab-training dropped" in out and "shorter than 20 tokens" in out
    kept = len((run_dir / "data" / "data.jsonl").read_text().splitlines())
    assert f"thub: data: {kept} of 64 samples kept" in out
    assert (run_dir / "full_logs_global0.log").exists()
    assert not (run_dir / "training_metrics.jsonl").exists()  # no step ran
    assert json.loads((run_dir / "data" / "thub_input.jsonl").read_text().splitlines()[0])["messages"]
