"""Data kinds are registered like rewards (``thub_register_data_kinds``, issue 26 item 1): the example
of docs/hooks.md, run as an outside plugin, reads, checks and previews its rows through the public
hook only; an algorithm's ``data_kinds`` gate it; a format registered twice is refused."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from thub import hookimpl
from thub.errors import UsageError
from thub.specs import AlgorithmSpec, DataFormatSpec, DataKindSpec

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny"


def _docs_example() -> dict[str, str]:
    """The python block of the ``thub_register_data_kinds`` section of docs/hooks.md, by file."""
    docs = (ROOT / "docs" / "hooks.md").read_text()
    section = docs.split("## `thub_register_data_kinds(register)`", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "docs/hooks.md: the data kind section has no python example"
    names = re.findall(r"^# (my_plugin/\w+\.py)$", block.group(1), re.M)
    bodies = re.split(r"^# my_plugin/\w+\.py\n", block.group(1), flags=re.M)[1:]
    return dict(zip(names, bodies, strict=True))


@pytest.fixture(scope="module")
def docs_plugin(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The docs' example written out as the package ``my_plugin`` and imported (as an entry point would)."""
    where = tmp_path_factory.mktemp("plugin")
    package = where / "my_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, body in _docs_example().items():
        # the docs' snippets leave out the import every plugin module has
        (where / name).write_text("from thub import hookimpl\n" + body)
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module("my_plugin.plugin")
    finally:
        sys.path.remove(str(where))
        for name in [m for m in sys.modules if m == "my_plugin" or m.startswith("my_plugin.")]:
            del sys.modules[name]


class PairsAlgorithm:
    """An algorithm training on the docs' ``pairs`` kind."""

    @hookimpl
    def thub_register_algorithms(self, register):  # type: ignore[no-untyped-def]
        register(AlgorithmSpec("pairwise", "Trains on pairs.", "thub.params:BaseParams", ("pairs",)))


def _pair(better: str, worse: str, role: str = "user") -> dict[str, Any]:
    return {"better": [{"role": role, "content": "2+2?"}, {"role": "assistant", "content": better}],
            "worse": [{"role": role, "content": "2+2?"}, {"role": "assistant", "content": worse}]}


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_registering_a_kind_imports_none_of_its_functions(docs_plugin: Any, thub_plugin: Any) -> None:
    registry = thub_plugin(("my_plugin", docs_plugin), entry_points=False)
    assert "pairs" in registry.data_kinds and registry.data_kinds["pairs"].provenance.plugin == "my_plugin"
    assert "my_plugin.data" not in sys.modules  # named by import string, imported when data is read
    assert [fmt.name for fmt, _ in registry.data_formats()][:2] == ["processed", "grpo"]  # priority first
    assert registry.data_format("pairs")[1].name == "pairs"


def test_the_docs_kind_is_checked_with_file_line_errors(docs_plugin: Any, thub_plugin: Any, thub_cli: Any,
                                                       tmp_path: Path) -> None:
    thub_plugin(("my_plugin", docs_plugin), entry_points=False)
    data = _jsonl(tmp_path / "p.jsonl", [_pair("4", "5"), _pair("4", "4"), _pair("4", "5", role="human")])
    result = thub_cli("data", "check", str(data))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"{data}:2: worse: expected an answer other than the better one, found the same answer" in result.stderr
    assert f"{data}:3: better[0].role: expected one of" in result.stderr and "Traceback" not in result.stderr
    good = _jsonl(tmp_path / "good.jsonl", [_pair("4", "5")])
    report = thub_cli("data", "check", str(good), "--json").json()
    assert report["ok"] and report["sources"][0]["format"] == "pairs"
    # the --format choices and the "no known format" message come from the registry
    assert thub_cli("data", "check", "--format", "pairs", str(good)).exit_code == 0
    assert "pairs" in thub_cli("data", "check", "--help").stdout
    odd = _jsonl(tmp_path / "odd.jsonl", [{"foo": 1}])
    assert "better/worse" in thub_cli("data", "check", str(odd)).stderr


def test_the_docs_kind_previews_both_answers_side_by_side(docs_plugin: Any, thub_plugin: Any,
                                                                 thub_cli: Any, tmp_path: Path) -> None:
    thub_plugin(("my_plugin", docs_plugin), entry_points=False)
    data = _jsonl(tmp_path / "p.jsonl", [_pair("four", "five")])
    shown = thub_cli("data", "preview", "--model", str(TINY), str(data), "--json")
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    panels = shown.json()["examples"][0]["panels"]
    assert [p["title"] for p in panels] == ["better", "worse"]
    trained = ["".join(s["text"] for s in p["segments"] if s["trained"]) for p in panels]
    assert "four" in trained[0] and "five" not in trained[0] and "five" in trained[1]
    text = thub_cli("data", "preview", "--model", str(TINY), str(data)).stdout
    assert text.index("-- better --") < text.index("[[four") < text.index("-- worse --") < text.index("[[five")


def test_an_algorithm_accepts_its_kinds_and_refuses_others(docs_plugin: Any, thub_plugin: Any,
                                                           tmp_path: Path) -> None:
    from thub.data.training import validate_training_data

    registry = thub_plugin(("my_plugin", docs_plugin), ("pairwise", PairsAlgorithm()), entry_points=False)
    pairs = _jsonl(tmp_path / "p.jsonl", [_pair("4", "5")])
    chat = ROOT / "examples" / "data" / "chat.jsonl"
    params = {"data_path": str(pairs), "data_format": "auto", "seed": 1}
    assert validate_training_data(params, registry.algorithm("pairwise")).kind == "pairs"
    refused = f"pairwise expects pairs rows; `{chat}:1` is a chat row (messages)"
    with pytest.raises(UsageError, match=re.escape(refused)):
        validate_training_data({**params, "data_path": str(chat)}, registry.algorithm("pairwise"))
    with pytest.raises(UsageError, match=re.escape(f"sft expects chat, document or processed rows; `{pairs}:1` is a "
                                                   "pairs row (better + worse conversations)")):
        validate_training_data(params, registry.algorithm("sft"))


def test_data_format_is_validated_against_the_registered_formats(docs_plugin: Any, thub_plugin: Any) -> None:
    from pydantic import ValidationError

    from thub.params import BaseParams

    base = {"model_path": "m", "ckpt_output_dir": "o", "data_path": "d.jsonl"}
    choices = r"expected auto or one of messages, sharegpt, .* \(did you mean 'sharegpt'"
    with pytest.raises(ValidationError, match=choices):
        BaseParams(**base, data_format="sharegtp")
    with pytest.raises(ValidationError, match=r"\(chat is a data kind; its formats: messages, sharegpt, alpaca\)"):
        BaseParams(**base, data_format="chat")
    with pytest.raises(ValidationError):
        BaseParams(**base, data_format="pairs")  # no plugin registers it yet
    thub_plugin(("my_plugin", docs_plugin), entry_points=False)
    assert BaseParams(**base, data_format="pairs").data_format == "pairs"
    assert "pairs" in BaseParams.model_json_schema()["properties"]["data_format"]["enum"]


class Clash:
    """A kind reusing a built-in format's name, and one with a good name: the first is refused."""

    @hookimpl
    def thub_register_data_kinds(self, register):  # type: ignore[no-untyped-def]
        register(DataKindSpec("mine", "mine", (DataFormatSpec("messages", "x:y", "x:z"),)))
        register(DataKindSpec("other", "other", (DataFormatSpec("other", "x:y", "x:z"),)))


def test_a_format_registered_twice_is_refused_and_the_rest_keeps_working(thub_plugin: Any, capsys: Any) -> None:
    registry = thub_plugin(("clash", Clash()), entry_points=False)
    assert "mine" not in registry.data_kinds and "other" in registry.data_kinds
    assert any("format 'messages' is already registered by data kind 'chat'" in f.error for f in registry.failures)
    from thub.data.kinds import detect_format

    # "other" names a module that does not exist: left out, said once, every other format still recognised
    assert detect_format({"messages": []}) == "messages" and detect_format({"input_ids": [1]}) == "processed"
    assert capsys.readouterr().err.count("data format 'other' of clash is left out: x:y does not import") == 1


def test_the_old_data_formats_keyword_means_their_kinds(thub_plugin: Any) -> None:
    from thub.data.kinds import accepted_kinds

    thub_plugin(entry_points=False)
    old = AlgorithmSpec("old", "An outside plugin's algorithm.", "thub.params:BaseParams",
                        data_formats=("messages", "sharegpt", "document"))
    assert accepted_kinds(old) == ["chat", "document"]
