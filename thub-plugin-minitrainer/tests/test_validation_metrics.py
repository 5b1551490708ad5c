"""mini-trainer's validation (val_* in its training line of the step) -> thub's evaluation lines (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

from thub_plugin_minitrainer.metrics import MetricsConverter

from thub.runner.metrics import EVAL_FIELDS, MetricsWriter, read_metrics


def _line(step: int, **extra: object) -> dict:
    """A line as mini_trainer.train writes it (batch_metrics, val_* merged in at a validated step)."""
    return {"step": step, "epoch": 0, "steps_per_epoch": 4, "lr": 1e-5, "loss": 2.0 / step, "num_samples": 8,
            "total_samples_accumulated": 8 * step, "val_loss": None,
            "timestamp": f"2026-11-30T12:00:{step:02d}.000000", **extra}


def test_a_validated_step_gives_its_training_line_and_an_evaluation_line(tmp_path: Path) -> None:
    source, target = tmp_path / "training_metrics_0.jsonl", tmp_path / "training_metrics.jsonl"
    raw = [_line(1), _line(2, val_loss=1.5, val_num_samples=16, val_num_loss_counted_tokens=300,
                           val_num_batches=2), _line(3), _line(4, val_loss=1.25, val_num_samples=16)]
    source.write_text("".join(json.dumps(line) + "\n" for line in raw))
    # logging_steps 3 keeps steps 3 and 4 of the training lines; every evaluation is written
    MetricsConverter(source, MetricsWriter(target), max_steps=4, logging_steps=3).poll()
    lines = read_metrics(target)
    assert [(line["step"], "eval_loss" in line) for line in lines] == [(2, True), (3, False), (4, False), (4, True)]
    first = lines[0]
    assert all(field in first for field in EVAL_FIELDS) and "loss" not in first and "learning_rate" not in first
    assert (first["eval_loss"], first["eval_num_samples"], first["eval_num_batches"]) == (1.5, 16, 2)
    assert first["epoch"] == 0.5 and first["max_steps"] == 4
    assert not any(key.startswith("val_") for line in lines for key in line)
    assert lines[3]["timestamp"] == lines[2]["timestamp"]  # mini-trainer's own time of the step


def test_the_held_out_file_is_prepared_and_read_by_mini_trainers_loader(tiny_model: Path, demo_data: Path,
                                                                        tmp_path: Path) -> None:
    """validation_data_path: thub tokenizes it as the training rows (validation.jsonl beside data.jsonl),
    mini-trainer's own get_data_loader reads it as the validation loader and its TrainingArgs take it."""
    import pytest

    pytest.importorskip("mini_trainer")
    from mini_trainer.sampler import get_data_loader
    from thub_plugin_minitrainer.native import build
    from thub_plugin_minitrainer.runner import prepare_data
    from thub_plugin_minitrainer.translate import translate

    from thub.config.resolve import resolve
    from thub.manager import load_registry
    from thub.runner.context import RunContext
    from thub.runner.rundir import RunDirectory

    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(line + "\n" for line in (demo_data / "chat.jsonl").read_text().splitlines()[:5]))
    flags = {"model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl"),
             "ckpt_output_dir": str(tmp_path / "run"), "effective_batch_size": 8, "max_seq_len": 256,
             "max_tokens_per_gpu": 512, "validation_data_path": str(held_out), "validation_frequency": 2}
    params = resolve(load_registry(), "sft", backend="mini-trainer", flags=flags, environ={}).values()
    plan = translate("sft", params, environ={})
    train = plan["training_args"]
    assert train["validation_data_path"] == str(Path(train["data_path"]).with_name("validation.jsonl"))
    assert (train["validation_split"], train["validation_frequency"]) == (0.0, 2)
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.path.mkdir(parents=True, exist_ok=True)
    assert prepare_data(RunContext(algorithm="sft", backend="mini-trainer", params=params, run_dir=run_dir),
                        plan) == 64  # every training row: none held out of data_path
    rows = [json.loads(line) for line in Path(train["validation_data_path"]).read_text().splitlines()]
    assert len(rows) == 5 and all(row["labels"][0] == -100 for row in rows)  # assistant-only, as data.jsonl
    _train, validation = get_data_loader(train["data_path"], batch_size=8, max_tokens_per_gpu=512, seed=42, rank=0,
                                         world_size=1, validation_data_path=train["validation_data_path"])
    assert validation is not None and sum(mb["num_samples"] for batch in validation for mb in batch) == 5
    assert build(plan)[1].validation_data_path == train["validation_data_path"]
