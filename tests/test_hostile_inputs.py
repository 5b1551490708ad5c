"""Hostile files (issue 23 items 10-12): rows and parameter files nested too deeply, one corrupt
file among many, huge rows. Each is bad input named at its file (and line), never a traceback,
and never a reason to fail what the other, good files hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GOOD = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}


def thub(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)  # a hang guard


def _nested(depth: int) -> str:
    """JSON text of a list ``depth`` deep (as text: json.dumps itself cannot write it under pytest)."""
    return "[" * depth + '"x"' + "]" * depth


# item 11: deep nesting ---------------------------------------------------------------------------

def test_a_row_nested_too_deeply_is_named_at_its_line(tmp_path: Path) -> None:
    data = tmp_path / "deep.jsonl"
    deep = ('{"messages": [{"role": "user", "content": "hi", "meta": ' + _nested(990) + '}, '
            '{"role": "assistant", "content": "yo"}]}')
    data.write_text(json.dumps(GOOD) + "\n" + deep + "\n")
    done = thub("data", "check", str(data))
    assert done.returncode == 2, done.stderr
    assert f"{data}:2: nested too deeply" in done.stderr and "Traceback" not in done.stderr + done.stdout
    array = tmp_path / "deep.json"
    array.write_text(f"[{json.dumps(GOOD)},\n{deep}]")
    done = thub("data", "check", str(array))
    assert done.returncode == 2 and f"{array}:2: nested too deeply" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_nested_too_deeply_is_named_at_its_line(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text("algorithm: sft\nmodel_path: " + "[" * 100_000 + "]" * 100_000 + "\n")
    block = tmp_path / "block.yaml"
    block.write_text("algorithm: sft\nextra:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 400)))
    for config, line in ((flow, 2), (block, None)):
        done = thub("train", "sft", "--backend", "trl", "--config", str(config), "--dry-run")
        assert done.returncode == 2, done.stderr
        assert "nested too deeply" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert f"{config}:{line or ''}" in done.stderr
    shallow = tmp_path / "shallow.yaml"  # what a real file nests: accepted as before
    shallow.write_text("algorithm: sft\nmodel_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\n"
                       "lora_target_modules: [[[q_proj]]]\n")
    from thub.config.yamlfile import load_yaml

    assert load_yaml(shallow)[0]["lora_target_modules"] == [[["q_proj"]]]


# item 12: one corrupt file never breaks a listing ------------------------------------------------

def _run(directory: Path, loss_lines: str, created: float = 1.0) -> Path:
    directory.mkdir(parents=True)
    (directory / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl", "created": created,
                                                         "parameters": {}}))
    (directory / "training_metrics.jsonl").write_text(loss_lines)
    return directory


def test_history_list_skips_and_names_a_corrupt_run(tmp_path: Path) -> None:
    good = _run(tmp_path / "good", '{"step": 1, "max_steps": 1, "loss": 2.5}\n')
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "thub_run.json").write_bytes(b"\xff\xfe{\x00\x9c")  # not UTF-8
    odd = _run(tmp_path / "odd", "[1, 2]\n", created="yesterday")  # type: ignore[arg-type]
    (odd / "result.json").write_text('{"status": "succeeded", "last_metrics": [1]}')
    for extra in ((), ("--json",)):
        done = thub("history", "list", str(tmp_path), *extra)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert f"warning: skipped {binary}" in done.stderr and "not UTF-8" in done.stderr, done.stderr
        assert str(good) in done.stdout and str(odd) in done.stdout
    listed = json.loads(thub("history", "list", str(tmp_path), "--json").stdout)["runs"]
    assert {r["path"] for r in listed} == {str(odd), str(good)}
    assert next(r for r in listed if r["path"] == str(odd))["started"] is None  # "yesterday" is not a time


def test_plot_skips_non_finite_values_and_names_them(tmp_path: Path) -> None:
    run = _run(tmp_path / "nan", '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": NaN}\n{"step": 3, "loss": 1.0}\n'
                                 '{"step": 4, "loss": Infinity}\n')
    other = _run(tmp_path / "fine", '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n')
    for extra in (("--ascii",), ("--json",), ("--ema", "0.5")):
        done = thub("plot", str(run), str(other), *extra)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        metrics = run / "training_metrics.jsonl"
        assert f"warning: {metrics}: loss is not a finite number at step 2, 4; skipped" in done.stderr, done.stderr
    summary = json.loads(thub("plot", str(run), str(other), "--json").stdout)  # strict JSON: no NaN in it
    first = summary["runs"][0]
    assert first["points"] == 2 and first["last"] == 1.0


# item 10: huge rows and files are read and encoded within bounds ---------------------------------

LONG_ROWS = [
    # a long trained answer: cut inside the assistant turn
    {"messages": [{"role": "user", "content": "Tell me."}, {"role": "assistant", "content": "word " * 4000}]},
    # a long prompt: nothing trained is left after the cut (dropped as untrainable either way)
    {"messages": [{"role": "user", "content": "ask " * 5000}, {"role": "assistant", "content": "ok"}]},
    # no spaces at all, and many-byte characters around every cut
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x" * 30000}]},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "é中😀\n" * 6000}]},
    {"messages": [{"role": "system", "content": "rules " * 3000}, {"role": "user", "content": "q"},
                  {"role": "assistant", "content": "a"}]},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "9" * 20000}], "unmask": True},
]


def _tokenize(rows: list[dict[str, Any]], tokenizer: Any, max_seq_len: int, overlong: str, *,
              whole: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from thub.data import tokenize

    with pytest.MonkeyPatch.context() as patch:
        if whole:  # the whole-row encode as it was, the reference: no prefix bound
            patch.setattr(tokenize, "text_bound", lambda *_args: None)
        out, stats = tokenize.tokenize_chat(rows, tokenizer, max_seq_len, overlong=overlong)
    return out, stats.as_dict()


def test_a_prefix_encode_keeps_exactly_what_the_whole_encode_keeps(edge_cases: Path, tiny_model: Path) -> None:
    """The measured-counts comparison (issue 25) needs thub's tokens byte-identical: every row of
    the edge-case set and long rows of every kind, under each overlong policy and several limits."""
    from transformers import AutoTokenizer

    from thub.data import tokenize

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    lines = (edge_cases / "chat.jsonl").read_text().splitlines()
    rows = [row for row in (json.loads(line) for line in lines if line.strip()) if "messages" in row] + LONG_ROWS
    for max_seq_len in (8, 32, 256):
        bound = tokenize.text_bound(tokenizer.backend_tokenizer, max_seq_len)
        assert bound is not None and any(len(json.dumps(row)) > bound for row in LONG_ROWS)  # the bound is used
        for overlong in ("truncate", "drop"):
            fast = _tokenize(rows, tokenizer, max_seq_len, overlong, whole=False)
            assert fast == _tokenize(rows, tokenizer, max_seq_len, overlong, whole=True), (max_seq_len, overlong)
    lines = (edge_cases / "documents.jsonl").read_text().splitlines()
    documents = [json.loads(line) for line in lines if line.strip()]
    documents += [{"document": "text " * 5000}, {"document": "z" * 20000}]
    for max_seq_len in (8, 64):
        fast_docs, fast_stats = tokenize.tokenize_documents(documents, tokenizer, max_seq_len)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tokenize, "text_bound", lambda *_args: None)
            whole_docs, whole_stats = tokenize.tokenize_documents(documents, tokenizer, max_seq_len)
        assert fast_docs == whole_docs and fast_stats.as_dict() == whole_stats.as_dict()


PEAK = '''
import json, resource, sys
from transformers import AutoTokenizer
from thub.data.tokenize import tokenize_chat
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "word " * 1_000_000}]}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out, stats = tokenize_chat([row], tokenizer, 128)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_kib": grown, "tokens": len(out[0]["input_ids"]), "truncated": stats.truncated}))
'''


def test_a_5_mb_row_with_max_seq_len_128_is_not_tokenised_whole(tiny_model: Path) -> None:
    """Memory, not time: the whole 5 MB row took ~1.2 GB more resident memory (the Rust encoding
    of every token with its offsets); what 128 tokens need is a few MB."""
    done = subprocess.run([sys.executable, "-c", PEAK, str(tiny_model)], capture_output=True, text=True,
                          timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr
    peak = json.loads(done.stdout.splitlines()[-1])
    assert peak["tokens"] == 128 and peak["truncated"] == 1
    assert peak["grown_kib"] < 300 * 1024, peak  # generous: the row itself is 5 MB


READ = '''
import json, sys, tracemalloc
from thub.data.problems import Problems
from thub.data.readers import iter_records
tracemalloc.start()
problems = Problems()
records = sum(1 for _ in iter_records(sys.argv[1], problems))
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "records": records,
                  "errors": problems.error_count}))
'''


def test_a_huge_sparse_file_is_refused_without_holding_it(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.jsonl"
    with sparse.open("wb") as handle:  # 512 MB of NUL bytes that take no disk space
        handle.write(json.dumps(GOOD).encode() + b"\n")
        handle.truncate(512 * 1024 * 1024)
    done = subprocess.run([sys.executable, "-c", READ, str(sparse)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["records"] == 1 and measured["errors"] == 1
    assert measured["peak"] < 32 * 1024 * 1024, measured  # was twice the file (its bytes and its text)
    checked = thub("data", "check", str(sparse))
    assert checked.returncode == 2 and f"{sparse}:2: expected a JSON object, found malformed JSON" in checked.stderr
    assert "Traceback" not in checked.stderr
