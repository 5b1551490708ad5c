"""thub's version is one fact: ``thub/_version.py``, which the package, its metadata and pyproject agree on, and
importing it ties in nothing else (issue 36 item 3)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import thub
from thub._version import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__ == thub.__version__ == version("thub")


def test_the_version_module_imports_nothing_of_thub() -> None:
    probe = "import sys, thub._version; print(sorted(m for m in sys.modules if m.startswith('thub')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['thub', 'thub._version']"
