"""Run an install :class:`~thub.envs.planner.Plan`; write the lock and the manifest.

Every command's output goes to the environment's ``install.log`` (and to stderr when
``echo``); a failed command stops the install with the tail of its output, and a managed
environment created by this install is removed again so no half-built environment is listed.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thub.envs.manifest import SCHEMA_VERSION, Manifest
from thub.envs.paths import LOG_NAME, MANIFEST_NAME
from thub.envs.planner import Plan, Step
from thub.envs.remote import call_env
from thub.errors import ThubError


class InstallError(ThubError):
    """A command of an install failed."""


def _run_step(step: Step, log: Any, echo: Callable[[str], None] | None) -> subprocess.CompletedProcess[str]:
    log.write(f"$ {step.shell()}\n")
    log.flush()
    if echo:
        echo(f"$ {step.shell()}")
    done = subprocess.run(step.argv, capture_output=True, text=True)
    if step.capture is not None and done.returncode == 0:
        step.capture.write_text(f"# exported by thub install on {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                                + done.stdout)
    else:
        log.write(done.stdout)
    log.write(done.stderr)
    log.flush()
    return done


def execute(plan: Plan, echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``plan``; returns ``{"manifest": ..., "pip_check": ...}`` (manifest for managed)."""
    started = time.time()
    if plan.env_path is not None:
        if plan.create and plan.env_path.exists():
            shutil.rmtree(plan.env_path)
        plan.env_path.mkdir(parents=True, exist_ok=True)
        log_path = plan.env_path / LOG_NAME
    else:
        from thub.envs.paths import data_dir

        log_path = data_dir() / "current" / LOG_NAME
        log_path.parent.mkdir(parents=True, exist_ok=True)
    pip_check = "not run"
    try:
        with open(log_path, "a") as log:
            log.write(f"# thub install {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)}\n")
            for path, content in plan.files.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
            for step in plan.steps:
                done = _run_step(step, log, echo)
                if step.argv[-2:] == ["pip", "check"]:
                    pip_check = "ok" if done.returncode == 0 else done.stdout.strip()
                    if done.returncode != 0 and echo:
                        echo(f"warning: pip check: {pip_check}")
                    continue
                if done.returncode != 0 and step.check:
                    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
                    raise InstallError(f"`{step.shell()}` failed (exit {done.returncode}); log: {log_path}\n{tail}")
    except BaseException:
        if plan.create and plan.env_path is not None and plan.env_path.exists():
            shutil.rmtree(plan.env_path, ignore_errors=True)
        raise
    result: dict[str, Any] = {"pip_check": pip_check, "log": str(log_path),
                              "seconds": round(time.time() - started, 1)}
    if plan.target == "managed":
        result["manifest"] = write_manifest(plan, pip_check).data
    return result


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(plan: Plan, pip_check: str = "not run") -> Manifest:
    """Ask the environment what it provides and write ``thub-env.json``."""
    assert plan.env_path is not None and plan.env_name is not None
    described = call_env(plan.python, "describe")
    if not described["backends"]:
        problems = "; ".join(described.get("failures") or []) or "no plugin registered a backend"
        raise InstallError(f"environment {plan.env_name!r} provides no backend: {problems}")
    path = plan.env_path / MANIFEST_NAME
    previous: dict[str, Any] = {}
    if path.exists():
        import json

        previous = json.loads(path.read_text())
    lock = plan.env_path / "requirements.lock"
    requested = list(dict.fromkeys([*previous.get("requested", []), *(s.argument() for s in plan.sources)]))
    data = {
        "schema_version": SCHEMA_VERSION,
        "name": plan.env_name,
        "path": str(plan.env_path),
        "python": plan.python,
        "python_version": described["python_version"],
        "site_packages": described["site_packages"],
        "created": previous.get("created", time.time()),
        "updated": time.time(),
        "installer": plan.installer,
        "torch": plan.torch,
        "requested": requested,
        "lock": lock.name if lock.exists() else None,
        "lock_sha256": sha256(lock) if lock.exists() else None,
        "pip_check": pip_check,
        "thub": described["thub"],
        "plugins": described["plugins"],
        "backends": described["backends"],
        "failures": described.get("failures", []),
    }
    manifest = Manifest(path, data)
    manifest.write()
    return manifest


def refresh_manifest(manifest: Manifest) -> Manifest:
    """Rewrite a manifest from what its environment reports now (after an uninstall there)."""
    from thub.envs.planner import Plan

    plan = Plan("managed", manifest.python, [], manifest.data.get("installer", "pip"),
                env_name=manifest.name, env_path=manifest.env_path)
    lock = manifest.env_path / "requirements.lock"
    done = subprocess.run([manifest.python, "-m", "pip", "freeze", "--all"], capture_output=True, text=True)
    if done.returncode == 0:
        lock.write_text(f"# exported by thub on {time.strftime('%Y-%m-%d %H:%M:%S')}\n" + done.stdout)
    fresh = write_manifest(plan, manifest.data.get("pip_check", "not run"))
    fresh.data["requested"] = manifest.data.get("requested", [])
    fresh.write()
    return fresh
