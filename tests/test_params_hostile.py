"""Hostile parameter files and values (issue 23 items 1, 4, 5, 6): refused at resolution with
file, line and field, exit 2, never a traceback or a late failure in the child."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from thub.config import yamlfile
from thub.config.resolve import resolve
from thub.errors import UsageError

# --- item 4: YAML alias bombs ----------------------------------------------------------------

# nine levels of nine aliases: 9**9 (387 million) values from 400 bytes
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def _counting_children(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """How often the walk asks for each node's children (by node id)."""
    counts: dict[int, int] = {}
    children = yamlfile._children

    def counted(node: yaml.Node) -> list[yaml.Node]:
        counts[id(node)] = counts.get(id(node), 0) + 1
        return children(node)

    monkeypatch.setattr(yamlfile, "_children", counted)
    return counts


def test_an_alias_bomb_is_refused_and_each_node_visited_once(thub_registry, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counting_children(monkeypatch)
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB)
    with pytest.raises(UsageError, match=rf"{config}:\d+: aliases expand this config file to more than "
                                         r"1,000,000 values"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    assert counts and set(counts.values()) == {1}  # memoised: never the same node twice
    assert len(counts) < 200  # the distinct nodes of the file, not their expansion


def test_a_bomb_under_a_valid_key_is_refused_before_any_value_is_built(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "kwargs.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\nlr_scheduler_kwargs:\n"
                      + "".join("  " + line + "\n" for line in BOMB.splitlines()))
    with pytest.raises(UsageError, match=rf"{config}:\d+: aliases expand"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_a_recursive_alias_is_refused(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "loop.yaml"
    config.write_text("model_path: m\nlr_scheduler_kwargs: &k\n  self: *k\n")
    with pytest.raises(UsageError, match=rf"{config}:2: a recursive alias"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_modest_aliases_still_work_and_duplicates_are_still_found(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\n"
                      "lr_scheduler_kwargs: &k {min_lr: 1}\nmix_probabilities: [0.5, 0.5]\n"
                      "datasets: [{path: a.jsonl, extra: *k}]\n")
    resolved = resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    assert resolved.values()["lr_scheduler_kwargs"] == {"min_lr": 1}
    again = tmp_path / "dup.yaml"
    again.write_text("x: &x {a: 1}\ny: [*x, *x, {b: 1, b: 2}]\n")
    with pytest.raises(UsageError, match=rf"{again}:2: duplicate key 'b'"):
        yamlfile.load_yaml(again)
