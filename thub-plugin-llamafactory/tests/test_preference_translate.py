"""dpo and kto on LLaMA-Factory: the translation (pure Python) and the rows written for its own
preference data path (sharegpt ranking / kto_tag), with the rows that format cannot hold refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from thub.backend import TrainingData, UsageError
from thub.config.resolve import resolve
from thub.manager import load_registry

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


def _params(algorithm: str, **params: Any) -> dict[str, Any]:
    return resolve(load_registry(), algorithm, backend="llamafactory", flags={**BASE, **params}, environ={}).values()


def _plan(algorithm: str, **params: Any) -> dict[str, Any]:
    return load_registry().translate(algorithm, "llamafactory", _params(algorithm, **params))


def _write(algorithm: str, rows: list[dict[str, Any]], locations: list[str], **params: Any) -> list[str]:
    """What the runner writes for LLaMA-Factory (``write_preference_dataset``); its report lines."""
    from thub_plugin_llamafactory.dataset import write_preference_dataset

    resolved = _params(algorithm, **params)
    plan = load_registry().translate(algorithm, "llamafactory", resolved)
    return write_preference_dataset(algorithm, TrainingData(rows, locations, algorithm, "k"), resolved, plan)


def test_dpo_arguments() -> None:
    plan = _plan("dpo", beta=0.3, max_steps=4)
    args = plan["args"]
    assert (args["stage"], args["finetuning_type"], args["pref_beta"], args["pref_loss"]) == ("dpo", "full", 0.3,
                                                                                           "sigmoid")
    # LLaMA-Factory reads the rows thub wrote (dataset_dir) and tokenizes them itself: no tokenized_path
    assert (args["dataset"], args["dataset_dir"]) == ("thub_train", "out/llamafactory")
    assert "tokenized_path" not in args and "template" not in args
    assert "ref_model" not in args  # none: LLaMA-Factory's create_ref_model loads model_path again, frozen
    assert args["learning_rate"] == 5e-6 and args["cutoff_len"] == 1024
    data = plan["data"]
    assert (data["mode"], data["tokenized_by"], data["file"]) == ("dpo", "llamafactory", "out/llamafactory/train.json")
    assert data["reference"] == "a frozen copy of the initial policy (m)"
    assert "ranking" in data["format"]


@pytest.mark.parametrize(("params", "expected"), [
    ({"loss_type": "ipo"}, {"pref_loss": "ipo"}),
    ({"loss_type": "hinge"}, {"pref_loss": "hinge"}),
    ({"loss_type": "orpo"}, {"pref_loss": "orpo"}),
    ({"loss_type": "simpo", "simpo_gamma": 0.7}, {"pref_loss": "simpo", "simpo_gamma": 0.7}),
    ({"label_smoothing": 0.1}, {"pref_loss": "sigmoid", "dpo_label_smoothing": 0.1}),
    ({"reference_model_path": "ref"}, {"ref_model": "ref"}),
])
def test_dpo_losses_and_reference(params: dict[str, Any], expected: dict[str, Any]) -> None:
    args = _plan("dpo", **params)["args"]
    assert {k: args.get(k) for k in expected} == expected


def test_reference_free_losses_load_no_reference() -> None:
    assert _plan("dpo", loss_type="simpo")["data"]["reference"] == "none (reference-free loss)"


def test_kto_arguments() -> None:
    plan = _plan("kto", desirable_weight=1.5, undesirable_weight=0.5, beta=0.2, reference_model_path="ref")
    args = plan["args"]
    assert (args["stage"], args["pref_beta"], args["kto_chosen_weight"], args["kto_rejected_weight"]) == (
        "kto", 0.2, 1.5, 0.5)
    assert args["ref_model"] == "ref" and "pref_loss" not in args
    assert plan["data"]["format"] == "sharegpt, kto_tag"


@pytest.mark.parametrize("name, value", [
    ("packing", True), ("unmask_messages", True), ("validation_split", 0.1), ("lora_r", 4),
])
def test_what_llamafactory_preference_does_not_honour_is_refused(name: str, value: Any) -> None:
    with pytest.raises(UsageError, match=name):
        _plan("dpo", **{name: value})


@pytest.mark.parametrize("policy", ["truncate", "drop", "error"])
def test_overlong_policy_in_the_plan(policy: str) -> None:
    assert _plan("dpo", overlong=policy)["data"]["overlong"] == policy


def _pair(prompt: list[dict[str, Any]], chosen: Any = None, rejected: Any = None) -> dict[str, Any]:
    return {"prompt": prompt, "chosen": chosen or [{"role": "assistant", "content": "yes"}],
            "rejected": rejected or [{"role": "assistant", "content": "no"}]}


USER = {"role": "user", "content": "hi"}


def test_rows_in_llamafactorys_ranking_and_kto_formats(tmp_path: Path) -> None:
    rows = [_pair([{"role": "system", "content": "be brief"}, USER]),
            _pair([USER, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}])]
    lines = _write("dpo", rows, ["p.jsonl:1", "p.jsonl:2"], ckpt_output_dir=str(tmp_path))
    assert lines == ["thub: wrote 2 pairs (ranking) for LLaMA-Factory's own preference data path"]
    written = json.loads((tmp_path / "llamafactory" / "train.json").read_text())
    assert written[0] == {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hi"}],
                          "chosen": {"from": "gpt", "value": "yes"}, "rejected": {"from": "gpt", "value": "no"}}
    assert [t["from"] for t in written[1]["conversations"]] == ["human", "gpt", "human"]
    info = json.loads((tmp_path / "llamafactory" / "dataset_info.json").read_text())
    assert info == {"thub_train": {"file_name": "train.json", "formatting": "sharegpt", "ranking": True, "columns": {
        "messages": "conversations", "chosen": "chosen", "rejected": "rejected"}}}

    kto = [{"prompt": [USER], "completion": [{"role": "assistant", "content": "ok"}], "label": False}]
    _write("kto", kto, ["k.jsonl:1"], ckpt_output_dir=str(tmp_path / "kto"))
    assert json.loads((tmp_path / "kto" / "llamafactory" / "train.json").read_text()) == [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "ok"}], "kto_tag": False}]


@pytest.mark.parametrize("row, message", [
    (_pair([USER, {"role": "tool", "content": "42"}]), r"p.jsonl:7.prompt\[1\]: a tool call or tool result"),
    (_pair([USER, USER]), r"p.jsonl:7.prompt: expected user and assistant turns alternating.*'human' at turn 2"),
    (_pair([USER, {"role": "assistant", "content": "a"}]), r"p.jsonl:7.prompt: expected it to end with a user turn"),
    (_pair([USER], chosen=[{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]),
     r"p.jsonl:7.chosen: expected one assistant turn, found 2"),
    (_pair([USER], rejected=[{"role": "assistant", "content": "",
                              "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}]),
     r"p.jsonl:7.rejected\[0\]: a tool call"),
])
def test_rows_llamafactory_would_skip_are_refused_by_row(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    """LLaMA-Factory's converter skips such a row ("Skipping this abnormal example"): an error
    naming the row instead of a pair silently missing, and nothing written."""
    with pytest.raises(UsageError, match=message):
        _write("dpo", [row], ["p.jsonl:7"], ckpt_output_dir=str(tmp_path))
    assert not (tmp_path / "llamafactory").exists()


@pytest.mark.parametrize("policy", ["drop", "error"])
def test_overlong_rows_dropped_or_refused_with_the_models_template(tiny_model: Path, tmp_path: Path,
                                                                  policy: str) -> None:
    """``truncate`` is LLaMA-Factory's own cut (``infer_seqlen``); ``drop`` and ``error`` are thub's,
    on the prompt + longer answer as the model's chat template tokenizes it."""
    long = _pair([USER], chosen=[{"role": "assistant", "content": "word " * 200}])
    rows, locations = [_pair([USER]), long], ["p.jsonl:1", "p.jsonl:2"]
    flags = {"ckpt_output_dir": str(tmp_path), "model_path": str(tiny_model), "max_seq_len": 64, "overlong": policy}
    if policy == "error":
        with pytest.raises(UsageError, match=r"1 rows longer than max_seq_len=64 tokens.*: p.jsonl:2 \(use"):
            _write("dpo", rows, locations, **flags)
        assert not (tmp_path / "llamafactory").exists()
        return
    lines = _write("dpo", rows, locations, **flags)
    assert lines[1] == ("thub: WARNING: dropped 1 rows longer than max_seq_len=64 tokens (overlong=drop): "
                        "p.jsonl:2")
    assert len(json.loads((tmp_path / "llamafactory" / "train.json").read_text())) == 1
    with pytest.raises(UsageError, match="no preference row left to train on"):
        _write("dpo", [long], ["p.jsonl:2"], **flags)
