"""mini-trainer's metrics file -> thub's stream, checkpoint discovery (fixture with its documented fields)."""

from __future__ import annotations

import json
from pathlib import Path

from thub_plugin_minitrainer.metrics import (
    MetricsConverter,
    convert_line,
    estimate_max_steps,
    hf_checkpoints,
    latest_full_state,
)

from thub.runner.metrics import MetricsWriter, read_metrics

REQUIRED = ("step", "max_steps", "epoch", "loss", "learning_rate", "timestamp")


def mini_trainer_line(step: int, steps_per_epoch: int = 4, batch: int = 8, **extra: object) -> dict:
    """A line as mini_trainer.train writes it (train.py batch_metrics + AsyncStructuredLogger timestamp)."""
    line = {
        "step": step, "epoch": (step - 1) // steps_per_epoch, "steps_per_epoch": steps_per_epoch,
        "lr": 1e-5 * step, "grad_norm": 0.5, "loss": 2.0 / step, "avg_loss_backward": 1.9 / step,
        "num_samples": batch, "num_loss_counted_tokens": 300, "batch_num_loss_counted_tokens": 300,
        "num_total_tokens": 900, "grad_accum": 2, "avg_time_per_minibatch": 0.1, "time_per_batch": 0.25,
        "tokens_per_second": 3600.0, "total_samples_accumulated": batch * step,
        "total_tokens_accumulated": 300 * step, "samples_per_second": 32.0, "peak_memory_usage_GB": 12.5,
        "val_loss": None, "timestamp": f"2026-11-30T12:00:{step:02d}.123456",
    }
    line.update(extra)
    return line


def write_fixture(path: Path, lines: list[dict], partial: str = "") -> None:
    with path.open("a") as handle:
        handle.write("".join(json.dumps(line) + "\n" for line in lines) + partial)


def test_convert_line_fields() -> None:
    line = convert_line(mini_trainer_line(3), max_steps=None, training_mode="epoch", max_epochs=2)
    assert all(line[k] is not None for k in REQUIRED)
    assert (line["step"], line["max_steps"], line["epoch"]) == (3, 8, 0.75)
    assert line["learning_rate"] == 1e-5 * 3 and "lr" not in line
    assert line["peak_memory_gb"] == 12.5 and "val_loss" not in line  # None dropped
    assert isinstance(line["timestamp"], float)
    step_mode = convert_line(mini_trainer_line(3), max_steps=50, training_mode="step")
    assert step_mode["max_steps"] == 50
    with_val = convert_line(mini_trainer_line(4, val_loss=1.25, val_num_samples=16), max_steps=8)
    assert (with_val["val_loss"], with_val["val_num_samples"]) == (1.25, 16)


def test_converter_follows_a_growing_file(tmp_path: Path) -> None:
    source, target = tmp_path / "training_metrics_0.jsonl", tmp_path / "training_metrics.jsonl"
    converter = MetricsConverter(source, MetricsWriter(target), max_steps=7, training_mode="epoch", max_epochs=2)
    assert converter.poll() == []  # no file yet
    half = json.dumps(mini_trainer_line(3))
    write_fixture(source, [mini_trainer_line(1), mini_trainer_line(2)], partial=half[:40])
    assert [line["step"] for line in converter.poll()] == [1, 2]
    with source.open("a") as handle:
        handle.write(half[40:] + "\n")
    write_fixture(source, [mini_trainer_line(s) for s in range(4, 9)])
    converter.poll()
    lines = read_metrics(target)
    assert [line["step"] for line in lines] == list(range(1, 9))
    for line in lines:
        assert all(k in line for k in REQUIRED), line
        assert line["max_steps"] == 8  # steps_per_epoch 4 x 2 epochs (replaces the estimate 7)
    assert lines[-1]["epoch"] == 2.0
    assert converter.samples_to_step[64] == 8


def test_logging_steps_and_resume_offset(tmp_path: Path) -> None:
    source, target = tmp_path / "training_metrics_0.jsonl", tmp_path / "training_metrics.jsonl"
    write_fixture(source, [mini_trainer_line(s) for s in (1, 2)])
    offset = source.stat().st_size  # a resumed run appends to the same file
    write_fixture(source, [mini_trainer_line(s) for s in (3, 4, 5, 6, 7, 8)])
    MetricsConverter(source, MetricsWriter(target), max_steps=None, max_epochs=2, logging_steps=3,
                     start_offset=offset).poll()
    assert [line["step"] for line in read_metrics(target)] == [3, 6, 8]  # every 3rd and the last


def test_estimate_max_steps() -> None:
    assert estimate_max_steps(64, 8, "epoch", 3, 0) == 24
    assert estimate_max_steps(65, 8, "epoch", 1, 0) == 9  # drop_last=False
    assert estimate_max_steps(64, 8, "step", 3, 5) == 5


def test_checkpoint_discovery(tmp_path: Path) -> None:
    root = tmp_path / "hf_format"
    for name, files in (("samples_16", ("model.safetensors", "config.json", "tokenizer_config.json")),
                        ("samples_48.0", ("config.json", "tokenizer.json")),
                        ("samples_32_best_val_loss", ("config.json", "tokenizer_config.json")),
                        ("samples_64", ("model.safetensors",)),  # still being written
                        ("other", ("config.json",))):
        (root / name).mkdir(parents=True)
        for file in files:
            (root / name / file).write_text("{}")
    found = [(p.name, n, best) for p, n, best in hf_checkpoints(tmp_path)]
    assert found == [("samples_16", 16, False), ("samples_32_best_val_loss", 32, True), ("samples_48.0", 48, False)]
    assert hf_checkpoints(tmp_path / "missing") == []


def test_full_state_discovery(tmp_path: Path) -> None:
    assert latest_full_state(tmp_path) is None
    for step in (3, 12):
        (tmp_path / "full_state_checkpoints" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "full_state_checkpoints" / f"step_{step}" / "training_state.pt").write_text("x")
    (tmp_path / "full_state_checkpoints" / "step_20").mkdir()  # incomplete: no training_state.pt
    path, step = latest_full_state(tmp_path)
    assert (path.name, step) == ("step_12", 12)
