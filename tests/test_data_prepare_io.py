"""thub data prepare's plumbing: encode batches, shards written in order, the same bytes from 1 or 2 processes."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from thub.data import DatasetSource
from thub.data.synthetic import CHATML_GENERATION, conversations, make_tokenizer
from thub.data.tokenize import BATCH, _batches

prepare_module = importlib.import_module("thub.data.prepare")  # the package exports the function of that name


@pytest.mark.parametrize("n", [0, 1, 250, BATCH - 1, BATCH, BATCH + 1, 5 * BATCH + 123])
def test_batches_cover_every_row_once_in_order_with_a_short_tail(n: int) -> None:
    batches = list(_batches(n))
    assert [i for batch in batches for i in batch] == list(range(n))
    assert all(len(batch) <= BATCH for batch in batches)
    if n:
        assert len(batches[-1]) <= BATCH // 4  # little serial work once the encoder is done


def test_append_in_kernel_and_through_memory(tmp_path: Path, monkeypatch: Any) -> None:
    head, part = tmp_path / "head", tmp_path / "part"
    body = "".join(f"line {i}\n" for i in range(50000)).encode()
    real, calls = os.copy_file_range, []

    def flaky(src: int, dst: int, count: int, *args: Any) -> int:
        calls.append(count)
        if len(calls) > 1:
            raise OSError(18, "Invalid cross-device link")
        return real(src, dst, min(count, 1000), *args)

    for broken in (False, True):
        head.write_bytes(b"first\n")
        part.write_bytes(body)
        if broken:  # copies 1000 bytes, then the file system refuses (EXDEV): the rest goes through memory
            monkeypatch.setattr(os, "copy_file_range", flaky)
        prepare_module._append(str(head), str(part))
        assert head.read_bytes() == b"first\n" + body
    assert len(calls) == 2


def test_two_processes_write_the_bytes_one_writes(tmp_path: Path) -> None:
    # 600 rows: enough for two shards (a shard is at least 256 rows), each a part file
    tok = make_tokenizer(chat_template=CHATML_GENERATION)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in conversations(600, seed=11)))
    one = prepare_module.prepare([DatasetSource(str(data))], tok, tmp_path / "one.jsonl", use_cache=False)
    two = prepare_module.prepare([DatasetSource(str(data))], tok, tmp_path / "two.jsonl", use_cache=False,
                                 num_proc=2)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert one.stats.samples_out == two.stats.samples_out == 600
    assert one.stats.trained_tokens == two.stats.trained_tokens > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "one.jsonl", "one.jsonl.thub.json",
                                                         "two.jsonl", "two.jsonl.thub.json"]
