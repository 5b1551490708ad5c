"""The rows kept in RUN_DIR/thub_data inside the launch window and across restarts (issue 23
item 13). The parent validates the data and keeps the rows; the training child (a real process)
re-checks every source file by its contents when it reads them back: a change of the same size
with the modification time set back is validated again, a file deleted since is no reason to
fail (the kept rows are the only copy), and ``thub_run.json`` says which copy each attempt (a
SLURM restart hours later is one) trained on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from thub import hookimpl
from thub.specs import BackendSpec

RUNNER = '''
import json
from pathlib import Path


def run(context):
    rows = context.rows()
    Path(context.run_dir.path, "rows_seen.json").write_text(json.dumps(rows))
    return {}
'''

# runs at the start of the training child only (it has THUB_RUN_DIR): the launch window
WINDOW = '''
import os
if os.environ.get("THUB_RUN_DIR") and os.environ.get("KEPT_ROWS_TEST"):
    path = os.environ["KEPT_ROWS_TEST"]
    if os.environ.get("KEPT_ROWS_ACTION") == "delete":
        os.remove(path)
    elif os.environ.get("KEPT_ROWS_ACTION") == "break":
        open(path, "a").write("{not json\\n")
    else:
        stat = os.stat(path)
        text = open(path).read()
        open(path, "w").write(text.replace('"Paris."', '"Dijon."', 1))  # same size
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the time set back
'''


class _Plugin:
    @hookimpl
    def thub_register_backends(self, register: Any) -> None:
        register(BackendSpec("keptrows", "reads its rows back", {"sft": frozenset()}, "kept_rows_runner:run"))


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thub_plugin: Any, demo_data: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "kept_rows_runner.py").write_text(textwrap.dedent(RUNNER))
    (site / "sitecustomize.py").write_text(textwrap.dedent(WINDOW))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    for name in list(os.environ):
        if name.startswith("THUB_"):
            monkeypatch.delenv(name)
    thub_plugin(("kept_rows_plugin", _Plugin()))
    data = tmp_path / "chat.jsonl"
    shutil.copy(demo_data / "chat.jsonl", data)
    return data


def _train(model: Path, data: Path, out: Path) -> dict[str, Any]:
    import thub

    return thub.train("sft", backend="keptrows", model_path=str(model), data_path=str(data),
                      ckpt_output_dir=str(out), progress=False)


def _in_the_window(action: str, model: Path, data: Path, out: Path, monkeypatch: pytest.MonkeyPatch
                   ) -> dict[str, Any]:
    """A run whose data file gets ``action`` (delete, edit, break) after the parent kept its rows,
    before the training child reads them back."""
    monkeypatch.setenv("KEPT_ROWS_TEST", str(data))
    monkeypatch.setenv("KEPT_ROWS_ACTION", action)
    return _train(model, data, out)


def _contents(rows: list[dict[str, Any]]) -> set[str]:
    return {m["content"] for row in rows for m in row["messages"]}


def test_a_file_deleted_in_the_launch_window_trains_on_the_kept_rows(backend: Path, tiny_model: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    result = _in_the_window("delete", tiny_model, backend, out, monkeypatch)
    assert result["status"] == "succeeded", result
    assert not backend.exists()
    assert "Paris." in _contents(json.loads((out / "rows_seen.json").read_text()))
    record = json.loads((out / "thub_run.json").read_text())
    assert record["data"]["rows"] > 0 and record["data"]["files"][str(backend)]
    attempt = record["data"]["trained_on"][-1]
    assert attempt["copy"] == "kept" and attempt["missing"] == [str(backend)]
    assert attempt["key"] == record["data"]["key"]
    assert f"{backend} was deleted since: the kept rows are the only copy" in (out / "logs" / "train.log").read_text()


def test_a_same_size_same_mtime_change_in_the_window_is_validated_again(backend: Path, tiny_model: Path,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    result = _in_the_window("edit", tiny_model, backend, out, monkeypatch)
    assert result["status"] == "succeeded", result
    seen = _contents(json.loads((out / "rows_seen.json").read_text()))
    assert "Dijon." in seen and "Paris." not in seen  # never the parent's stale copy
    record = json.loads((out / "thub_run.json").read_text())
    attempt = record["data"]["trained_on"][-1]
    assert attempt["copy"] == "validated now" and attempt["changed"] == [str(backend)]
    assert attempt["key"] != record["data"]["key"]


def test_a_restart_says_which_copy_it_trained_on(backend: Path, tiny_model: Path, tmp_path: Path) -> None:
    """A SLURM restart runs the same child on the same run directory, hours later."""
    out = tmp_path / "run"
    assert _train(tiny_model, backend, out)["status"] == "succeeded"

    def restart() -> dict[str, Any]:
        (out / "rows_seen.json").unlink()
        done = subprocess.run([sys.executable, "-m", "thub.runner.child", str(out)], capture_output=True, text=True,
                              timeout=600)  # a hang guard
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads((out / "thub_run.json").read_text())["data"]

    data = restart()  # unchanged files: the submission's kept rows
    assert [a["copy"] for a in data["trained_on"]] == ["kept", "kept"] and "missing" not in data["trained_on"][-1]
    backend.write_text(backend.read_text().replace('"Paris."', '"Lyon."', 1))
    data = restart()
    assert data["trained_on"][-1]["copy"] == "validated now" and data["trained_on"][-1]["changed"] == [str(backend)]
    assert "Lyon." in _contents(json.loads((out / "rows_seen.json").read_text()))
    backend.unlink()
    data = restart()
    assert data["trained_on"][-1] == {**data["trained_on"][-1], "copy": "kept", "missing": [str(backend)]}
    assert "Paris." in _contents(json.loads((out / "rows_seen.json").read_text()))


def test_a_file_broken_in_the_window_fails_with_its_line_not_a_traceback(backend: Path, tiny_model: Path,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    result = _in_the_window("break", tiny_model, backend, out, monkeypatch)
    assert result["status"] == "failed" and f"{backend}:" in result["error"], result
    assert "malformed JSON" in result["error"]
    assert "Traceback" not in (out / "logs" / "train.log").read_text()
