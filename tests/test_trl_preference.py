"""Preference tuning (``dpo``, ``kto``) on the trl backend, real on CPU with the tiny local model:
the translation to DPOConfig/KTOConfig, the pairs thub hands TRL under the ``overlong`` policy,
the metrics stream's preference fields, and real runs (margins rise, SIGTERM + ``--resume``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from thub.runner.context import RunContext
from thub.runner.metrics import PREFERENCE_FIELDS, read_metrics
from thub.runner.rundir import RunDirectory


def test_metrics_stream_keeps_the_preference_fields(tmp_path: Path) -> None:
    """TRL logs ``rewards/chosen`` ...; the stream keeps those four ``/`` names (one schema) and
    still leaves the per-function GRPO names out."""
    from thub.runner.hf_trainer import metrics_callback

    run = RunDirectory(tmp_path / "run")
    run.path.mkdir(parents=True)
    callback = metrics_callback(RunContext("dpo", "trl", {}, run))
    logs = {"loss": 0.69, "learning_rate": 1e-6, "rewards/chosen": 0.02, "rewards/rejected": -0.01,
            "rewards/margins": 0.03, "rewards/accuracies": 0.75, "rewards/math/mean": 1.0, "logps/chosen": -40.0}
    state = SimpleNamespace(is_world_process_zero=True, epoch=0.5, global_step=3, max_steps=6)
    callback.on_log(None, state, None, logs=logs)
    (line,) = read_metrics(run.metrics)
    assert {name: line.get(name) for name in PREFERENCE_FIELDS} == {name: logs[name] for name in PREFERENCE_FIELDS}
    assert "rewards/math/mean" not in line and "logps/chosen" not in line and line["loss"] == 0.69
