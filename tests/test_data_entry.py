"""One data entry: a backend trains on the rows the parent validated (``context.data()``), read once.

The parent (``thub.train``) validates and mixes the data before anything starts and keeps the
rows in ``thub_data/``; the training child reads them back without validating again, with the
mixing and ShareGPT tag settings applied once.
"""

from __future__ import annotations

import importlib
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

import thub.data.training as training
from thub import hookimpl
from thub.data.training import DATA_DIR, save_training_data, training_data, validate_training_data
from thub.runner.context import RunContext
from thub.runner.rundir import RunDirectory
from thub.specs import AlgorithmSpec, BackendSpec

# the module (``thub.data.prepare`` the attribute is the function of the same name)
prepare_module = importlib.import_module("thub.data.prepare")

# A runner that records what it trains on and how often its process validated the data.
ROWS_MODULE = '''
import json
from pathlib import Path

import thub.data.training as training


def run(context):
    calls = []
    original = training.load_sources
    training.load_sources = lambda sources: calls.append(len(sources)) or original(sources)
    first = context.data()
    second = context.data()
    Path(context.run_dir.path, "seen.json").write_text(json.dumps({
        "rows": first.rows, "locations": first.locations, "kind": first.kind,
        "validations": len(calls), "same_object": first is second}))
    return {}
'''


class _RowsPlugin:
    @hookimpl
    def thub_register_algorithms(self, register: Any) -> None:
        register(AlgorithmSpec("rowsecho", "records the rows it trains on", "thub_builtins.params:SFTParams"))

    @hookimpl
    def thub_register_backends(self, register: Any) -> None:
        register(BackendSpec("rowsecho", "records the rows it trains on",
                             {"rowsecho": frozenset({"datasets", "mix_strategy", "mix_probabilities", "seed"})},
                             "h16_rows:run"))


class _Counter:
    """Counts calls of ``thub.data.training.load_sources`` (one per validation) in this process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = training.load_sources

        def counted(sources: Any) -> Any:
            self.calls += 1
            return original(sources)

        monkeypatch.setattr(training, "load_sources", counted)
        monkeypatch.setattr(prepare_module, "load_sources", counted)


def _tagged_sharegpt(tmp_path: Path, demo_data: Path) -> Path:
    """The demo ShareGPT rows with other tag names (role/text, user/bot): only their tags read them."""
    path = tmp_path / "tagged.jsonl"
    lines = []
    for raw in (demo_data / "sharegpt.jsonl").read_text().splitlines():
        row = json.loads(raw)
        names = {"human": "user", "gpt": "bot", "system": "system"}
        lines.append(json.dumps({"conversations": [{"role": names[m["from"]], "text": m["value"]}
                                                   for m in row["conversations"]]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _mixed_params(tmp_path: Path, demo_data: Path) -> dict[str, Any]:
    tagged = _tagged_sharegpt(tmp_path, demo_data)
    return {"data_path": str(demo_data / "chat.jsonl"), "data_format": "auto", "seed": 7,
            "datasets": [{"path": str(tagged), "format": "sharegpt", "role_tag": "role", "content_tag": "text",
                          "user_tag": "user", "assistant_tag": "bot"}],
            "mix_strategy": "interleave_under", "mix_probabilities": [0.5, 0.5]}


@pytest.fixture
def rows_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thub_plugin: Any) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "h16_rows.py").write_text(textwrap.dedent(ROWS_MODULE))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))  # the training child imports the runner too
    thub_plugin(("h16_rows_plugin", _RowsPlugin()))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return model


def test_the_child_trains_on_the_rows_the_parent_validated(rows_backend: Path, demo_data: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A real supervised run: the parent validates once; the child reads those rows back (mix
    and tags applied once, same order) and validates nothing itself."""
    import thub

    params = _mixed_params(tmp_path, demo_data)
    expected = validate_training_data(params)
    assert expected.kind == "chat" and len(expected.rows) > 8
    # the interleaving is the seeded one, not the files one after the other
    assert expected.locations != sorted(expected.locations)
    counter = _Counter(monkeypatch)
    out = tmp_path / "run"
    result = thub.train("rowsecho", backend="rowsecho", model_path=str(rows_backend), ckpt_output_dir=str(out),
                        **params)
    assert result["status"] == "succeeded", result
    assert counter.calls == 1  # the parent validated once
    seen = json.loads((out / "seen.json").read_text())
    assert seen["validations"] == 0, "the child validated the data again instead of reading the parent's rows"
    assert seen["same_object"] is True  # a second context.data() does not read again either
    assert seen["rows"] == expected.rows and seen["locations"] == expected.locations and seen["kind"] == "chat"
    tagged = [row for row, where in zip(seen["rows"], seen["locations"], strict=True) if "tagged.jsonl" in where]
    assert tagged and {m["role"] for row in tagged for m in row["messages"]} <= {"system", "user", "assistant"}
    assert (out / DATA_DIR / "rows.json").is_file()


def test_a_file_changed_after_validation_is_validated_again(demo_data: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "chat.jsonl"
    shutil.copy(demo_data / "chat.jsonl", data)
    params = {"data_path": str(data), "data_format": "auto", "seed": 42}
    kept = tmp_path / "run" / DATA_DIR
    assert save_training_data(validate_training_data(params), kept)
    counter = _Counter(monkeypatch)
    first = training_data(params, kept)
    assert counter.calls == 0  # kept rows, read back
    extra = {"messages": [{"role": "user", "content": "added"}, {"role": "assistant", "content": "later"}]}
    with data.open("a") as handle:
        handle.write(json.dumps(extra) + "\n")
    second = training_data(params, kept)
    assert counter.calls == 1 and len(second.rows) == len(first.rows) + 1
    assert second.rows[-1]["messages"][0]["content"] == "added"
    # other data settings: another key, validated again too
    training_data({**params, "data_format": "messages"}, kept)
    assert counter.calls == 2


def test_a_same_size_edit_with_its_mtime_restored_is_validated_again(demo_data: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept rows are keyed on the file's contents: an edit of the same size whose modification time
    is set back (an editor, rsync -t, a checkout) is not hidden behind the old rows."""
    import os

    data = tmp_path / "chat.jsonl"
    shutil.copy(demo_data / "chat.jsonl", data)
    params = {"data_path": str(data), "data_format": "auto", "seed": 42}
    kept = tmp_path / "run" / DATA_DIR
    assert save_training_data(validate_training_data(params), kept)
    before = data.stat()
    text = data.read_text()
    assert '"Paris."' in text
    data.write_text(text.replace('"Paris."', '"Dijon."', 1))  # same size
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (data.stat().st_size, data.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    counter = _Counter(monkeypatch)
    rows = training_data(params, kept).rows
    assert counter.calls == 1, "the kept rows of the old contents were reused"
    assert any(m["content"] == "Dijon." for row in rows for m in row["messages"])


def test_context_prepare_tokenizes_the_validated_rows_without_reading_them_again(
        tiny_model: Path, demo_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"data_path": str(demo_data / "chat.jsonl"), "data_format": "auto", "seed": 42,
              "document_column_name": "document"}
    run_dir = RunDirectory(tmp_path / "run")
    save_training_data(validate_training_data(params), run_dir.path / DATA_DIR)
    counter = _Counter(monkeypatch)
    context = RunContext("sft", "x", params, run_dir)
    result = context.prepare(str(tiny_model), tmp_path / "prepared.jsonl", max_seq_len=256)
    assert counter.calls == 0
    lines = Path(result.output).read_text().splitlines()
    assert len(lines) == result.stats.samples_out == len(context.rows()) and not result.cached
    # the same as prepare() reading the sources itself
    direct = prepare_module.prepare(training.training_sources(params), str(tiny_model), tmp_path / "direct.jsonl",
                                    max_seq_len=256, use_cache=False)
    assert Path(direct.output).read_text().splitlines() == lines
    assert counter.calls == 1
