"""Fixtures of the trl backend's tests: preference files the tiny model can learn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def preference_rows(n: int = 12) -> list[dict[str, Any]]:
    """Canonical ``dpo`` rows with one learnable preference (the chosen answer agrees and is short,
    the rejected one refuses) and the hard cases: a system turn, tool calls in the prompt whose
    arguments have other keys from row to row (ending with the tool's result), Unicode."""
    rows = []
    for i in range(n):
        prompt: list[dict[str, Any]] = [{"role": "user", "content": f"Question {i}: is {i} + {i} equal to {2 * i}?"}]
        if i % 4 == 1:
            prompt.insert(0, {"role": "system", "content": "Réponds brièvement. 答えは短く。"})
        elif i % 4 == 2:
            prompt += [{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "add", "arguments": {"a": i, "b": i}}}]},
                {"role": "tool", "content": str(2 * i)}]
        elif i % 4 == 3:
            prompt += [{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "weather", "arguments": {"city": "Zürich"}}}]},
                {"role": "tool", "content": "☀ 21°C"}]
        rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": f"Yes ✓ {2 * i}."}],
                     "rejected": [{"role": "assistant", "content": "No, I cannot say ✗"}]})
    return rows


def unpaired_rows(n: int = 12) -> list[dict[str, Any]]:
    """The ``kto`` form of :func:`preference_rows`: each pair as a desirable and an undesirable answer."""
    rows = []
    for pair in preference_rows(n):
        rows.append({"prompt": pair["prompt"], "completion": pair["chosen"], "label": True})
        rows.append({"prompt": pair["prompt"], "completion": pair["rejected"], "label": False})
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def preference_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"dpo": pairs.jsonl, "kto": unpaired.jsonl}`` of :func:`preference_rows`."""
    folder = tmp_path_factory.mktemp("preference")
    return {"dpo": write_jsonl(folder / "pairs.jsonl", preference_rows()),
            "kto": write_jsonl(folder / "unpaired.jsonl", unpaired_rows())}
