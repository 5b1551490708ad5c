"""Measured, not assumed (issue 25): thub's expected counts, the comparison with what a library
built, and ``context.report_built`` on a real run directory (no training library needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from thub.data import load_tokenizer, tokenize_chat, training_rows
from thub.data.expected import expected_counts, mask_hash, save_expected, trained_count
from thub.data.training import DATA_DIR, save_training_data, validate_training_data
from thub.runner.built import BUILT_FILE, DataMismatch, collated_labels, compare_built
from thub.runner.context import RunContext
from thub.runner.result import write_result
from thub.runner.rundir import RunDirectory

TINY = Path(__file__).parents[1] / "examples" / "tiny"


def _params(data: Path, out: Path, **extra: Any) -> dict[str, Any]:
    return {"model_path": str(TINY), "data_path": str(data), "ckpt_output_dir": str(out), "max_seq_len": 256,
            "overlong": "truncate", "unmask_messages": False, "seed": 42, **extra}


def _context(params: dict[str, Any]) -> RunContext:
    run_dir = RunDirectory(Path(params["ckpt_output_dir"]))
    run_dir.path.mkdir(parents=True, exist_ok=True)
    data = validate_training_data(params)
    save_training_data(data, run_dir.path / DATA_DIR)
    save_expected(params, data, run_dir.path / DATA_DIR)  # what the parent keeps before the child starts
    return RunContext(algorithm="sft", backend="fake", params=params, run_dir=run_dir)


def _thub_labels(params: dict[str, Any]) -> list[list[int]]:
    rows, locations = training_rows(params)
    samples, _ = tokenize_chat(rows, load_tokenizer(str(TINY)), params["max_seq_len"],
                               unmask=params["unmask_messages"], overlong=params["overlong"], locations=locations)
    return [s["labels"] for s in samples]


def test_expected_counts_are_thubs_masks_with_each_examples_row(edge_cases: Path) -> None:
    params = _params(edge_cases / "chat.jsonl", Path("unused"), overlong="drop")
    rows, locations = training_rows(params)
    counts = expected_counts(params, rows, locations, "chat", load_tokenizer(str(TINY)))
    assert counts is not None
    labels = _thub_labels(params)
    assert counts["examples"] == len(labels) == 9  # line 7 (1294 tokens) dropped
    assert counts["per_example"]["rows"] == [0, 1, 2, 3, 4, 5, 7, 8, 9]  # the examples' rows: 7 left out
    assert counts["per_example"]["hashes"] == [mask_hash(x) for x in labels]
    assert counts["trained_tokens"] == sum(trained_count(x) for x in labels)


def test_report_built_records_a_measurement_equal_to_thubs(edge_cases: Path, tmp_path: Path) -> None:
    params = _params(edge_cases / "chat.jsonl", tmp_path / "run")
    context = _context(params)
    summary = context.report_built(_thub_labels(params), by="fake 1.0")
    assert summary["matches"] is True and summary["masks_equal"] is True and summary["first_location"] is None
    assert summary["examples"] == summary["expected"]["examples"] == 10
    result = write_result(context.run_dir, {"status": "succeeded"}, started=0.0, model_path=str(TINY))
    assert result["built"]["trained_tokens"] == summary["trained_tokens"] and result["built"]["refused"] is False


def test_a_dropped_example_is_refused_naming_its_file_and_line(edge_cases: Path, tmp_path: Path) -> None:
    params = _params(edge_cases / "chat.jsonl", tmp_path / "run")
    context = _context(params)
    labels = _thub_labels(params)
    del labels[2]  # the library "drops" the parallel tool-call row
    with pytest.raises(DataMismatch) as caught:
        context.report_built(labels, by="fake 1.0", reason="its converter skips parallel tool calls")
    message = str(caught.value)
    assert message.startswith("backend fake builds 9 examples; thub validated 10")
    assert f"first affected: {edge_cases / 'chat.jsonl'}:3" in message
    assert "(the library: its converter skips parallel tool calls)" in message
    built = json.loads((context.run_dir.path / BUILT_FILE).read_text())
    assert built["refused"] is True and built["message"] == message


def test_other_tokens_with_the_same_counts_are_a_mask_difference(edge_cases: Path, tmp_path: Path) -> None:
    params = _params(edge_cases / "chat.jsonl", tmp_path / "run", allow_data_mismatch=True)
    context = _context(params)
    labels = _thub_labels(params)
    first = labels[0]
    trained_at = [i for i, x in enumerate(first) if x != -100]
    # one trained token moved one place later: as many trained tokens, other ones
    labels[0] = list(first)
    labels[0][trained_at[0]], labels[0][trained_at[-1] + 1] = -100, 7
    summary = context.report_built(labels, by="fake 1.0")
    assert summary["masks_equal"] is False and summary["matches"] is False and summary["allowed"] is True
    assert summary["first_location"] == f"{edge_cases / 'chat.jsonl'}:1"


def test_counts_only_validation_split_and_packing() -> None:
    expected = {"examples": 4, "tokens": 40, "trained_tokens": 20,
                "per_example": {"rows": [0, 1, 2, 3], "tokens": [10] * 4, "trained": [5] * 4,
                                "hashes": ["a", "b", "c", "d"]}}
    locations = [f"d.jsonl:{i}" for i in range(1, 5)]

    def measured(hashes: list[str]) -> dict[str, Any]:
        return {"examples": len(hashes), "tokens": 10 * len(hashes), "trained_tokens": 5 * len(hashes),
                "per_example": {"tokens": [10] * len(hashes), "trained": [5] * len(hashes), "hashes": hashes}}

    # one of four held out for validation (ceil(4 * 0.25)), in another order: as validated
    assert compare_built(measured(["d", "a", "c"]), expected, {"validation_split": 0.25}, locations)["matches"]
    dropped = compare_built(measured(["a", "c", "d"]), expected, {}, locations)
    assert dropped["matches"] is False and dropped["first_location"] == "d.jsonl:2"
    packed = {"examples": 1, "tokens": 40, "trained_tokens": 20, "per_example": {"tokens": [40], "trained": [20],
                                                                                "hashes": ["x"]}}
    assert compare_built(packed, expected, {"packing": True}, locations)["matches"] is True
    assert compare_built({"examples": 3, "per_example": None}, {"examples": 3, "per_example": None}, {},
                         [])["matches"] is True
    assert compare_built(measured(["a"]), None, {}, locations)["matches"] is None


def test_collated_labels_apply_the_collator_per_example_and_drop_padding() -> None:
    def collate(batch: list[dict[str, Any]]) -> dict[str, Any]:  # pads to 8, as a collator with pad_to_multiple_of
        ids = batch[0]["labels"]
        return {"labels": [ids + [-100] * (8 - len(ids))], "attention_mask": [[1] * len(ids) + [0] * (8 - len(ids))]}

    labels = collated_labels([{"labels": [-100, 3, 4]}, {"labels": [5]}], collate)
    assert labels is not None and list(labels) == [[-100, 3, 4], [5]]
    assert collated_labels([{"prompt": "x"}], lambda batch: batch) is None  # no labels (GRPO): counted only


def test_an_example_thub_did_not_validate_is_named_by_its_place() -> None:
    expected = {"examples": 2, "tokens": 20, "trained_tokens": 10,
                "per_example": {"rows": [0, 2], "tokens": [10, 10], "trained": [5, 5], "hashes": ["a", "c"]}}
    measured = {"examples": 3, "tokens": 30, "trained_tokens": 15,
                "per_example": {"tokens": [10] * 3, "trained": [5, 7, 5], "hashes": ["a", "b", "c"]}}
    found = compare_built(measured, expected, {}, ["d:1", "d:2", "d:3"])
    assert found["matches"] is False and found["first_location"] is None
    assert found["difference"] == ("builds 3 examples; thub validated 2; the library's example 2 (7 trained tokens) "
                                   "is none of the validated ones")


def test_the_sdk_documents_report_built() -> None:
    """The call for backends not built on transformers.Trainer is part of the documented SDK."""
    import thub.backend

    text = (Path(__file__).parents[1] / "docs" / "writing-plugins.md").read_text()
    assert "context.report_built(labels, by=" in text and "allow_data_mismatch" in text
    assert {"DataMismatch", "collated_labels"} <= set(thub.backend.__all__)
    assert thub.backend.DataMismatch.__mro__[1].__name__ == "UsageError"  # exit 2, no traceback


def test_data_thub_cannot_mask_keeps_no_expected_counts(edge_cases: Path, tmp_path: Path) -> None:
    """overlong=error with an overlong row: the backend's own preparation refuses it, as before;
    the parent keeps nothing to compare against (the run records its measurement as not compared)."""
    params = _params(edge_cases / "chat.jsonl", tmp_path / "run", overlong="error")
    data = validate_training_data(params)
    assert save_expected(params, data, tmp_path / "kept") is None
    assert not (tmp_path / "kept" / "expected.json").exists()


@pytest.mark.parametrize("options", [{}, {"pad_to_multiple_of": 64}, {"padding_free": True}])
def test_collated_labels_in_chunks_equal_one_example_at_a_time(options: dict[str, Any], edge_cases: Path) -> None:
    """TRL's own collator, batched (split back by the attention mask) or padding-free (one at a
    time): each example's labels exactly as collating it alone gives them."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    params = _params(edge_cases / "chat.jsonl", Path("unused"))
    rows, locations = training_rows(params)
    samples, _ = tokenize_chat(rows * 20, load_tokenizer(str(TINY)), 256, locations=locations * 20)
    dataset = Dataset.from_list(samples)  # what SFTTrainer iterates, 200 examples: several chunks
    collator = DataCollatorForLanguageModeling(pad_token_id=0, **options)
    alone = [collator([example])["labels"][0].tolist() for example in dataset]
    if not options.get("padding_free"):
        alone = [labels[:len(s["labels"])] for labels, s in zip(alone, samples, strict=True)]  # padding
    measured = collated_labels(dataset, collator)
    assert measured is not None and list(measured) == alone
