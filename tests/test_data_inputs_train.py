"""Each data input Training Hub 0.11.2 takes for sft trains the demo on trl (issue 30 item 4, "done
when"): the demo chat rows as a CSV (messages as JSON text), a Parquet file, a ``save_to_disk``
folder and a folder of shards (a Hub dataset id read offline from a local datasets cache:
tests/test_data_inputs_hub.py)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("datasets", "pandas"), pytest.mark.needs_backend("trl")]


def _rows(demo_data: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (demo_data / "chat.jsonl").read_text().splitlines() if line.strip()]


def _data(kind: str, rows: list[dict[str, Any]], tmp_path: Path) -> str:
    """``data_path`` for ``rows`` as ``kind``."""
    import datasets

    if kind == "csv":
        path = tmp_path / "chat.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["messages"])
            writer.writerows([json.dumps(row["messages"], ensure_ascii=False)] for row in rows)
        return str(path)
    if kind == "parquet":
        datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "chat.parquet"))
        return str(tmp_path / "chat.parquet")
    if kind == "save_to_disk":
        datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
        return str(tmp_path / "saved")
    for i, part in enumerate((rows[: len(rows) // 2], rows[len(rows) // 2:])):
        shard = tmp_path / "shards" / f"train-{i:05d}.jsonl"
        shard.parent.mkdir(exist_ok=True)
        shard.write_text("".join(json.dumps(row) + "\n" for row in part), encoding="utf-8")
    return str(tmp_path / "shards")


@pytest.mark.parametrize("kind", ["csv", "parquet", "save_to_disk", "shards"])
def test_sft_trains_on_trl(kind: str, tmp_path: Path, tiny_model: Path, demo_data: Path) -> None:
    rows = _rows(demo_data)
    data_path = _data(kind, rows, tmp_path)
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path",
                           str(tiny_model), "--data-path", data_path, "--ckpt-output-dir", str(run),
                           "--max-steps", "2", "--learning-rate", "5e-2"],
                          capture_output=True, text=True, timeout=900)  # the timeout: a hang guard
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "succeeded", result
    assert (Path(result["final_checkpoint"]) / "config.json").is_file()
    assert f"{len(rows)} examples" in done.stdout + done.stderr  # every row was read and trained from
