"""``thub data check|preview|stats|prepare`` through the CLI, and prepare's guarantees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from thub.cli.main import cli
from thub.data.synthetic import CHATML, conversations, make_tokenizer

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tok") / "model"
    make_tokenizer(chat_template=CHATML).save_pretrained(path)
    return str(path)


@pytest.fixture
def chat(tmp_path: Path) -> str:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in conversations(300, seed=5)))
    return str(path)


@pytest.fixture
def bad(tmp_path: Path) -> str:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]})
                    + "\n")
    return str(path)


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_check_ok_and_json(chat: str) -> None:
    result = run("data", "check", chat)
    assert result.exit_code == 0, result.output
    assert "300 valid rows" in result.output
    report = json.loads(run("data", "check", "--json", chat, "--dataset", chat, "--mix", "interleave_under").stdout)
    assert report["ok"] and report["sources"][0]["rows"] == 300 and report["mixed_rows"] == 600
    assert report["sources"][0]["roles"]["assistant"] > 300


def test_check_bad_file(bad: str) -> None:
    result = run("data", "check", bad)
    assert result.exit_code == 2
    assert f"{bad}:1: messages[1].content: expected non-empty text in a assistant turn, found empty string" \
        in result.output


def test_check_bad_mix_options(chat: str) -> None:
    result = run("data", "check", chat, chat, "--probabilities", "0.5,0.5")
    assert result.exit_code == 2 and "expected none with mix strategy 'concat'" in result.output
    result = run("data", "check", chat, "--probabilities", "x")
    assert result.exit_code == 2 and "comma-separated numbers" in result.output
    assert run("data", "check").exit_code == 2


def test_preview_shows_masks(model_dir: str, chat: str) -> None:
    result = run("data", "preview", "--model", model_dir, chat)
    assert result.exit_code == 0, result.output
    assert "<|im_start|>assistant" in result.output and "trained" in result.output
    report = json.loads(run("data", "preview", "--model", model_dir, chat, "-n", "2", "--json").stdout)
    assert len(report["examples"]) == 2
    example = report["examples"][0]
    trained = [s["text"] for s in example["segments"] if s["trained"]]
    first = conversations(1, seed=5)[0]["messages"]
    assert trained == [m["content"] + "<|im_end|>" for m in first if m["role"] == "assistant"]
    assert example["trained_tokens"] == sum(s["tokens"] for s in example["segments"] if s["trained"])
    assert example["location"] == f"{chat}:1"


def test_preview_wrong_family_template(tmp_path: Path, chat: str) -> None:
    from thub.data.synthetic import LLAMA3

    path = tmp_path / "wrong"
    make_tokenizer(chat_template=LLAMA3).save_pretrained(path)
    result = run("data", "preview", "--model", str(path), chat)
    assert result.exit_code == 2 and "single token" in result.output


def test_preview_bad_data_before_loading_model(bad: str, tmp_path: Path) -> None:
    # The data check runs first: no model directory is needed to learn the data is bad.
    result = run("data", "preview", "--model", str(tmp_path / "nope"), bad)
    assert result.exit_code == 2 and f"{bad}:1" in result.output


def test_stats(model_dir: str, chat: str) -> None:
    report = json.loads(run("data", "stats", chat, "--model", model_dir, "--max-seq-len", "100", "--json").stdout)
    assert report["rows"] == 300 and report["tokens"] > report["trained_tokens"] > 0
    assert set(report["token_length"]) >= {"p50", "p90", "p99", "max"}
    assert report["longer_than_max_seq_len"] > 0
    result = run("data", "stats", chat)
    assert result.exit_code == 0 and "rows: 300" in result.output


def test_prepare_writes_jsonl_and_caches(model_dir: str, chat: str, tmp_path: Path) -> None:
    out = tmp_path / "out" / "prepared.jsonl"
    result = run("data", "prepare", "--model", model_dir, chat, "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["cached"] is False and report["samples_out"] == 300
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 300
    assert all(len(s["input_ids"]) == len(s["labels"]) == s["len"] for s in lines)
    assert sum(sum(1 for x in s["labels"] if x != -100) for s in lines) == report["trained_tokens"]
    # mini-trainer's definition: the first token is never predicted
    assert all(s["num_loss_counted_tokens"] == sum(1 for x in s["labels"][1:] if x != -100) for s in lines)
    again = json.loads(run("data", "prepare", "--model", model_dir, chat, "-o", str(out), "--json").stdout)
    assert again["cached"] is True and again["key"] == report["key"]
    changed = json.loads(run("data", "prepare", "--model", model_dir, chat, "-o", str(out), "--max-seq-len", "64",
                             "--json").stdout)
    assert changed["cached"] is False and changed["truncated"] > 0
    assert not [p for p in out.parent.iterdir() if ".tmp" in p.name]


def test_prepare_parallel_equals_sequential(model_dir: str, chat: str, tmp_path: Path) -> None:
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert run("data", "prepare", "-m", model_dir, chat, "-o", str(one)).exit_code == 0
    result = run("data", "prepare", "-m", model_dir, chat, "-o", str(two), "--num-proc", "2")
    assert result.exit_code == 0, result.output
    assert one.read_bytes() == two.read_bytes()


def test_prepare_reports_truncation(model_dir: str, chat: str, tmp_path: Path) -> None:
    result = run("data", "prepare", "-m", model_dir, chat, "-o", str(tmp_path / "p.jsonl"), "--max-seq-len", "100")
    assert result.exit_code == 0
    assert "samples truncated to max_seq_len" in result.output


@pytest.mark.parametrize("case", ["bad_data", "overlong_error", "bad_model"])
def test_prepare_writes_nothing_on_error(model_dir: str, chat: str, bad: str, tmp_path: Path, case: str) -> None:
    out = tmp_path / "o" / "p.jsonl"
    args = {"bad_data": ["-m", model_dir, bad],
            "overlong_error": ["-m", model_dir, chat, "--max-seq-len", "50", "--overlong", "error"],
            "bad_model": ["-m", str(tmp_path / "missing"), chat]}[case]
    result = run("data", "prepare", *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert not out.exists()
    assert not out.parent.exists() or not list(out.parent.iterdir())
    if case == "overlong_error":
        assert "longer than max_seq_len=50" in result.output and f"{chat}:1" in result.output


def test_prepare_parquet_and_documents(model_dir: str, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"document number {i} " * 5}) + "\n" for i in range(20)))
    out = tmp_path / "docs.parquet"
    result = run("data", "prepare", "-m", model_dir, str(docs), "-o", str(out))
    assert result.exit_code == 0, result.output
    table = pq.read_table(out).to_pylist()
    assert len(table) == 20 and table[0]["input_ids"] == table[0]["labels"]


def test_prepare_refuses_grpo(model_dir: str, tmp_path: Path) -> None:
    data = tmp_path / "g.jsonl"
    data.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    result = run("data", "prepare", "-m", model_dir, str(data), "-o", str(tmp_path / "x.jsonl"))
    assert result.exit_code == 2 and "grpo rows (prompt + ground_truth) are not tokenized" in result.output


def test_zero_trained_tokens_is_an_error(model_dir: str, tmp_path: Path) -> None:
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "word " * 300},
                                             {"role": "assistant", "content": "ok"}]}) + "\n")
    result = run("data", "prepare", "-m", model_dir, str(data), "-o", str(tmp_path / "x.jsonl"), "--max-seq-len", "20")
    assert result.exit_code == 2 and "found 0" in result.output


def test_importing_thub_data_stays_light() -> None:
    code = ("import sys, thub.data, thub.cli.data; "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'tokenizers', 'pyarrow', 'jinja2') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
