"""Every kind of bad data: one located message (file:line, field, expected vs found), exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from thub.cli.main import cli
from thub.data import DatasetSource, load_dataset_rows, load_source
from thub.errors import UsageError

GOOD = {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]}


def jsonl(path: Path, lines: list) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


CASES = [
    ("malformed_json", ["{bad json"], ":2: ", "malformed JSON"),
    ("unknown_role", [{"messages": [{"role": "bot", "content": "x"}, {"role": "assistant", "content": "y"}]}],
     ":2: messages[0].role: expected one of", "found 'bot'"),
    ("empty_content", [{"messages": [{"role": "user", "content": "  "}, {"role": "assistant", "content": "y"}]}],
     ":2: messages[0].content: expected non-empty text in a user turn", "found empty string"),
    ("no_assistant", [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}],
     ":2: messages: expected at least one assistant turn", "found roles system,user"),
    ("last_turn_user", [{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
                                      {"role": "user", "content": "u2"}]}],
     ":2: messages[2].role: expected the last turn to be trainable (assistant)", "found 'user'"),
    ("mixed_schemas", [{"instruction": "i", "output": "o"}], ":2: expected a 'messages' row like", "mixed schemas"),
    ("not_a_list", [{"messages": "hello"}], ":2: messages: expected a non-empty list of messages", "found 'hello'"),
    ("content_not_text", [{"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "a"}]}],
     ":2: messages[0].content: expected text", "found number 5"),
    ("tool_call_on_user", [{"messages": [{"role": "user", "content": "u", "tool_calls": [{"name": "f"}]},
                                         {"role": "assistant", "content": "a"}]}],
     ":2: messages[0].tool_calls: expected tool calls only on assistant turns", "role 'user'"),
    ("tool_call_without_name", [{"messages": [{"role": "user", "content": "u"},
                                              {"role": "assistant", "content": None, "tool_calls": [{"x": 1}]},
                                              {"role": "tool", "content": "r"},
                                              {"role": "assistant", "content": "a"}]}],
     "messages[1].tool_calls[0].function.name: expected a tool name", ""),
    ("unmask_not_bool", [{**GOOD, "unmask": "yes"}], ":2: unmask: expected true or false", "found 'yes'"),
    ("unknown_keys", [{"foo": 1}], ":2: messages: expected a 'messages' list", "found an object with keys foo"),
    ("not_an_object", [[1, 2]], ":2: expected a JSON object per row", "found a list of 2"),
]


@pytest.mark.parametrize(("name", "bad", "where", "found"), CASES, ids=[c[0] for c in CASES])
def test_bad_rows_are_located(tmp_path: Path, name: str, bad: list, where: str, found: str) -> None:
    path = jsonl(tmp_path / f"{name}.jsonl", [GOOD, *bad])
    with pytest.raises(UsageError) as info:
        load_dataset_rows(path)
    message = str(info.value)
    assert f"{path}{where}" in message or where in message, message
    assert found in message
    assert info.value.exit_code == 2


def test_unknown_first_row(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "u.jsonl", [{"foo": 1}])
    with pytest.raises(UsageError, match=r"u.jsonl:1: expected a row of a known format .* found keys foo"):
        load_dataset_rows(path)


def test_cli_check_exit_2_with_location(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "bad.jsonl", [GOOD, {"messages": [{"role": "user", "content": "q"}]}])
    result = CliRunner().invoke(cli, ["data", "check", path])
    assert result.exit_code == 2
    assert f"{path}:2: messages: expected at least one assistant turn" in result.output


def test_wrong_sharegpt_tags_say_which_setting(tmp_path: Path) -> None:
    # The silent ruin of LLaMA-Factory mixes: from/value tags applied to role/content data.
    path = jsonl(tmp_path / "s.jsonl", [{"conversations": [{"role": "user", "content": "q"},
                                                           {"role": "assistant", "content": "a"}]}])
    with pytest.raises(UsageError, match=r"s.jsonl:1: conversations\[0\].from: expected a role under 'from' "
                                         r"\(set this dataset's role_tag/content_tag\)"):
        load_source(DatasetSource(path, format="sharegpt", role_tag="from", content_tag="value"))


def test_sharegpt_unknown_speaker(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "s.jsonl", [{"conversations": [{"from": "asker", "value": "q"},
                                                           {"from": "gpt", "value": "a"}]}])
    with pytest.raises(UsageError, match=r"conversations\[0\].from: expected one of .*role_map.*found 'asker'"):
        load_dataset_rows(path)


@pytest.mark.parametrize(("row", "match"), [
    ({"instruction": "", "output": "o"}, "instruction: expected non-empty text, found empty string"),
    ({"instruction": "i", "output": "o", "input": 3}, "input: expected text or null, found number 3"),
])
def test_alpaca_errors(tmp_path: Path, row: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        load_dataset_rows(jsonl(tmp_path / "a.jsonl", [row]), "alpaca")


@pytest.mark.parametrize(("row", "match"), [
    ({"question": "q"}, r"a.jsonl:1: answer: expected a non-empty reference answer"),
    ({"question": "q", "answer": None}, r"answer: expected a non-empty reference answer .* found null"),
    ({"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "ground_truth": "x"},
     r"prompt\[-1\].role: expected a prompt ending with a user or tool turn"),
])
def test_grpo_errors(tmp_path: Path, row: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        load_dataset_rows(jsonl(tmp_path / "a.jsonl", [row]), "grpo")


@pytest.mark.parametrize(("row", "match"), [
    ({"input_ids": [1, 2], "labels": [1]}, "labels: expected 2 labels .one per input id., found 1"),
    ({"input_ids": [1, "x"], "labels": [1, 2]}, "input_ids: expected a non-empty list of integers"),
    ({"input_ids": [1, 2], "labels": [-100, -100]}, "labels: expected at least one trained label"),
])
def test_processed_errors(tmp_path: Path, row: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        load_dataset_rows(jsonl(tmp_path / "p.jsonl", [row]))


def test_document_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"d.jsonl:1: document: expected non-empty text, found empty string"):
        load_dataset_rows(jsonl(tmp_path / "d.jsonl", [{"document": ""}]))
    with pytest.raises(UsageError, match=r"body: expected non-empty text, found no such field"):
        load_dataset_rows(jsonl(tmp_path / "e.jsonl", [{"document": "x"}]), "document", document_column="body")


def test_many_bad_rows_are_summarised(tmp_path: Path) -> None:
    bad = {"messages": [{"role": "user", "content": "q"}]}
    path = jsonl(tmp_path / "many.jsonl", [bad] * 500 + ["{oops"] * 20)
    with pytest.raises(UsageError) as info:
        load_dataset_rows(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 6  # five shown verbatim + one summary line
    assert lines[0].startswith(f"{path}:1: ")
    assert "515 more problem(s); 520 in total (no_assistant: 500, json: 20)" in lines[-1]


def test_json_array_errors_have_real_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('[\n  {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},\n'
                    '  {"messages": [{"role": "user", "content": "q"}]}\n]\n')
    with pytest.raises(UsageError, match=r"a.json:3: messages: expected at least one assistant turn"):
        load_dataset_rows(str(path))
    broken = tmp_path / "b.json"
    broken.write_text('[\n  {"a": 1},\n  {"a": \n')
    with pytest.raises(UsageError, match=r"b.json:\d+: expected a JSON value, found malformed JSON"):
        load_dataset_rows(str(broken))
    not_array = tmp_path / "c.json"
    not_array.write_text('[1] [2]')
    with pytest.raises(UsageError, match="c.json"):
        load_dataset_rows(str(not_array))


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_dataset_rows(str(tmp_path / "missing.jsonl"))
    (tmp_path / "x.tsv").write_text("a\tb\n")  # (.csv is read: tests/test_data_inputs_csv.py)
    with pytest.raises(UsageError, match="unsupported file type '.tsv'"):
        load_dataset_rows(str(tmp_path / "x.tsv"))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UsageError, match="empty.jsonl:1: expected at least one row, found an empty file"):
        load_dataset_rows(str(tmp_path / "empty.jsonl"))
    (tmp_path / "dir").mkdir()
    with pytest.raises(UsageError, match="not a saved Hugging Face dataset"):
        load_dataset_rows(str(tmp_path / "dir"))
    (tmp_path / "bin.jsonl").write_bytes(b'{"text": "\xff"}\n')
    with pytest.raises(UsageError, match=r"bin.jsonl:1: expected UTF-8 text"):
        load_dataset_rows(str(tmp_path / "bin.jsonl"))
    with pytest.raises(UsageError, match="format: expected auto or one of"):
        load_dataset_rows(jsonl(tmp_path / "ok.jsonl", [GOOD]), "csv")


def test_check_json_report_on_errors(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "bad.jsonl", [GOOD, {"messages": [{"role": "bot", "content": "q"}]}])
    result = CliRunner().invoke(cli, ["data", "check", "--json", path])
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["error_count"] == 1
    assert report["errors"][0]["location"] == f"{path}:2"
    assert report["errors"][0]["field"] == "messages[0].role"


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_blank_lines_before_a_bad_row_keep_the_files_line_numbers(tmp_path: Path, newline: str) -> None:
    """Blank and whitespace-only lines are skipped, never uncounted: each error names the file's real line,
    for a row that is valid JSON (fast path), malformed JSON, and invalid UTF-8 (the bytes path)."""
    bad_row = json.dumps({"messages": [{"role": "usr", "content": "x"}, {"role": "assistant", "content": "y"}]})
    lines = [json.dumps(GOOD), "", "   ", bad_row, "", "{bad json", "\t", json.dumps(GOOD)]
    path = tmp_path / "blank.jsonl"
    path.write_text(newline.join(lines) + newline)
    with pytest.raises(UsageError) as raised:
        load_dataset_rows(str(path))
    message = str(raised.value)
    assert f"{path}:4: messages[0].role" in message and f"{path}:6: expected a JSON object" in message
    path.write_bytes(newline.join(lines[:5]).encode() + newline.encode() + b'{"messages": "\xff"}' + b"\n")
    with pytest.raises(UsageError, match=r"blank.jsonl:6: expected UTF-8 text") as raised:
        load_dataset_rows(str(path))
    assert f"{path}:4: messages[0].role" in str(raised.value)  # the same numbers on the bytes path
    array = tmp_path / "rows.json"
    array.write_text("[\n" + json.dumps(GOOD) + ",\n\n\n" + bad_row + "\n]\n")
    with pytest.raises(UsageError, match=r"rows.json:5: messages\[0\].role"):
        load_dataset_rows(str(array))
