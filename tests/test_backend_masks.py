"""``thub data preview --backend B``: the comparison of trained text, and its errors.

The backends' own preprocessing is exercised in their plugins' tests (axolotl from its unpacked
wheel, LLaMA-Factory in its managed environment), each on the whole demo data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from thub.data.backend_masks import compare, masks_target


def _example(*segments: tuple[str, bool]) -> dict:
    return {"segments": [{"text": text, "trained": trained} for text, trained in segments]}


def test_equal_when_the_same_text_is_trained() -> None:
    ours = _example(("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n", False), ("Paris.<|im_end|>", True))
    theirs = _example(("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n", False), ("Paris.", True),
                      ("<|im_end|>", True))  # split into other runs: still the same text
    assert compare(ours, theirs) == {"equal": True, "thub_only": [], "backend_only": []}


def test_a_trained_newline_is_a_difference() -> None:
    ours = _example(("prompt ", False), ("Paris.<|im_end|>", True), ("\n", False))
    theirs = _example(("prompt ", False), ("Paris.<|im_end|>\n", True))
    assert compare(ours, theirs) == {"equal": False, "thub_only": [], "backend_only": ["\n"]}


def test_masked_turn_and_dropped_row_are_reported() -> None:
    ours = _example(("q", False), ("first", True), ("q2", False), ("second", True))
    last_only = _example(("q", False), ("first", False), ("q2", False), ("second", True))
    result = compare(ours, last_only)
    assert result["equal"] is False and result["thub_only"] == ["first"] and result["backend_only"] == []
    assert compare(ours, None) == {"equal": False, "dropped_by_backend": True, "thub_only": ["first", "second"],
                                   "backend_only": []}


def test_masks_module_named_after_the_runner() -> None:
    assert masks_target("thub_plugin_llamafactory.runner:run") == "thub_plugin_llamafactory.masks:token_masks"


def _preview(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", "data", "preview", *args], capture_output=True, text=True,
                          env=environ, timeout=300)


def test_backend_without_own_preprocessing_or_unknown_is_a_clear_error(tiny_model: Path, demo_data: Path) -> None:
    done = _preview("--model", str(tiny_model), str(demo_data / "chat.jsonl"), "--backend", "trl")
    assert done.returncode == 2 and "trains on thub's own masks" in done.stderr and "Traceback" not in done.stderr
    done = _preview("--model", str(tiny_model), str(demo_data / "chat.jsonl"), "--backend", "nope")
    assert done.returncode == 2 and "unknown backend 'nope'" in done.stderr


def test_json_without_backend_is_unchanged(tiny_model: Path, demo_data: Path) -> None:
    done = _preview("--model", str(tiny_model), str(demo_data / "chat.jsonl"), "--json")
    assert done.returncode == 0, done.stderr
    assert "comparison" not in json.loads(done.stdout)["examples"][0]


def test_preview_of_pre_tokenized_rows_decodes_them(tiny_model: Path, tmp_path: Path) -> None:
    # explain()'s pre-tokenized branch (also what --backend shows) decodes token by token
    data = tmp_path / "processed.jsonl"
    data.write_text(json.dumps({"input_ids": [1, 276, 202, 284], "labels": [-100, -100, 202, 284]}) + "\n")
    done = _preview("--model", str(tiny_model), str(data), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    example = json.loads(done.stdout)["examples"][0]
    assert (example["tokens"], example["trained_tokens"]) == (4, 2)
    assert [s["trained"] for s in example["segments"]] == [False, True]
