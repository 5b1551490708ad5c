"""Mixing: strategies, probabilities, seeds, per-dataset tags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thub.data import DatasetSource, mix
from thub.errors import UsageError


def chat_file(path: Path, tag: str, n: int) -> str:
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"{tag} q{i}"},
                                                     {"role": "assistant", "content": f"{tag}{i}"}]}) + "\n"
                            for i in range(n)))
    return str(path)


def answers(rows: list[dict]) -> list[str]:
    return [row["messages"][-1]["content"] for row in rows]


@pytest.fixture
def sources(tmp_path: Path) -> list[DatasetSource]:
    return [DatasetSource(chat_file(tmp_path / "a.jsonl", "a", 10)),
            DatasetSource(chat_file(tmp_path / "b.jsonl", "b", 3))]


def test_concat_keeps_order(sources: list[DatasetSource]) -> None:
    assert answers(mix(sources)) == [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(3)]


def test_interleave_round_robin(sources: list[DatasetSource]) -> None:
    assert answers(mix(sources, "interleave_under")) == ["a0", "b0", "a1", "b1", "a2", "b2"]
    over = answers(mix(sources, "interleave_over"))
    assert over[:6] == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert set(over) == {f"a{i}" for i in range(10)} | {f"b{i}" for i in range(3)}
    assert len(over) == 20  # whole rounds up to the big source; b was oversampled


@pytest.mark.parametrize("strategy", ["interleave_under", "interleave_over"])
def test_probabilities_are_reproducible(sources: list[DatasetSource], strategy: str) -> None:
    first = answers(mix(sources, strategy, [0.7, 0.3], seed=1))
    assert first == answers(mix(sources, strategy, [0.7, 0.3], seed=1))
    assert first != answers(mix(sources, strategy, [0.7, 0.3], seed=2))
    if strategy == "interleave_over":
        assert set(first) == {f"a{i}" for i in range(10)} | {f"b{i}" for i in range(3)}


def test_probabilities_weight_the_draw(tmp_path: Path) -> None:
    big = [DatasetSource(chat_file(tmp_path / "a.jsonl", "a", 1000)),
           DatasetSource(chat_file(tmp_path / "b.jsonl", "b", 1000))]
    rows = answers(mix(big, "interleave_under", [0.9, 0.1], seed=0))
    share = sum(1 for r in rows if r.startswith("a")) / len(rows)
    assert 0.85 < share < 0.95


def test_per_source_probability(tmp_path: Path) -> None:
    a = DatasetSource(chat_file(tmp_path / "a.jsonl", "a", 50), probability=1.0)
    b = DatasetSource(chat_file(tmp_path / "b.jsonl", "b", 50), probability=0.0)
    assert all(r.startswith("a") for r in answers(mix([a, b], "interleave_over")))


def test_mixing_errors(sources: list[DatasetSource], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="probabilities: expected none with mix strategy 'concat'"):
        mix(sources, "concat", [0.5, 0.5])
    with pytest.raises(UsageError, match=r"probabilities: expected 2 values \(one per dataset\), found 3"):
        mix(sources, "interleave_under", [0.5, 0.3, 0.2])
    with pytest.raises(UsageError, match="non-negative values"):
        mix(sources, "interleave_under", [-1, 2])
    with pytest.raises(UsageError, match="mix strategy: expected one of"):
        mix(sources, "shuffle")
    with pytest.raises(UsageError, match="at least one dataset"):
        mix([])
    doc = tmp_path / "d.jsonl"
    doc.write_text(json.dumps({"document": "text"}) + "\n")
    with pytest.raises(UsageError, match="expected sources of one kind to mix"):
        mix([sources[0], DatasetSource(str(doc))])


def test_mixed_schema_mix_with_per_dataset_tags(tmp_path: Path) -> None:
    # The Delphi-style mix: one ShareGPT source with from/value, one with role/content and
    # custom speaker names; each read with its own settings, none silently empty.
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "A1"}]})
                   + "\n")
    two = tmp_path / "two.jsonl"
    two.write_text(json.dumps({"conversations": [{"role": "asker", "content": "q"},
                                                 {"role": "helper", "content": "A2"}]}) + "\n")
    sources = [DatasetSource.parse(str(one)),
               DatasetSource.parse(f"{two}:format=sharegpt,role_tag=role,content_tag=content,user_tag=asker,"
                                   "assistant_tag=helper")]
    assert answers(mix(sources)) == ["A1", "A2"]


def test_errors_from_all_sources_reported_together(tmp_path: Path) -> None:
    bad1 = tmp_path / "x.jsonl"
    bad1.write_text("{nope\n")
    bad2 = tmp_path / "y.jsonl"
    bad2.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n")
    with pytest.raises(UsageError) as info:
        mix([DatasetSource(str(bad1)), DatasetSource(str(bad2))])
    assert "x.jsonl:1" in str(info.value) and "y.jsonl:1" in str(info.value)
