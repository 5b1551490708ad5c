"""A folder of data files as ``data_path`` (issue 30 item 4): Training Hub 0.11.2 passes a
directory to ``datasets.load_dataset(folder, split="train")``, which takes the files named for
the train split (or every file when none is). thub reads the same files, each with its own reader,
so every row keeps its ``file:LINE``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from thub.data.loading import load_dataset_rows
from thub.data.problems import Problems
from thub.data.readers import directory_files, iter_records
from thub.errors import UsageError

pytestmark = pytest.mark.needs_module("datasets")


def _chat(answer: str) -> dict:
    return {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]}


def _jsonl(path: Path, *answers: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(_chat(a)) + "\n" for a in answers), encoding="utf-8")


def test_train_files_of_a_folder_as_datasets_finds_them(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "shards"
    _jsonl(folder / "data" / "train-00000.jsonl", "a", "b")
    _jsonl(folder / "data" / "train-00001.jsonl", "c")
    _jsonl(folder / "data" / "test.jsonl", "held out")
    _jsonl(folder / ".hidden" / "train.jsonl", "never")
    theirs = datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "cache"))
    found = list(iter_records(folder, Problems()))
    assert [record for _, record in found] == list(theirs)
    assert [location for location, _ in found] == [f"{folder}/data/train-00000.jsonl:1",
                                                   f"{folder}/data/train-00000.jsonl:2",
                                                   f"{folder}/data/train-00001.jsonl:1"]


def test_a_folder_without_split_names_is_all_train_and_bad_rows_name_their_file(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    _jsonl(folder / "a.jsonl", "a")
    (folder / "b.csv").write_text('messages\n"[{""role"": ""user"", ""content"": ""q""}]"\n', encoding="utf-8")
    (folder / "README.md").write_text("# not data\n")
    assert [p.name for p in directory_files(folder)] == ["a.jsonl", "b.csv"]
    with pytest.raises(UsageError, match=r"b\.csv:2: messages: expected at least one assistant turn"):
        load_dataset_rows(str(folder))


def test_cli_and_an_empty_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ok"
    _jsonl(folder / "train.jsonl", "a", "b")
    done = subprocess.run([sys.executable, "-m", "thub", "data", "check", str(folder)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 valid rows" in done.stdout
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not a saved Hugging Face dataset.*nor a folder of .jsonl"):
        load_dataset_rows(str(tmp_path / "empty"))
