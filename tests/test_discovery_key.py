"""The plugin caches' key covers where thub itself is loaded from: a second checkout run with its
``core`` first on ``PYTHONPATH`` (no distribution folder there) got the first checkout's cached
command list (``thub checkpoint``: "No such command")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"


def _key(extra_path: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if extra_path:
        env["PYTHONPATH"] = extra_path
    return subprocess.run([sys.executable, "-c", "import thub.discovery as d; print(d.__file__, d.fingerprint())"],
                          capture_output=True, text=True, check=True, env=env).stdout.split()


def test_another_copy_of_thub_gets_another_key(tmp_path: Path) -> None:
    copy = tmp_path / "core"
    shutil.copytree(CORE / "thub", copy / "thub", ignore=shutil.ignore_patterns("__pycache__"))
    here_file, here = _key(None)
    there_file, there = _key(str(copy))
    assert there_file.startswith(str(copy)) and not here_file.startswith(str(copy))
    assert here != there
    assert _key(str(copy))[1] == there  # and stays the same for the same copy
