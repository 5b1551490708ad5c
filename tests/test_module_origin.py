"""One check of whether an interpreter can import a module (thub.selection.module_origin), used by
the tracker checks and by ``thub data preview --backend``; the same answer in-process and in a
subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from thub.data.backend_masks import has_own_masks
from thub.selection import module_origin


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on both interpreters' path with a regular package and a namespace package."""
    (tmp_path / "h16_regular").mkdir()
    (tmp_path / "h16_regular" / "__init__.py").write_text("")
    (tmp_path / "h16_regular" / "masks.py").write_text("")
    (tmp_path / "h16_namespace").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("python", [None, sys.executable], ids=["this interpreter", "another interpreter"])
def test_the_same_answer_in_process_and_in_another_interpreter(site: Path, python: str | None) -> None:
    assert module_origin("h16_regular", python) == str(site / "h16_regular" / "__init__.py")
    assert module_origin("h16_regular.masks", python) == str(site / "h16_regular" / "masks.py")
    assert module_origin("h16_namespace", python) == "namespace"  # a subprocess used to say "None"
    assert module_origin("h16_missing", python) is None
    assert module_origin("h16_missing.masks", python) is None  # its parent cannot be imported: not there
    assert has_own_masks("h16_regular.runner:run", python) is True
    assert has_own_masks("h16_missing.runner:run", python) is False  # in-process this used to raise


def test_an_interpreter_that_cannot_run_counts_as_not_there(tmp_path: Path) -> None:
    assert module_origin("json", str(tmp_path / "no-python")) is None
    assert module_origin("json", sys.executable) is not None
