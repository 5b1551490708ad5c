"""The one JSONL follower (thub.runner.metrics.MetricsTail) that thub and the plugins share."""

from __future__ import annotations

import json
from pathlib import Path

from thub.runner.metrics import MetricsTail


def _line(step: int) -> str:
    return json.dumps({"step": step}) + "\n"


def test_each_complete_line_once_and_a_partial_line_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []  # no file yet
    path.write_text(_line(1) + '{"step": 2')
    assert tail.read() == [{"step": 1}]
    with path.open("a") as handle:
        handle.write('}\nnot json\n' + _line(3))
    assert tail.read() == [{"step": 2}, {"step": 3}]
    assert tail.read() == []
    assert MetricsTail(path, offset=len(_line(1))).read() == [{"step": 2}, {"step": 3}]


def test_a_rewritten_file_is_read_from_its_start_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(_line(1) + _line(2) + _line(3))
    following, plain = MetricsTail(path, follow_rewrites=True), MetricsTail(path)
    assert following.read() == plain.read() == [{"step": 1}, {"step": 2}, {"step": 3}]
    path.write_text(_line(4))  # shorter: reopened with "wb"
    assert following.read() == [{"step": 4}]
    assert plain.read() == []
    path.write_text(_line(7) + _line(8) + _line(9) + _line(10))  # longer, but another first line
    assert following.read() == [{"step": 7}, {"step": 8}, {"step": 9}, {"step": 10}]
    with path.open("a") as handle:
        handle.write(_line(11))
    assert following.read() == [{"step": 11}]  # appended: only the new line
