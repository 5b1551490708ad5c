"""``thub data preview --backend B``: the comparison of trained text, and its errors; thub's own masks
against transformers' on the edge-case set (tests/fixtures/edge_cases), and that reference's failures.

The backends' own preprocessing is exercised in their plugins' tests (axolotl from its unpacked
wheel, LLaMA-Factory in its managed environment), each on the demo data and the edge-case set, with
:mod:`thub.testing.masks` as the reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.data.backend_masks import compare, masks_target
from thub.testing.masks import mask_differences


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


def test_preview_of_pre_tokenized_rows_keeps_characters_split_over_tokens(tiny_model: Path) -> None:
    # a byte-level BPE splits "°" and an emoji into several tokens: each alone decodes to U+FFFD
    from thub.data import load_tokenizer
    from thub.data.preview import explain

    tokenizer = load_tokenizer(str(tiny_model))
    text = "-3 °C 👨‍👩‍👧 e\u0301"
    ids = tokenizer.encode(text, add_special_tokens=False)
    labels = [-100] * 2 + ids[2:]
    example = explain({"input_ids": ids, "labels": labels}, tokenizer)
    assert "".join(s["text"] for s in example["segments"]) == text
    assert example["segments"][-1]["text"] == text[2:] and example["trained_tokens"] == len(ids) - 2


@pytest.mark.parametrize("unmask", [False, True])
def test_thubs_own_masks_are_the_templates_on_the_edge_cases(unmask: bool, tiny_model: Path, demo_data: Path,
                                                             edge_cases: Path, edge_cases_max_seq_len: int) -> None:
    """thub's masks (what trl, unsloth and mini-trainer train on) are, row by row, what transformers'
    ``return_assistant_tokens_mask`` marks: tool calls, odd turn orders, Unicode, unmask rows, the
    overlong row cut (truncate) or left out (drop)."""
    from transformers import AutoTokenizer

    from thub.data import load_dataset_rows, tokenize_chat

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for path in (demo_data / "chat.jsonl", edge_cases / "chat.jsonl"):
        rows = load_dataset_rows(str(path))
        for overlong in ("truncate", "drop"):
            samples, _ = tokenize_chat(rows, tokenizer, edge_cases_max_seq_len, unmask=unmask, overlong=overlong)
            assert mask_differences(rows, samples, tokenizer, edge_cases_max_seq_len, unmask=unmask,
                                    overlong=overlong) == [], (path, overlong)


def test_the_mask_reference_catches_a_changed_label_a_dropped_row_and_other_tokens(
        tiny_model: Path, edge_cases: Path, edge_cases_max_seq_len: int) -> None:
    from transformers import AutoTokenizer

    from thub.data import load_dataset_rows, tokenize_chat

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows = load_dataset_rows(str(edge_cases / "chat.jsonl"))
    samples, _ = tokenize_chat(rows, tokenizer, edge_cases_max_seq_len)
    one_more = [dict(s) for s in samples]
    one_more[2] = {**samples[2], "labels": [samples[2]["input_ids"][0], *samples[2]["labels"][1:]]}
    assert mask_differences(rows, one_more, tokenizer, edge_cases_max_seq_len) == [
        "row 3: labels differ (103 trained, the template marks 102)"]
    assert mask_differences(rows, samples[:-1], tokenizer, edge_cases_max_seq_len) == [
        "10 rows became 9 samples, expected 10"]
    shifted = [{**s, "input_ids": s["input_ids"][1:]} for s in samples]
    assert mask_differences(rows, shifted, tokenizer, edge_cases_max_seq_len, locations=[f"f:{i}" for i in
                                                                                          range(1, 11)])[0] == \
        "f:1: input_ids differ from the chat template's"
