"""``core.training-hub``: training-hub installed next to thub, and which ``thub`` script runs.

The real training-hub 0.11.2 wheel, installed with ``pip install --no-deps --target`` at
build/training-hub-0.11.2 (scripts/test-all.sh): its metadata on PYTHONPATH is an installed
training-hub, and its ``bin/thub`` is the console script pip wrote for it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TARGET = ROOT / "build" / "training-hub-0.11.2"


def _check(thub, env: dict[str, str]) -> dict:
    if not (TARGET / "training_hub-0.11.2.dist-info").is_dir() or not (TARGET / "bin" / "thub").exists():
        pytest.skip(f"training-hub 0.11.2 is not installed at {TARGET} (see scripts/test-all.sh)")
    done = thub("doctor", "core.training-hub", "--json", env=env)
    report = json.loads(done.stdout)
    (check,) = report["checks"]
    return check


def _path(*folders: Path) -> str:
    return os.pathsep.join([*map(str, folders), os.environ.get("PATH", "")])


def test_training_hubs_script_first_on_path_fails_with_the_fix(thub) -> None:
    check = _check(thub, {"PYTHONPATH": str(TARGET), "PATH": _path(TARGET / "bin")})
    assert check["status"] == "fail"
    assert "training-hub 0.11.2 is installed here" in check["summary"] and "is Training Hub's" in check["summary"]
    assert f"`thub` on PATH: {TARGET / 'bin' / 'thub'} (runs training_hub.cli:main)" in check["details"]
    assert "declared here by training-hub: training_hub.cli:main" in check["details"]
    assert "pip uninstall training-hub" in check["fix"] and "thub install BACKEND --into managed" in check["fix"]


def test_training_hub_installed_next_to_thub_warns(thub) -> None:
    check = _check(thub, {"PYTHONPATH": str(TARGET), "PATH": _path(Path(sys.executable).parent)})
    assert check["status"] == "warn" and "training-hub 0.11.2 is installed here too" in check["summary"]
    assert any(line.endswith("(runs thub.cli.main:main)") for line in check["details"])
    assert "pip uninstall training-hub" in check["fix"]


def test_without_training_hub_the_check_passes(thub) -> None:
    check = _check(thub, {"PATH": _path(Path(sys.executable).parent)})
    assert check["status"] == "ok" and "training-hub is not installed here" in check["summary"]


def test_training_hubs_script_from_another_environment_fails(thub) -> None:
    # training-hub not importable here, but its script comes first on PATH
    check = _check(thub, {"PATH": _path(TARGET / "bin")})
    assert check["status"] == "fail" and "Training Hub's `thub` comes first on PATH" in check["summary"]
    assert "python -m thub" in check["fix"]
