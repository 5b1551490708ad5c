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
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from thub_plugin_instructlab.runner import run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    params = {"model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl"),
              "ckpt_output_dir": str(run_dir),
              "data_format": "auto", "num_epochs": 1, "effective_batch_size": 4, "learning_rate": 1e-5,
              "max_seq_len": 256, "seed": 1, "document_column_name": "document", "unmask_messages": False}
    context = RunContext("sft", "instructlab-training", params, RunDirectory(run_dir))
    with pytest.raises(RuntimeError, match="instructlab-training failed: .*_cuda_setDevice"):
        run(context)
    out = capsys.readouterr().out
    # the demo chat has many samples under 20 tokens: counted and warned about before the launch
    assert "thub: WARNING: instructlab-training dropped" in out and "shorter than 20 tokens" in out
    kept = len((run_dir / "data" / "data.jsonl").read_text().splitlines())
    assert f"thub: data: {kept} of 64 samples kept" in out
    assert (run_dir / "full_logs_global0.log").exists()
    assert not (run_dir / "training_metrics.jsonl").exists()  # no step ran
    assert json.loads((run_dir / "data" / "thub_input.jsonl").read_text().splitlines()[0])["messages"]
