"""Experiment trackers come from plugins (``thub_register_trackers``, issue 36).

TensorBoard, MLflow and W&B are registered by the built-in plugin ``thub_builtins.trackers``; the
core chooses trackers from the registry. ``tests/plugins/thub-plugin-jsonl-tracker`` adds a
fourth one from outside thub (its own parameter, writer, plan line and check) with no core edit:
in-process here for the mechanism, and pip-installed for a real trl run (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from thub import hookimpl
from thub.errors import UsageError
from thub.manager import Registry, load_registry
from thub.specs import TrackerSpec

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugins" / "thub-plugin-jsonl-tracker"
CHAT = str(ROOT / "examples" / "data" / "chat.jsonl")
#: what the outside plugin may import from thub: the documented public modules
PUBLIC = {"thub", "thub.backend", "thub.specs", "thub.params"}


@pytest.fixture
def jsonl_plugin(thub_plugin: Callable[..., Registry]) -> Iterator[Registry]:
    """The outside plugin's module registered in-process (its source folder on sys.path)."""
    sys.path.insert(0, str(PLUGIN / "src"))
    try:
        import thub_plugin_jsonl_tracker

        yield thub_plugin(("jsonl_tracker", thub_plugin_jsonl_tracker))
    finally:
        sys.path.remove(str(PLUGIN / "src"))
        for name in [m for m in sys.modules if m.startswith("thub_plugin_jsonl_tracker")]:
            del sys.modules[name]


def test_the_three_trackers_are_registered_by_the_builtin_plugin() -> None:
    registry = load_registry(entry_points=False)
    assert list(registry.trackers) == ["tensorboard", "mlflow", "wandb"]
    for spec in registry.trackers.values():
        assert spec.provenance.plugin == "thub_builtins.trackers"
        assert spec.key == spec.params[0]
    assert registry.plugins["thub_builtins.trackers"].registered["trackers"] == ["tensorboard", "mlflow", "wandb"]


def test_a_second_tracker_of_the_same_name_is_refused_naming_both_plugins(thub_plugin) -> None:
    class Copycat:
        @hookimpl
        def thub_register_trackers(self, register):
            register(TrackerSpec("wandb", "W&B again", "copy_key", ("copy_key",), writer="x:y", where="x:z"))

    registry = thub_plugin(("copycat", Copycat()), entry_points=False)
    failure = next(f for f in registry.failures if f.name == "copycat")
    assert failure.stage == "register trackers"
    assert "'wandb' is already registered by thub_builtins.trackers" in failure.error
    assert registry.trackers["wandb"].provenance.plugin == "thub_builtins.trackers"


def test_registering_something_else_as_a_tracker_is_a_recorded_failure(thub_plugin) -> None:
    class Wrong:
        @hookimpl
        def thub_register_trackers(self, register):
            register({"name": "dict-tracker"})

    registry = thub_plugin(("wrong", Wrong()), entry_points=False)
    failure = next(f for f in registry.failures if f.name == "wrong")
    assert "expected TrackerSpec, got dict" in failure.error
    assert "dict-tracker" not in registry.trackers


def test_an_outside_trackers_parameter_is_a_parameter_of_every_algorithm(jsonl_plugin: Registry,
                                                                       tmp_path: Path) -> None:
    import thub

    assert jsonl_plugin.trackers["jsonl"].provenance.plugin == "jsonl_tracker"
    fields = jsonl_plugin.algorithm("sft").load_parameters().model_fields
    assert "jsonl_tracker_path" in fields and "wandb_project" in fields
    # no backend lists it: thub honours it and logs it from the parent, on every backend
    target = tmp_path / "metrics.jsonl"
    plan = thub.dry_run("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir=str(tmp_path / "run"),
                        jsonl_tracker_path=str(target))
    assert plan["trackers"] == {"jsonl": {"route": "thub", "logged_by": "thub (parent process)",
                                          "where": str(target)}}


def test_an_outside_trackers_check_refuses_the_run(jsonl_plugin: Registry, tmp_path: Path) -> None:
    import thub

    with pytest.raises(UsageError, match=r"experiment tracker not ready(.|\n)*jsonl_tracker_path: .* is a directory"):
        thub.train("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir=str(tmp_path / "run"),
                   jsonl_tracker_path=str(tmp_path))
    assert not (tmp_path / "run").exists()  # nothing written


def test_the_parent_sink_writes_an_outside_tracker(jsonl_plugin: Registry, tmp_path: Path) -> None:
    from thub.trackers import read_record
    from thub.trackers.sink import ParentSink

    run_dir, target = tmp_path / "run", tmp_path / "logs" / "m.jsonl"
    run_dir.mkdir()
    record = {"algorithm": "sft", "backend": "trl",
              "parameters": {"ckpt_output_dir": {"value": str(run_dir), "source": "flag"},
                             "jsonl_tracker_path": {"value": str(target), "source": "flag"}}}
    sink = ParentSink(str(run_dir), record, ["jsonl"], resume=False)
    for step in (1, 2):
        sink.log({"step": step, "loss": 1.0 / step, "timestamp": 5.0})
    sink.close("succeeded")
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines[0]["metadata"]["parameters"]["jsonl_tracker_path"]["value"] == str(target)
    assert lines[1:] == [{"step": 1, "metrics": {"loss": 1.0}, "wall_time": 5.0},
                         {"step": 2, "metrics": {"loss": 0.5}, "wall_time": 5.0}, {"status": "succeeded"}]
    assert read_record(run_dir) == {"jsonl": {"route": "thub", "path": str(target)}}


def test_a_trackers_missing_package_is_named_with_its_install_command(thub_plugin, tmp_path: Path) -> None:
    class Needy:
        @hookimpl
        def thub_register_trackers(self, register):
            register(TrackerSpec("needy", "Needy", "learning_rate", ("learning_rate",), writer="x:y", where="x:z",
                                 module="thub_no_such_tracker_package", install="pip install needy-tracker"))

    thub_plugin(("needy", Needy()), entry_points=False)
    from thub.trackers.check import problems

    found = problems({"learning_rate": 0.1, "ckpt_output_dir": str(tmp_path)}, None, None)
    assert [(p.tracker, p.fix) for p in found] == [("needy", "pip install needy-tracker")]
    assert "thub_no_such_tracker_package package is not installed" in found[0].summary


def test_the_outside_plugin_imports_only_public_thub_modules() -> None:
    import ast

    for source in (PLUGIN / "src" / "thub_plugin_jsonl_tracker").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.split(".")[0] == "thub":
                    assert name in PUBLIC, f"{source.name} imports {name}, not a public thub module"


@pytest.mark.slow
@pytest.mark.needs_module("trl")
def test_a_real_trl_run_logs_to_the_pip_installed_outside_tracker(thub, tmp_path: Path, tiny_model: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(PLUGIN)], check=True, capture_output=True, text=True)
    target, run_dir = tmp_path / "tracked" / "metrics.jsonl", tmp_path / "run"
    done = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path", CHAT,
                "--ckpt-output-dir", str(run_dir), "--max-steps", "3", "--jsonl-tracker-path", str(target),
                env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))},
                cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines[0]["metadata"]["backend"] == "trl"
    logged = {line["step"]: line["metrics"]["loss"] for line in lines if "step" in line}
    stream = [json.loads(line) for line in (run_dir / "training_metrics.jsonl").read_text().splitlines()]
    assert logged == {line["step"]: line["loss"] for line in stream if "loss" in line}
    assert sorted(logged) == [1, 2, 3]
    assert lines[-1] == {"status": "succeeded"}
    assert json.loads((run_dir / "trackers.json").read_text())["jsonl"] == {"route": "thub", "path": str(target)}
