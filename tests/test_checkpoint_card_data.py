"""The model card's data table (thub.checkpoint.card.data_files): rows as thub reads them (a CSV record
may span lines), files recorded relative to where training ran found from anywhere, a Hugging Face
dataset id named as one (no file to hash) rather than as a missing file."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest

from thub.checkpoint.card import data_files


def test_csv_rows_are_records_a_relative_path_is_found_and_a_dataset_id_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launched = tmp_path / "project"
    launched.mkdir()
    with (launched / "train.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["messages"])
        writer.writerow(['[{"role": "user", "content": "two\\nlines, and a comma"}]'])
        writer.writerow(['[{"role": "user", "content": "Grüße\nüber zwei Zeilen"}]'])  # a newline inside quotes
    from thub.data.training import source_digests

    monkeypatch.chdir(launched)  # what training recorded, where it ran
    keys, plain = source_digests({"data_path": "train.csv"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    record = {"working_dir": str(launched),
              "data": {"files": {**keys, "org/dataset": None, "gone.jsonl": None},
                       "sha256": {**plain, "org/dataset": None, "gone.jsonl": None}}}
    csv_file, dataset, gone = data_files(record, {})
    assert csv_file == {"path": "train.csv", "rows": 2, "exists": True,
                        "sha256": hashlib.sha256((launched / "train.csv").read_bytes()).hexdigest()}
    assert dataset["dataset"] is True and dataset["rows"] is None and dataset["sha256"] is None
    assert gone == {"path": "gone.jsonl", "rows": None, "sha256": None, "exists": False}
