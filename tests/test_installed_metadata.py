"""Installed-distribution metadata is read once per process (``thub.installed``): ``thub doctor``
with several backends used to parse ~1,700 METADATA files while building one fix text, enough
to run past a check's timeout on a busy machine (issue 24). The cache follows installs: a real
``pip install`` into a folder on ``sys.path`` is seen by the next lookup in the same process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

# A plugin distribution (installed into a folder on PYTHONPATH, found through its entry point) with
# six backends whose pins are unsatisfied, some contradicting what is installed: the path that builds
# a fix text per backend, checking every pin against every installed requirement.
PLUGIN = """
from thub import hookimpl
from thub.specs import BackendSpec


@hookimpl
def thub_register_backends(register):
    for i in range(6):
        register(BackendSpec(f"pinned{i}", "pins", {"sft": frozenset()}, "nowhere:run",
                             requirements=("packaging<1", "click<1", "pyyaml<1", f"thub-surely-absent-{i}>=1")))
"""

# Counts every read of a distribution's METADATA (PKG-INFO for an egg) in the process it runs in, at
# the file: importlib.metadata and its backport importlib_metadata (which, once a library imports it,
# serves importlib.metadata.distributions() too) both read it with pathlib.Path.read_text.
COUNTER = """
import atexit, collections, json, os, pathlib

reads = collections.Counter()
_read_text = pathlib.Path.read_text


def read_text(self, *args, **kwargs):
    if self.name in ("METADATA", "PKG-INFO"):
        reads[str(self.parent)] += 1
    return _read_text(self, *args, **kwargs)


pathlib.Path.read_text = read_text
atexit.register(lambda: open(os.environ["READS_OUT"], "w").write(json.dumps(reads)))
"""


@pytest.fixture
def metadata_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each distribution's METADATA is read in this process from now on (see COUNTER)."""
    reads: Counter[str] = Counter()
    real = Path.read_text

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name in ("METADATA", "PKG-INFO"):
            reads[str(self.parent)] += 1  # the .dist-info folder
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    return reads


def test_a_doctor_run_parses_each_distribution_once(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"  # on the doctor's PYTHONPATH
    site.mkdir()
    (site / "thub_manybackends.py").write_text(PLUGIN)
    info = site / "thub_manybackends-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thub-manybackends\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[thub]\nmanybackends = thub_manybackends\n")
    (tmp_path / "counter").mkdir()
    (tmp_path / "counter" / "sitecustomize.py").write_text(COUNTER)
    out = tmp_path / "reads.json"
    path = [str(tmp_path / "counter"), str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path),
           "READS_OUT": str(out), "XDG_CACHE_HOME": str(tmp_path / "cache")}  # plugin discovery runs too
    # --timeout 600 only guards against a hang: the outcome must not depend on the machine's speed
    done = subprocess.run([sys.executable, "-m", "thub", "doctor", "--json", "--timeout", "600"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    requirements = checks["core.backend-requirements"]
    assert requirements["status"] == "warn", requirements
    assert all(f"pinned{i}" in requirements["summary"] for i in range(6)), requirements
    assert requirements["fix"].count("thub install") + requirements["fix"].count("pip install") >= 6
    reads = json.loads(out.read_text())
    assert str(info) in reads and len(reads) > 20  # the whole environment was looked at
    assert {path: n for path, n in reads.items() if n > 1} == {}


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel (one module and its .dist-info), as a build backend writes it."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                                       *(f"Requires-Dist: {r}" for r in requires)]) + "\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as wheel:
        for arcname, text in files.items():
            wheel.writestr(arcname, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{a},," + "\n" for a in [*files, f"{info}/RECORD"]))
    return path


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A second virtual environment (its interpreter, its site-packages), whose site-packages is
    on this process's ``sys.path``: pip installs, upgrades and uninstalls there as anywhere."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    monkeypatch.syspath_prepend(str(site))
    return venv / "bin" / "python", site


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args, "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_cache_follows_installs_in_the_same_process(environment: tuple[Path, Path], tmp_path: Path,
                                                        metadata_reads: Counter[str]) -> None:
    from thub import installed

    python, site = environment
    assert installed.version("thubcachedemo") is None
    _pip(python, "install", "--no-deps", "--no-index", str(_wheel(tmp_path, "thubcachedemo", "1.0", ("packaging<1",))))
    assert installed.version("thubcachedemo") == "1.0"
    assert installed.distribution("thubcachedemo").requires == ("packaging<1",)  # type: ignore[union-attr]
    reads = sum(metadata_reads.values())
    assert installed.version("packaging") == metadata.version("packaging")
    assert installed.version("thubcachedemo") == "1.0"
    assert sum(metadata_reads.values()) == reads + 1  # only metadata.version above read one again
    _pip(python, "install", "--no-deps", "--no-index", str(_wheel(tmp_path, "thubcachedemo", "2.0")))
    assert installed.version("ThubCacheDemo") == "2.0"  # the upgrade is seen; names are canonicalised
    assert installed.distribution("thubcachedemo").requires == ()  # type: ignore[union-attr]
    assert [d.version for d in installed.distributions() if d.key == "thubcachedemo"] == ["2.0"]
    _pip(python, "uninstall", "--yes", "thubcachedemo")
    assert installed.version("thubcachedemo") is None
    assert str(site / "thubcachedemo-2.0.dist-info") in metadata_reads  # read once, when it appeared
    assert metadata_reads[str(site / "thubcachedemo-2.0.dist-info")] == 1
