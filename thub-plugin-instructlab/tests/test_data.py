"""instructlab-training's real data processing (CPU) on the tiny local model; its drops counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from thub_plugin_instructlab.data import prepare
from thub_plugin_instructlab.translate import translate

from thub.runner.context import RunContext
from thub.runner.rundir import RunDirectory

pytest.importorskip("instructlab.training")

SHORT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}
LONG = {"messages": [{"role": "user", "content": "Repeat. " * 80}, {"role": "assistant", "content": "ok " * 80}]}


def _normal(i: int) -> dict:
    return {"messages": [
        {"role": "system", "content": "You are a helpful assistant. Answer in full sentences."},
        {"role": "user", "content": f"What is {i} plus {i}? Explain the steps you take."},
        {"role": "assistant", "content": f"We add {i} and {i}, which gives {2 * i}. The answer is {2 * i}."},
    ]}


def _plan(tiny_model: Path, data: Path, out: Path, **params):
    values = {"model_path": str(tiny_model), "data_path": str(data), "ckpt_output_dir": str(out), "num_epochs": 1,
              "effective_batch_size": 4, "learning_rate": 1e-5, "max_seq_len": 128, "seed": 1,
              "document_column_name": "document", "data_format": "auto", **params}
    return translate("sft", values, environ={}, flash_attn=False), values


def _context(params: dict) -> RunContext:
    """The run context the runner passes: the data comes from it (validated rows), not from data_path."""
    return RunContext("sft", "instructlab-training", params, RunDirectory(Path(params["ckpt_output_dir"])))


def _templated_lengths(tiny_model: Path, rows: list[dict]) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    return [len(tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"])
            for r in rows]


def test_short_and_long_samples_are_counted(tiny_model: Path, tmp_path: Path) -> None:
    rows = [_normal(i) for i in range(6)] + [SHORT, SHORT, LONG]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan, params = _plan(tiny_model, data, tmp_path / "run")
    lengths = _templated_lengths(tiny_model, rows)
    assert sum(n < 20 for n in lengths) == 2 and sum(n >= 128 for n in lengths) == 1  # the fixture is what we think

    report = prepare(plan, _context(params))
    assert (report.input_samples, report.kept_samples, report.dropped_short, report.dropped_long) == (9, 6, 2, 1)
    assert report.train_units == 6
    warnings = report.warnings()
    assert "dropped 2 of 9 samples shorter than 20 tokens" in warnings[0]
    assert "dropped 1 of 9 samples of 128 tokens or more" in warnings[1]

    processed = [json.loads(line) for line in Path(report.processed_file).read_text().splitlines()]
    assert len(processed) == 6
    assert Path(report.processed_file) == tmp_path / "run" / "data" / "data.jsonl"
    for row in processed:
        assert len(row["input_ids"]) == len(row["labels"]) == row["len"]
        assert 20 <= row["len"] < 128
        assert -100 in row["labels"] and any(label != -100 for label in row["labels"])  # assistant-only loss


def test_unmask_messages_trains_on_user_turns_too(tiny_model: Path, tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(_normal(i)) + "\n" for i in range(3)))
    counted = {}
    for unmask in (False, True):
        plan, params = _plan(tiny_model, data, tmp_path / f"run{unmask}", unmask_messages=unmask)
        report = prepare(plan, _context(params))
        rows = [json.loads(line) for line in Path(report.processed_file).read_text().splitlines()]
        counted[unmask] = sum(sum(label != -100 for label in row["labels"]) for row in rows)
    assert counted[True] > counted[False]


def test_other_formats_are_normalised_first(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    plan, params = _plan(tiny_model, demo_data / "alpaca.jsonl", tmp_path / "run")
    report = prepare(plan, _context(params))
    assert report.input_samples > 0
    assert report.kept_samples + report.dropped_short + report.dropped_long == report.input_samples
    first = json.loads((tmp_path / "run" / "data" / "thub_input.jsonl").read_text().splitlines()[0])
    assert set(first) == {"messages", "unmask"}


def test_pretraining_documents_become_token_rows(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    plan, params = _plan(tiny_model, demo_data / "documents.jsonl", tmp_path / "run", is_pretraining=True,
                         block_size=32)
    report = prepare(plan, _context(params))
    assert report.mode == "pretraining" and report.kept_samples == report.input_samples > 0
    assert report.train_units == -(-report.total_tokens // 32)  # blocks per epoch
    row = json.loads(Path(report.processed_file).read_text().splitlines()[0])
    assert row["len"] == len(row["input_ids"])


@pytest.mark.parametrize("unmask", [False, True])
@pytest.mark.parametrize("data", ["demo", "edge_cases"])
def test_processed_rows_train_the_template_marked_tokens(data: str, unmask: bool, tiny_model: Path, demo_data: Path,
                                                         edge_cases: Path, edge_cases_max_seq_len: int,
                                                         tmp_path: Path) -> None:
    """The data.jsonl instructlab-training trains on holds, row by row, the tokens the model's template
    marks (tool calls, odd turn orders, Unicode; every token of an ``unmask`` row, role headers and
    system turns included, as thub's unmask means), less the rows it drops by length (counted)."""
    from transformers import AutoTokenizer

    from thub.data import load_dataset_rows
    from thub.testing.masks import mask_differences, reference_sample

    path = (demo_data if data == "demo" else edge_cases) / "chat.jsonl"
    plan, params = _plan(tiny_model, path, tmp_path / "run", max_seq_len=edge_cases_max_seq_len,
                         unmask_messages=unmask)
    report = prepare(plan, _context(params))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows = [r for r in load_dataset_rows(str(path))
            if 20 <= len(reference_sample(r, tokenizer)["input_ids"]) < edge_cases_max_seq_len]
    assert report.kept_samples == len(rows) and (data == "demo" or report.dropped_short == report.dropped_long == 1)
    processed = [json.loads(line) for line in Path(report.processed_file).read_text().splitlines()]
    assert mask_differences(rows, processed, tokenizer, unmask=unmask) == []
