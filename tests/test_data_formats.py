"""Every input format and file type normalises to thub's canonical rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thub.data import DatasetSource, detect_format, load_dataset_rows, load_source


def write_jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello"}]}


def test_messages(tmp_path: Path) -> None:
    rows = load_dataset_rows(write_jsonl(tmp_path / "a.jsonl", [CHAT, {**CHAT, "unmask": True}]))
    assert rows[0] == CHAT
    assert rows[1]["unmask"] is True


def test_messages_content_parts_and_extra_fields_dropped(tmp_path: Path) -> None:
    row = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                         "weird": 1}, {"role": "assistant", "content": "c", "name": "bot"}], "id": 7}
    rows = load_dataset_rows(write_jsonl(tmp_path / "a.jsonl", [row]))
    assert rows == [{"messages": [{"role": "user", "content": "ab"},
                                  {"role": "assistant", "content": "c", "name": "bot"}]}]


def test_tool_traces_and_legacy_function_call(tmp_path: Path) -> None:
    modern = {"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "content": "sunny", "name": "get"},
        {"role": "assistant", "content": "Sunny."}]}
    legacy = {"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "function_call": {"name": "get", "arguments": "{\"city\": \"Oslo\"}"}},
        {"role": "function", "content": "sunny", "name": "get"},
        {"role": "assistant", "content": "Sunny."}]}
    rows = load_dataset_rows(write_jsonl(tmp_path / "t.jsonl", [modern, legacy]))
    call = {"type": "function", "function": {"name": "get", "arguments": {"city": "Oslo"}}}
    assert rows[0]["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "c1"}]}
    assert rows[1]["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert rows[1]["messages"][2] == {"role": "tool", "content": "sunny", "name": "get"}


def test_sharegpt_default_tags(tmp_path: Path) -> None:
    row = {"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"},
                             {"from": "gpt", "value": "A"}]}
    rows = load_dataset_rows(write_jsonl(tmp_path / "s.jsonl", [row]))
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    assert detect_format(row) == "sharegpt"


def test_sharegpt_role_content_tags_detected(tmp_path: Path) -> None:
    row = {"conversations": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]}
    assert load_dataset_rows(write_jsonl(tmp_path / "s.jsonl", [row]))[0]["messages"][1] == {
        "role": "assistant", "content": "A"}


def test_sharegpt_custom_tags_and_roles(tmp_path: Path) -> None:
    row = {"dialog": [{"speaker": "asker", "text": "Q"}, {"speaker": "bot", "text": "A"}]}
    path = write_jsonl(tmp_path / "s.jsonl", [row])
    source = DatasetSource.from_dict({"path": path, "format": "sharegpt", "messages": "dialog", "role_tag": "speaker",
                                      "content_tag": "text", "user_tag": "asker", "assistant_tag": "bot"})
    assert load_source(source).rows == [{"messages": [{"role": "user", "content": "Q"},
                                                      {"role": "assistant", "content": "A"}]}]


def test_sharegpt_function_call_and_observation(tmp_path: Path) -> None:
    row = {"conversations": [{"from": "human", "value": "Q"},
                             {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
                             {"from": "observation", "value": "2"}, {"from": "gpt", "value": "A"}]}
    messages = load_dataset_rows(write_jsonl(tmp_path / "s.jsonl", [row]))[0]["messages"]
    assert messages[1] == {"role": "assistant", "content": "",
                           "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}
    assert messages[2]["role"] == "tool"


def test_alpaca(tmp_path: Path) -> None:
    rows = load_dataset_rows(write_jsonl(tmp_path / "a.jsonl", [
        {"instruction": "Add", "input": "1 2", "output": "3"}, {"instruction": "Say hi", "input": "", "output": "hi",
                                                                  "system": "S"}]))
    assert rows[0]["messages"] == [{"role": "user", "content": "Add\n\n1 2"}, {"role": "assistant", "content": "3"}]
    assert rows[1]["messages"][0] == {"role": "system", "content": "S"}
    assert rows[1]["messages"][1] == {"role": "user", "content": "Say hi"}


def test_document(tmp_path: Path) -> None:
    assert load_dataset_rows(write_jsonl(tmp_path / "d.jsonl", [{"document": "abc"}])) == [{"document": "abc"}]
    assert load_dataset_rows(write_jsonl(tmp_path / "t.jsonl", [{"text": "abc"}])) == [{"document": "abc"}]
    path = write_jsonl(tmp_path / "c.jsonl", [{"body": "abc"}])
    assert load_dataset_rows(path, "document", document_column="body") == [{"document": "abc"}]


def test_grpo(tmp_path: Path) -> None:
    rows = load_dataset_rows(write_jsonl(tmp_path / "g.jsonl", [
        {"question": "1+1?", "answer": 2},
        {"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"}], "ground_truth": "4"},
        {"messages": [{"role": "user", "content": "3+3?"}], "ground_truth": "6"}]))
    assert rows[0] == {"prompt": [{"role": "user", "content": "1+1?"}], "ground_truth": "2"}
    assert rows[1]["prompt"][0]["role"] == "system" and rows[1]["ground_truth"] == "4"
    assert rows[2]["prompt"] == [{"role": "user", "content": "3+3?"}]


def test_processed_passthrough(tmp_path: Path) -> None:
    row = {"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "len": 3}
    assert load_dataset_rows(write_jsonl(tmp_path / "p.jsonl", [row])) == [row]


def test_json_array_and_jsonl_named_json(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([CHAT, CHAT], indent=2))
    assert len(load_dataset_rows(str(tmp_path / "a.json"))) == 2
    (tmp_path / "b.json").write_text(json.dumps(CHAT) + "\n" + json.dumps(CHAT) + "\n")
    assert len(load_dataset_rows(str(tmp_path / "b.json"))) == 2


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"instruction": "a", "input": "", "output": "b"}]), tmp_path / "a.parquet")
    rows = load_dataset_rows(str(tmp_path / "a.parquet"))
    assert rows[0]["messages"][1] == {"role": "assistant", "content": "b"}


def test_saved_hf_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([CHAT, CHAT]).save_to_disk(str(tmp_path / "ds"))
    assert load_dataset_rows(str(tmp_path / "ds")) == [CHAT, CHAT]
    datasets.DatasetDict({"train": datasets.Dataset.from_list([CHAT])}).save_to_disk(str(tmp_path / "dd"))
    assert load_dataset_rows(str(tmp_path / "dd")) == [CHAT]


@pytest.mark.parametrize(("row", "fmt"), [
    (CHAT, "messages"), ({"conversations": []}, "sharegpt"), ({"instruction": "", "output": ""}, "alpaca"),
    ({"text": ""}, "document"), ({"question": "", "answer": ""}, "grpo"),
    ({"messages": [], "ground_truth": ""}, "grpo"),
    ({"input_ids": []}, "processed"), ({"foo": 1}, "unknown"), ([], "unknown")])
def test_detect_format(row: object, fmt: str) -> None:
    assert detect_format(row) == fmt  # type: ignore[arg-type]


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    # A file with both columns: explicit "document" reads the text column instead of guessing.
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "doc", "instruction": "i", "output": "o"}])
    assert load_dataset_rows(path)[0]["messages"][0]["content"] == "i"
    assert load_dataset_rows(path, "document") == [{"document": "doc"}]


def test_dataset_source_parse() -> None:
    source = DatasetSource.parse("dir/a.jsonl:format=sharegpt,role_tag=role,user_tag=asker,prob=0.3")
    assert (source.path, source.format, source.role_tag, source.probability) == ("dir/a.jsonl", "sharegpt", "role", 0.3)
    assert source.role_map == {"asker": "user"}
    assert DatasetSource.parse("C:/x.jsonl").path == "C:/x.jsonl"
