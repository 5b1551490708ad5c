"""The edge-case fixture set (tests/fixtures/edge_cases): every row passes ``thub data check``, and its
README's table (what each line is, its token and trained-token counts) stays true."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from thub.data import load_dataset_rows, tokenize_chat, tokenize_documents


def _table(readme: str, heading: str) -> dict[int, str]:
    """Line number -> the last cell of that row, from the README table under ``heading``."""
    section = readme.split(heading, 1)[1].split("\n## ", 1)[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \|.*\| ([^|]+) \|$", section, re.M)}


def test_every_row_passes_data_check(edge_cases: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    files = sorted(str(p) for p in edge_cases.glob("*.jsonl"))
    done = subprocess.run([sys.executable, "-m", "thub", "data", "check", "--json", *files], capture_output=True,
                          text=True, env=environ, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["errors"] == []


def test_readme_counts_are_the_tokenizers(edge_cases: Path, tiny_model: Path, edge_cases_max_seq_len: int) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    readme = (edge_cases / "README.md").read_text()
    assert f"`max_seq_len: {edge_cases_max_seq_len}`" in readme
    chat, _ = tokenize_chat(load_dataset_rows(str(edge_cases / "chat.jsonl")), tokenizer, None)
    counted = {i: f"{len(s['input_ids'])} ({sum(label != -100 for label in s['labels'])})"
               for i, s in enumerate(chat, 1)}
    assert _table(readme, "## chat.jsonl") == counted
    overlong = [i for i, s in enumerate(chat, 1) if len(s["input_ids"]) > edge_cases_max_seq_len]
    assert overlong == [7]
    documents, _ = tokenize_documents(load_dataset_rows(str(edge_cases / "documents.jsonl")), tokenizer, None)
    assert _table(readme, "## documents.jsonl") == {i: str(len(s["input_ids"])) for i, s in enumerate(documents, 1)}
    assert max(len(s["input_ids"]) for s in documents) > 64 * 64  # longer than 64 blocks of 64


def test_rows_hold_the_cases_the_readme_names(edge_cases: Path) -> None:
    rows = [json.loads(line) for line in (edge_cases / "chat.jsonl").read_text(encoding="utf-8").splitlines()]
    roles = [[m["role"] for m in r["messages"]] for r in rows]
    assert [len(m.get("tool_calls", [])) for m in rows[1]["messages"]] == [0, 0, 1, 0, 0]
    assert roles[2] == ["user", "assistant", "tool", "tool", "assistant"]
    assert len(rows[2]["messages"][1]["tool_calls"]) == 2
    assert "system" in roles[3][1:]
    assert roles[4][:2] == ["user", "user"] and roles[5][1:] == ["assistant", "assistant"]
    text = json.dumps(rows[7], ensure_ascii=False)
    for sample in ("首", "👨\u200d👩\u200d👧", "e\u0301", "مرحبا", "שלום"):
        assert sample in text
    assert rows[8]["unmask"] is True and rows[9]["unmask"] is False
