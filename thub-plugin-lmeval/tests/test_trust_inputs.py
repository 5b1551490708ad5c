"""Hostile local task files (issue 35 item 10): rows nested deeper than Python reads, bytes that are
no UTF-8, JSON errors worded once, and a prompt of megabytes are each a bounded, located answer:
``file:line`` and exit 2 before a model loads, or a prompt cut to what the model can read before
any tokenizer sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from thub_plugin_lmeval.runner import evaluate

from thub.errors import UsageError
from thub.evaluate import EvalRequest, EvalTask

GOOD = json.dumps({"prompt": "What is the capital of France?", "answer": "Paris."})


def jsonl_request(model: Path, task: Path, work: Path, **kwargs: Any) -> EvalRequest:
    return EvalRequest(model_path=str(model), label="final", tasks=(EvalTask(task.stem, str(task)),),
                       work_dir=str(work), **kwargs)


def refusal(task: Path, tmp_path: Path) -> str:
    """The UsageError evaluating ``task`` raises (the model path is never read: rows come first)."""
    with pytest.raises(UsageError) as caught:
        evaluate(jsonl_request(tmp_path / "no-model", task, tmp_path / "work"))
    return str(caught.value)


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_row_nested_too_deeply_is_located(depth: int, tmp_path: Path) -> None:
    task = tmp_path / "deep.jsonl"
    task.write_text("\n".join([GOOD, '{"prompt": "q", "answer": ' + "[" * depth + "]" * depth + "}",
                               "[" * depth, GOOD]) + "\n")
    text = refusal(task, tmp_path)
    assert f"{task}:2: nested too deeply" in text and f"{task}:3: nested too deeply" in text, text
    assert f"{task}:1" not in text and f"{task}:4" not in text


def test_bytes_that_are_no_utf8_are_located(tmp_path: Path) -> None:
    task = tmp_path / "latin1.jsonl"
    task.write_bytes(b"\xef\xbb\xbf" + GOOD.encode() + b"\n" + '{"prompt": "café", "answer": "x"}\n'.encode("latin-1")
                     + GOOD.encode() + b"\n")
    text = refusal(task, tmp_path)
    assert f"{task}:2: expected UTF-8 text, found invalid byte at column 16" in text, text
    assert f"{task}:1" not in text and f"{task}:3" not in text  # a UTF-8 BOM is no mistake


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "abc, "answer": "x"}', "not JSON (Expecting ',' delimiter at column 19)"),
    ('{"prompt": "abc', "not JSON (Unterminated string starting at column 12)"),
    ('{"prompt": "a\tb", "answer": "x"}', "not JSON (Invalid control character at column 14)"),
])
def test_json_errors_say_at_column_once(line: str, message: str, tmp_path: Path) -> None:
    task = tmp_path / "broken.jsonl"
    task.write_text(GOOD + "\n" + line + "\n")
    text = refusal(task, tmp_path)
    assert f"{task}:2: {message}" in text, text
    assert "at at" not in text


def test_hostile_task_files_exit_2_on_the_command_line(tiny_model: Path, tmp_path: Path) -> None:
    """``thub eval`` itself: exit 2 and the file:line of each, no traceback."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text(GOOD + "\n" + "[" * 5000 + "\n")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"prompt": "café", "answer": "x"}\n'.encode("latin-1"))
    for task, expected in ((deep, f"{deep}:2: nested too deeply"),
                           (latin, f"{latin}:1: expected UTF-8 text, found invalid byte")):
        done = subprocess.run([sys.executable, "-m", "thub", "eval", str(tiny_model), "--tasks", str(task),
                               "--out", str(tmp_path / f"out-{task.stem}"), "--limit", "1"],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 2, done.stderr[-3000:]
        assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]


def test_a_cut_prompt_keeps_the_tokens_the_model_reads(tiny_model: Path) -> None:
    """The tail kept ends in the same tokens as the whole text (the context's worth, and more)."""
    from thub_plugin_lmeval.context import MAX_CHARS_PER_TOKEN, ContextCut
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    words = " ".join(f"word{i % 97} 🙂 capital, Paris;" for i in range(8_000))
    cut = ContextCut(str(tiny_model), 128)
    tail = cut(words)
    assert len(tail) <= MAX_CHARS_PER_TOKEN * 128 and words.endswith(tail) and cut.cut == 1
    whole = tokenizer(words, add_special_tokens=False)["input_ids"]
    kept = tokenizer(tail, add_special_tokens=False)["input_ids"]
    assert len(kept) > 128 and kept[-128:] == whole[-128:]
    short = "What is the capital of France?"
    assert cut(short) == short and cut.cut == 1
    # 1,300 characters in 100 tokens of 13: fewer tokens than the context, so nothing is cut
    specials = "<|endoftext|>" * 100
    assert cut(specials) == specials and cut.cut == 1


@pytest.mark.slow
def test_a_prompt_of_megabytes_never_reaches_the_tokenizer_whole(tiny_model: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A 4 MB prompt is scored with a context of 128 tokens: the model's real tokenizer (spied on where
    every text enters it) is never given more than 64 characters a token of that context."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    seen: list[int] = []
    original = TokenizersBackend._encode_plus

    def spy(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
        texts = text if isinstance(text, (list, tuple)) else [text]
        seen.extend(len(t) if isinstance(t, str) else sum(len(part) for part in t) for t in texts)
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(TokenizersBackend, "_encode_plus", spy)
    huge = "The history of every capital city, told at length. " * 80_000  # 4 MB
    task = tmp_path / "long.jsonl"
    task.write_text("\n".join([json.dumps({"prompt": huge + "What is the capital of France?", "answer": "Paris."}),
                               GOOD]) + "\n")
    (score,) = evaluate(jsonl_request(tiny_model, task, tmp_path / "work", max_seq_len=128))
    assert score.samples == 2 and "acc" in score.metrics
    assert seen, "the spy saw no tokenizer call"
    assert max(seen) <= 64 * 128 + 200, f"the tokenizer was given {max(seen):,} characters"
    assert f"thub: {task}: 1 prompt or system text(s) longer than the model's context (128 tokens) cut" \
        in capsys.readouterr().err
