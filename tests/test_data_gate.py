"""The data gate: data of a kind the algorithm does not train on is refused before anything starts
(exit 2, the row named), by ``thub train`` and its dry run alike (issue 26 item 1).

Before the gate, ``AlgorithmSpec.data_formats`` was only displayed: ``thub train sft`` on GRPO
prompts dry-ran with exit 0, and a real run handed the prompts to an SFT trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _args(algorithm: str, data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", algorithm, "--backend", "trl", "--model-path", str(ROOT / "examples" / "tiny"),
            "--data-path", str(data), "--ckpt-output-dir", str(out), *extra]


@pytest.mark.needs_backend("trl")
def test_sft_on_grpo_prompts_is_refused_naming_the_row(thub_cli, tmp_path: Path) -> None:
    data = ROOT / "examples" / "data" / "grpo.jsonl"
    result = thub_cli(*_args("sft", data, tmp_path / "run", "--dry-run"))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"sft expects chat, document or processed rows; `{data}:1` is a grpo row (prompt + ground_truth)" \
        in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


@pytest.mark.needs_backend("trl")
def test_sft_on_grpo_prompts_is_refused_by_the_real_run_before_anything_is_written(thub_cli, tmp_path: Path) -> None:
    data = ROOT / "examples" / "data" / "grpo.jsonl"
    result = thub_cli(*_args("sft", data, tmp_path / "run", "--max-steps", "1"))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"`{data}:1` is a grpo row" in result.stderr
    assert not (tmp_path / "run" / "result.json").exists() and not (tmp_path / "run" / "thub_data").exists()


@pytest.mark.needs_backend("trl")
def test_dpo_on_chat_rows_is_refused_naming_the_row(thub_cli, tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    result = thub_cli(*_args("dpo", data, tmp_path / "run", "--dry-run"))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"dpo expects preference rows; `{data}:1` is a chat row (messages)" in result.stderr


@pytest.mark.needs_backend("trl")
def test_grpo_on_chat_rows_is_refused_and_on_its_prompts_accepted(thub_cli, tmp_path: Path) -> None:
    chat = ROOT / "examples" / "data" / "chat.jsonl"
    refused = thub_cli(*_args("grpo", chat, tmp_path / "a", "--dry-run"))
    assert refused.exit_code == 2 and f"grpo expects grpo rows; `{chat}:1` is a chat row" in refused.stderr
    accepted = thub_cli(*_args("grpo", ROOT / "examples" / "data" / "grpo.jsonl", tmp_path / "b", "--dry-run"))
    assert accepted.exit_code == 0, accepted.stdout + accepted.stderr


@pytest.mark.needs_backend("trl")
def test_sft_accepts_every_kind_it_declares(thub_cli, tmp_path: Path) -> None:
    for name in ("chat.jsonl", "sharegpt.jsonl", "alpaca.jsonl", "documents.jsonl"):
        result = thub_cli(*_args("sft", ROOT / "examples" / "data" / name, tmp_path / name, "--dry-run"))
        assert result.exit_code == 0, (name, result.stdout + result.stderr)
