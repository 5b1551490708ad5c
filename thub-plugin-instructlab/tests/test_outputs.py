"""instructlab-training's metrics file, checkpoints and crash log turned into thub's outputs."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from thub_plugin_instructlab.outputs import (
    MetricsConverter,
    OutputFollower,
    checkpoint_dirs,
    expected_max_steps,
    metrics_file,
)
from thub_plugin_instructlab.runner import failure_message

from thub.runner.context import RunContext
from thub.runner.metrics import EVAL_FIELDS, REQUIRED_FIELDS, MetricsTail, read_metrics
from thub.runner.rootcause import root_cause_from_file
from thub.runner.rundir import RunDirectory

FIXTURES = Path(__file__).parent / "fixtures"
METRICS = FIXTURES / "training_params_and_metrics_global0.jsonl"


def _context(tmp_path: Path) -> RunContext:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return RunContext(algorithm="sft", backend="instructlab-training", params={"ckpt_output_dir": str(tmp_path)},
                      run_dir=RunDirectory(tmp_path))


def _save(root: Path, name: str) -> Path:
    path = root / "hf_format" / name
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"x")
    return path


def test_expected_max_steps_matches_instructlab_loader() -> None:
    assert expected_max_steps(10, 4, 2) == 6  # ceil(10/4) = 3 batches (drop_last=False) x 2 epochs
    assert expected_max_steps(10, 4, 1, validation_split=0.1) == 3  # 9 train samples
    assert expected_max_steps(3, 32, 1) == 1


def test_conversion_of_a_realistic_metrics_file() -> None:
    lines = MetricsTail(METRICS).read()
    converter = MetricsConverter(max_steps=expected_max_steps(10, 4, 2), num_epochs=2)
    converted = [line for raw in lines if (line := converter.convert(raw)) is not None]
    out = [line for line in converted if "loss" in line]
    assert [line["step"] for line in out] == [1, 2, 3, 4, 5, 6]
    # instructlab's val_loss after step 3: an evaluation line of its own at that step (issue 28)
    [evaluation] = [line for line in converted if "eval_loss" in line]
    assert evaluation == {"step": 3, "max_steps": 6, "epoch": out[2]["epoch"], "eval_loss": 2.9,
                          "eval_num_tokens": 120, "timestamp": evaluation["timestamp"]}
    assert set(EVAL_FIELDS) <= set(evaluation) and converted.index(evaluation) == 3  # after step 3's line
    for line in out:
        assert set(REQUIRED_FIELDS) | {"loss"} <= set(line)
        assert line["max_steps"] == 6
        assert isinstance(line["timestamp"], float)
    first = out[0]
    assert first["loss"] == 2.9 and first["learning_rate"] == 2e-05 * (1 - 1 / 6) and first["epoch"] == 0
    assert "grad_norm" not in first and out[1]["grad_norm"] == 1.5  # null gradnorm is left out
    assert first["samples_seen"] == 4 and first["samples_per_second"] == 12.5
    assert "avg_loss" not in first and "lr" not in first and "rank" not in first
    assert not any("val_loss" in line for line in out)
    assert len(converter.hparams) == 2
    assert converter.step_for_samples == {4: 1, 8: 2, 10: 3, 14: 4, 18: 5, 20: 6}


def test_max_steps_follows_instructlab_once_known() -> None:
    converter = MetricsConverter(max_steps=99, num_epochs=2)
    converter.convert({"num_batches": 5, "total_samples": 20})
    assert converter.max_steps == 10
    line = converter.convert({"step": 1, "epoch": 0, "avg_loss": 1.0, "lr": 1e-5, "num_epoch_steps": 4})
    assert line["max_steps"] == 8


def test_checkpoint_discovery(tmp_path: Path) -> None:
    assert checkpoint_dirs(tmp_path) == []
    late = _save(tmp_path, "samples_20")
    early = _save(tmp_path, "samples_8")
    (tmp_path / "hf_format" / "samples_30").mkdir()  # being written: no weights yet
    assert checkpoint_dirs(tmp_path) == [early, late]
    converter = MetricsConverter(6, 2)
    converter.convert({"step": 2, "epoch": 0, "avg_loss": 1.0, "lr": 1e-5, "samples_seen": 8})
    assert converter.step_of_checkpoint(early) == 2


def test_follower_writes_thub_metrics_and_reports_checkpoints(tmp_path: Path) -> None:
    context = _context(tmp_path)
    source = tmp_path / METRICS.name
    source.write_text('{"stale": "line from a previous attempt"}\n')
    follower = OutputFollower(tmp_path, MetricsConverter(6, 2),
                              emit=lambda line: context.metrics.log(line.pop("step"), **line),
                              on_checkpoint=context.checkpoint, interval=0.05)
    text = METRICS.read_text()
    cut = text.index('"step": 3')  # in the middle of the step-3 line
    with source.open("a") as handle:
        handle.write(text[:cut])
    follower.poll()  # the half-written line is not read yet
    assert [line["step"] for line in read_metrics(context.run_dir.metrics)] == [1, 2]
    _save(tmp_path, "samples_8")
    with source.open("a") as handle:
        handle.write(text[cut:])
    follower.start()  # the thread polls; stop() makes a last pass
    follower.stop()
    written = read_metrics(context.run_dir.metrics)
    lines = [line for line in written if "loss" in line]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert all(line["max_steps"] == 6 for line in written)
    # the validation after step 3: an evaluation line at step 3, after that step's training line
    assert [(line["step"], "eval_loss" in line) for line in written][2:4] == [(3, False), (3, True)]
    events = [json.loads(raw) for raw in context.run_dir.events.read_text().splitlines()]
    assert [(Path(e["path"]).name, e["step"]) for e in events] == [("samples_8", 2)]


def test_root_cause_of_instructlab_failure_on_cpu() -> None:
    cause = root_cause_from_file(FIXTURES / "full_logs_global0.log")
    assert cause[-1] == "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    assert any("torch.cuda.set_device" in line for line in cause)


def test_failure_message_reads_the_node_log(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "full_logs_global0.log", tmp_path / "full_logs_global0.log")
    assert "_cuda_setDevice" in failure_message(tmp_path, 0)
    assert failure_message(tmp_path, 1) is None


def _ilab_attempt(path: Path, steps: list[tuple[int, int]], num_epoch_steps: int = 6, num_epochs: int = 3) -> None:
    """Append one instructlab-training attempt in its own format (main_ds.py): the ``vars(args)``
    line, the ``num_batches`` line, then one line per step as ``(epoch, global_step)``."""
    lines = [{"model_name_or_path": "/m", "num_epochs": num_epochs, "effective_batch_size": 4, "last_step": 0,
              "timestamp": "2026-11-30T10:00:00.000001"},
             {"num_gpus": 1, "num_batches": num_epoch_steps, "total_samples": 4 * num_epoch_steps,
              "timestamp": "2026-11-30T10:00:01.000000"}]
    for epoch, step in steps:
        lines.append({"epoch": epoch, "step": step, "rank": 0, "lr": 1e-5, "avg_loss": 3.0 - 0.01 * step,
                      "samples_seen": 4 * step, "gradnorm": 1.0, "total_samples": 4 * num_epoch_steps,
                      "num_epoch_steps": num_epoch_steps, "timestamp": f"2026-11-30T10:{step:02d}:00.000000"})
    with path.open("a") as out:
        out.writelines(json.dumps(line) + "\n" for line in lines)


def test_a_resumed_run_continues_the_step_numbers_and_logs_each_step_once(tmp_path: Path) -> None:
    """instructlab resumes an epoch-boundary full_state with its step counter back at 1 (main_ds.py:
    ``global_step = 1``, ``last_step`` 0, ``current_epoch`` E+1). 18 steps (3 epochs of 6),
    interrupted during step 8 after full_state/epoch_0: steps 1-7 were logged, the resumed attempt
    prints steps 1-12 of epochs 1-2. thub's metrics: 1..18, each once, the redone 7 from the resume."""
    from thub.runner.metrics import MetricsWriter, read_metrics, truncate_after

    raw = metrics_file(tmp_path)
    thub_metrics = tmp_path / "training_metrics.jsonl"

    def attempt(steps: list[tuple[int, int]]) -> None:
        writer = MetricsWriter(thub_metrics)
        follower = OutputFollower(tmp_path, MetricsConverter(18, 3),
                                  emit=lambda line: writer.log(line.pop("step"), **line),
                                  on_checkpoint=lambda path, step: None, interval=60)
        _ilab_attempt(raw, steps)
        follower.stop()  # the final pass reads everything the attempt wrote

    attempt([(0, s) for s in range(1, 7)] + [(1, 7)])
    assert [line["step"] for line in read_metrics(thub_metrics)] == list(range(1, 8))
    truncate_after(thub_metrics, 0)  # what --resume does without a checkpoint-N (supervisor._resume_point)
    attempt([(1, s) for s in range(1, 7)] + [(2, s) for s in range(7, 13)])
    lines = read_metrics(thub_metrics)
    assert [line["step"] for line in lines] == list(range(1, 19))
    assert all(line["max_steps"] == 18 for line in lines)
    assert lines[6]["timestamp"] == datetime.fromisoformat("2026-11-30T10:01:00").timestamp()  # step 7 of the resume


def test_instructlab_resumes_from_the_checkpoint_thub_decides(tmp_path: Path) -> None:
    """instructlab-training's load_latest_full_state loads the full_state/ entry with the largest number,
    complete or not (a half-written one crashes the resume at its training_metadata.json); thub's
    resume_point moves newer incomplete ones aside, so instructlab's own code loads the newest complete."""
    from types import SimpleNamespace

    import torch
    from instructlab.training.utils import load_latest_full_state
    from thub_plugin_instructlab.runner import resume_point

    full_state = tmp_path / "full_state"
    for name, complete in (("epoch_1", True), ("epoch_2", False)):
        (full_state / name).mkdir(parents=True)
        torch.save({"state": {}}, full_state / name / "optimizer.bin")
        if complete:  # written last, by the main process, after accelerator.save_state
            torch.save({"current_epoch": 1, "samples_seen": 64}, full_state / name / "training_metadata.json")
    loaded: list[Path] = []
    accelerator = SimpleNamespace(load_state=loaded.append)
    with pytest.raises(FileNotFoundError):  # left to itself: the half-written epoch_2, and a crash
        load_latest_full_state(SimpleNamespace(output_dir=str(tmp_path)), accelerator)
    assert loaded == [full_state / "epoch_2"]
    loaded.clear()
    assert resume_point(tmp_path) == (full_state / "epoch_1", 1)
    assert (tmp_path / "full_state.incomplete" / "epoch_2").is_dir() and not (full_state / "epoch_2").exists()
    args = SimpleNamespace(output_dir=str(tmp_path))
    load_latest_full_state(args, accelerator)
    assert loaded == [full_state / "epoch_1"] and args.samples_seen == 64
    assert resume_point(tmp_path / "elsewhere") is None
