"""The one atomic write (thub.fileio.write_text_atomic) and what is built on it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from thub.fileio import write_text_atomic
from thub.runner.metrics import truncate_after
from thub.runner.rundir import write_json_atomic


def test_writes_replaces_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    write_text_atomic(target, "a: 1\n")
    write_text_atomic(str(target), "a: 2\n")
    assert target.read_text() == "a: 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "data.jsonl"
    target.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(target, "new \ud800\n")  # a lone surrogate cannot be encoded: fails mid-write
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["data.jsonl"]


def test_parents_only_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "work" / "inner" / "train.yaml"
    with pytest.raises(FileNotFoundError):
        write_text_atomic(target, "x")
    write_text_atomic(target, "x", parents=True)
    assert target.read_text() == "x"


def test_json_variant_is_indented_and_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    write_json_atomic(target, {"status": "succeeded", "path": tmp_path})
    assert target.read_text() == json.dumps({"status": "succeeded", "path": str(tmp_path)}, indent=2) + "\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_truncate_after_drops_the_lines_past_the_step(tmp_path: Path) -> None:
    metrics = tmp_path / "training_metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2, 3, 4)))
    assert truncate_after(metrics, 2) == 2
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["training_metrics.jsonl"]
