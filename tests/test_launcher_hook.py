"""Launchers are plugins (issue 36 items 1-2): ``thub_register_launchers`` and ``LauncherSpec``.

``local`` and ``slurm`` are registered by the built-in plugin ``thub_builtins.launchers``;
``examples/plugins/thub-plugin-subprocess-launcher`` adds ``subprocess`` from outside with no core
edit: it is pip-installed into a folder of its own (this environment stays as it was), and
``thub train --launcher subprocess`` plans it, ``thub runs status/cancel/logs`` follow its
recorded pid through the plugin's spec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.hookspecs import hookimpl
from thub.specs import LauncherSpec

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "plugins" / "thub-plugin-subprocess-launcher"
CHAT = str(ROOT / "examples" / "data" / "chat.jsonl")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The outside plugin pip-installed (no dependencies) into its own folder, as a user would."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(PLUGIN)], check=True, capture_output=True, text=True)
    return target


def _thub(site: Path | None, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = [str(site)] if site else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*path, os.environ.get("PYTHONPATH")]))}
    env.pop("THUB_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=1800)  # a hang guard only


def test_local_and_slurm_are_registered_by_the_builtin_plugin() -> None:
    from thub.manager import load_registry

    registry = load_registry(entry_points=False)
    assert list(registry.launchers)[:2] == ["local", "slurm"]
    assert {spec.provenance.plugin for spec in registry.launchers.values()} == {"thub_builtins.launchers"}
    assert registry.plugins["thub_builtins.launchers"].registered["launchers"] == ["local", "slurm"]


def test_a_launcher_name_taken_twice_is_refused_naming_both_plugins(thub_plugin) -> None:
    class Clash:
        @hookimpl
        def thub_register_launchers(self, register):
            register(LauncherSpec("slurm", "another slurm", submit="x:submit"))
            register(LauncherSpec("elsewhere", "fine", submit="x:submit"))

    registry = thub_plugin(("clash", Clash()), entry_points=False)
    failure = next(f for f in registry.failures if f.name == "clash")
    assert failure.stage == "register launchers"
    assert "'slurm' is already registered by thub_builtins.launchers" in failure.error
    assert registry.launchers["slurm"].provenance.plugin == "thub_builtins.launchers"  # the first one stays
    assert "elsewhere" in registry.launchers


def test_an_unknown_launcher_is_refused_listing_the_registered_ones(tmp_path: Path) -> None:
    done = _thub(None, "train", "sft", "--launcher", "nowhere", "--dry-run", "--model-path", "m",
                 "--data-path", CHAT, "--ckpt-output-dir", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "'nowhere' is not one of 'local', 'slurm'" in done.stderr
    assert not (tmp_path / "o").exists()


def test_an_outside_launcher_is_offered_and_plans_the_dry_run(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    helped = _thub(site, "train", "sft", "--help", cwd=tmp_path)
    assert "subprocess: a detached process on this machine" in " ".join(helped.stdout.split())
    done = _thub(site, "train", "sft", "--backend", "trl", "--launcher", "subprocess", "--dry-run", "--json",
                 "--model-path", "m", "--data-path", CHAT, "--ckpt-output-dir", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["launch"]["launcher"] == "subprocess"
    assert plan["launch"]["command"][1:] == ["-m", "thub.launch.worker", "node", str(out)]
    assert plan["launch"]["script"].endswith(f"-m thub.launch.worker node {out}")
    assert not out.exists()  # a dry run writes nothing
    # a flag only another launcher takes is refused, naming the one that does
    refused = _thub(site, "train", "sft", "--backend", "trl", "--launcher", "subprocess", "--cluster", "c",
                    "--dry-run", "--model-path", "m", "--data-path", CHAT, "--ckpt-output-dir", str(out), cwd=tmp_path)
    assert refused.returncode == 2 and "--cluster only apply with --launcher slurm" in refused.stderr


def _recorded_run(run: Path, launcher: str, job_ids: list[str]) -> None:
    run.mkdir()
    (run / "logs").mkdir()
    (run / "thub_run.json").write_text(json.dumps({
        "schema_version": 1, "algorithm": "sft", "backend": "trl",
        "parameters": {"model_path": {"value": "m", "source": "flag"}},
        "launch": {"launcher": launcher, "job_ids": job_ids}}))


def test_runs_status_cancel_and_logs_go_through_the_recorded_launcher(site: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    # a live process that looks like the plugin's worker for this run: the launcher's status sees it
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "thub.launch.worker", "node",
                               str(run)], start_new_session=True)
    try:
        _recorded_run(run, "subprocess", [str(worker.pid)])
        (run / "logs" / "subprocess.out").write_text("hello from the worker\n")
        status = _thub(site, "runs", "status", str(run), "--json", cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["launcher"] == "subprocess" and data["status"] == "running"
        assert data["jobs"] == [{"job_id": str(worker.pid), "state": "RUNNING"}]
        logs = _thub(site, "runs", "logs", str(run), cwd=tmp_path)
        assert "hello from the worker" in logs.stdout
        shown = _thub(site, "runs", "cancel", str(run), "--dry-run", cwd=tmp_path)
        assert shown.stdout.strip() == f"$ kill -TERM -{worker.pid}" and worker.poll() is None
        assert _thub(site, "runs", "cancel", str(run), cwd=tmp_path).returncode == 0
        worker.wait(timeout=60)  # a hang guard only: SIGTERM ends sleep at once
        ended = json.loads(_thub(site, "runs", "status", str(run), "--json", cwd=tmp_path).stdout)
        assert ended["status"] == "ended" and ended["jobs"][0]["state"] == "FAILED"
        waited = _thub(site, "runs", "wait", str(run), cwd=tmp_path)
        assert waited.returncode == 1 and "ended" in waited.stderr + waited.stdout
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_run_recorded_by_a_launcher_that_is_not_installed_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _recorded_run(run, "subprocess", ["12345"])  # the plugin that recorded it is not installed here
    done = _thub(None, "runs", "status", str(run), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "expected one of local, slurm, found 'subprocess'" in done.stderr


@pytest.mark.slow
@pytest.mark.needs_module("trl")
def test_a_real_tiny_run_submitted_by_the_outside_launcher(site: Path, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _thub(site, "train", "sft", "--backend", "trl", "--launcher", "subprocess", "--json",
                 "--model-path", str(tiny_model), "--data-path", CHAT, "--ckpt-output-dir", str(out),
                 "--max-steps", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    submitted = json.loads(done.stdout)
    assert submitted["status"] == "submitted" and len(submitted["job_ids"]) == 1
    record = json.loads((out / "thub_run.json").read_text())
    assert record["launch"]["launcher"] == "subprocess" and record["launch"]["job_ids"] == submitted["job_ids"]
    waited = _thub(site, "runs", "wait", str(out), "--json", cwd=tmp_path)
    data = json.loads(waited.stdout)
    assert waited.returncode == 0, (data, (out / "logs" / "subprocess.out").read_text())
    assert data["status"] == "succeeded" and data["jobs"][0]["state"] == "COMPLETED"
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
