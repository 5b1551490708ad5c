"""result.json has one writer: the supervisor's result and the one an orphaned child writes (its
thub parent died) carry the same fields and are redacted alike (issue 13 follow-up).

A real supervised run of a tiny in-process backend plugin (its runner records and may fail), then
the real training child ``python -m thub.runner.child RUN_DIR`` started again on the same run
directory with ``THUB_PARENT_PID`` naming a process that has exited: the child sees its parent gone
and writes the final result itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from thub import hookimpl
from thub.redact import child_environment
from thub.runner.lifeline import PARENT_ENV
from thub.specs import AlgorithmSpec, BackendSpec

PASSWORD = "hunter2pw"
URI = f"https://alice:{PASSWORD}@mlflow.example.com:5000/base"

RUNNER = '''
from thub_builtins.params import SFTParams


class ResultParams(SFTParams):
    endpoint: str | None = None


def run(context):
    if context.params.get("lr_scheduler") == "fail":
        raise RuntimeError(f"cannot reach {context.params['endpoint']}")
    return {"summary": {"endpoint": context.params["endpoint"]}}
'''


class _Plugin:
    @hookimpl
    def thub_register_algorithms(self, register: Any) -> None:
        register(AlgorithmSpec("resultecho", "records its parameters", "h13_result:ResultParams"))

    @hookimpl
    def thub_register_backends(self, register: Any) -> None:
        register(BackendSpec("resultecho", "records its parameters",
                             {"resultecho": frozenset({"endpoint", "lr_scheduler"})}, "h13_result:run"))


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thub_plugin: Any) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "h13_result.py").write_text(textwrap.dedent(RUNNER))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))  # the training child imports the runner too
    for name in list(os.environ):
        if name.startswith("THUB_"):
            monkeypatch.delenv(name)
    thub_plugin(("h13_result_plugin", _Plugin()))
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return path


def _orphaned_child(out: Path) -> dict[str, Any]:
    """The training child on ``out`` again, its parent (a process that has exited) gone."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (out / "result.json").unlink()
    env = {**os.environ, **child_environment(out), PARENT_ENV: str(gone.pid)}
    subprocess.run([sys.executable, "-m", "thub.runner.child", str(out)], env=env, capture_output=True, text=True,
                   timeout=120)
    text = (out / "result.json").read_text()
    assert PASSWORD not in text, text
    return json.loads(text)


@pytest.mark.parametrize("scheduler", ["fail", None])
def test_an_orphaned_childs_result_is_redacted_and_has_the_supervisors_fields(
        model: Path, demo_data: Path, tmp_path: Path, scheduler: str | None) -> None:
    import thub

    out = tmp_path / "run"
    params = {"lr_scheduler": scheduler} if scheduler else {}
    normal = thub.train("resultecho", backend="resultecho", model_path=str(model),
                        data_path=str(demo_data / "chat.jsonl"), ckpt_output_dir=str(out), endpoint=URI, **params)
    assert normal["status"] == ("failed" if scheduler else "succeeded"), normal
    assert PASSWORD not in (out / "result.json").read_text()

    orphan = _orphaned_child(out)
    assert orphan["status"] == normal["status"] and "thub parent process" in orphan["reason"]
    assert set(orphan) - {"reason"} == set(normal) - {"reason"}
    assert orphan["outputs"] == normal["outputs"] and orphan["run_dir"] == str(out)
    if scheduler:
        assert "cannot reach https://" in orphan["error"] and "mlflow.example.com" in orphan["error"]
