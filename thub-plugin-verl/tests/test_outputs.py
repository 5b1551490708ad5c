"""verl's file logger and checkpoint layout turned into thub's outputs."""

from __future__ import annotations

import json
from pathlib import Path

from thub_plugin_verl.outputs import MetricsConverter, OutputFollower, checkpoint_dirs


def line(step: int, **data) -> str:
    return json.dumps({"step": step, "data": {"critic/score/mean": 0.5, "training/epoch": 1, **data}}) + "\n"


def test_converter_maps_and_skips_repeated_steps() -> None:
    converter = MetricsConverter(max_steps=3)
    first = converter.convert(json.loads(line(1, **{"actor/pg_loss": 0.2, "actor/lr": 1e-6,
                                                    "actor/grad_norm": float("nan")})))
    assert {k: first[k] for k in ("step", "max_steps", "epoch", "mean_reward", "loss", "learning_rate")} == {
        "step": 1, "max_steps": 3, "epoch": 1, "mean_reward": 0.5, "loss": 0.2, "learning_rate": 1e-6}
    assert "grad_norm" not in first  # NaN dropped
    assert converter.convert(json.loads(line(1))) is None
    assert converter.convert({"no": "data"}) is None
    assert converter.convert(json.loads(line(5)))["max_steps"] == 5  # never below the step


def test_follower_survives_truncation_and_partial_lines(tmp_path: Path) -> None:
    metrics, checkpoints = tmp_path / "m.jsonl", tmp_path / "ckpt"
    got, saved = [], []
    follower = OutputFollower(metrics, checkpoints, MetricsConverter(4), got.append, lambda p, s: saved.append(s))
    metrics.write_text(line(1) + line(2) + '{"step": 3, "da')
    follower.poll()
    assert [m["step"] for m in got] == [1, 2]
    metrics.write_text(line(2) + line(3))  # a resumed verl truncates and starts again
    (checkpoints / "global_step_2" / "actor").mkdir(parents=True)
    (checkpoints / "global_step_4" / "actor").mkdir(parents=True)  # being written: not complete yet
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    follower.poll()
    assert [m["step"] for m in got] == [1, 2, 3]
    assert saved == [2]
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("4")
    follower.stop()
    assert saved == [2, 4]
    assert [s for s, _ in checkpoint_dirs(checkpoints)] == [2, 4]
