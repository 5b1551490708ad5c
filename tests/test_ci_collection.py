"""Nothing falls out of CI: every ``thub-plugin-*`` folder is collected, type-checked, a uv workspace member,
installed by scripts/test-all.sh and known to ``thub install``, with no list to keep in step by hand (globs
where the tool takes them, else one list this module checks); and the tiers: a test that uses a fixture which
trains, installs or starts SLURM is marked ``slow`` (``install``) automatically (conftest.py), so the fast
tier, ``-m "not slow"``, installs nothing."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in ROOT.glob("thub-plugin-*") if (p / "pyproject.toml").is_file())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _conftest(config: pytest.Config) -> Any:
    """The repository's root conftest module, as pytest loaded it (its tier lists)."""
    module = config.pluginmanager.get_plugin(str(ROOT / "conftest.py"))
    assert module is not None, "the root conftest.py is not loaded"
    return module


def _package(folder: Path) -> str:
    [package] = [p.name for p in (folder / "src").glob("thub_plugin_*") if (p / "__init__.py").is_file()]
    return package


def test_the_plugin_folders_are_found() -> None:
    assert len(PLUGINS) >= 11 and ROOT / "thub-plugin-sentence-transformers" in PLUGINS


# --- configuration derived from the folders ---------------------------------------------------------------


def test_pytest_testpaths_cover_every_plugin_folder() -> None:
    paths = PYPROJECT["tool"]["pytest"]["ini_options"]["testpaths"]
    covered = {path.parent for pattern in paths for path in ROOT.glob(pattern)}
    missing = [p.name for p in PLUGINS if (p / "tests").is_dir() and p not in covered]
    assert not missing, f"testpaths in pyproject.toml do not reach {missing}"


def test_mypy_checks_every_plugin_package() -> None:
    files = PYPROJECT["tool"]["mypy"]["files"]
    checked = {path for pattern in files for path in ROOT.glob(pattern)}
    missing = [p.name for p in PLUGINS if p / "src" / _package(p) not in checked]
    assert not missing, f"mypy's files in pyproject.toml do not reach {missing}"


def test_uv_workspace_lists_every_plugin() -> None:
    uv = PYPROJECT["tool"]["uv"]
    members = {path for pattern in uv["workspace"]["members"] for path in ROOT.glob(pattern)}
    assert set(PLUGINS) <= members
    # [tool.uv.sources] takes no glob: one list, checked here
    assert set(uv["sources"]) == {p.name for p in PLUGINS}


def test_thub_install_knows_every_plugin_folder() -> None:
    from thub.envs.catalog import CATALOG, project_name

    known = {entry.distribution: entry for entry in CATALOG.values()}
    missing = [p.name for p in PLUGINS if project_name(p) not in known]
    assert not missing, f"no install catalog entry (core/thub/envs/catalog.py) for {missing}"
    for folder in PLUGINS:
        assert known[str(project_name(folder))].folder == folder.name


def _install_lines() -> list[str]:
    """The commands of scripts/setup.sh and scripts/test-all.sh, comments dropped, continuations joined."""
    text = "\n".join((ROOT / "scripts" / name).read_text() for name in ("setup.sh", "test-all.sh"))
    text = text.replace("\\\n", " ")
    return [line.split("#", 1)[0] for line in text.splitlines() if not line.lstrip().startswith("#")]


def test_test_all_installs_every_plugin_and_no_cuda_torch() -> None:
    lines = [line for line in _install_lines() if "pip install" in line]
    for folder in PLUGINS:
        assert any(re.search(rf"-e \./{re.escape(folder.name)}(\s|$)", line) for line in lines), \
            f"scripts/test-all.sh does not install {folder.name} (python -m pip install --no-deps -e ./{folder.name})"
    # the library the sentence-transformers tests train with, pinned; the CPU torch stays (no CUDA stack)
    assert any(re.search(r'"sentence-transformers==[\d.]+"', line) for line in lines)
    assert not any(re.search(r"\bnvidia-|cu1\d\d|cuda", line) for line in lines)


@pytest.fixture(scope="module")
def collected() -> Iterator[str]:
    """``pytest --collect-only`` of the whole configured suite (testpaths), as CI runs it: its output."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)  # a hang guard
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield done.stdout


def test_every_plugin_folder_contributes_collected_tests(collected: str) -> None:
    from importlib.util import find_spec

    for folder in PLUGINS:
        if not (folder / "tests").is_dir():
            continue
        items = [line for line in collected.splitlines() if line.startswith(f"{folder.name}/tests/")]
        if find_spec(_package(folder)) is not None:
            assert items, f"{folder.name}/tests contributes no collected test"
        else:  # not installed here: skipped with its install command (scripts/test-all.sh installs it in CI)
            assert not os.environ.get("CI"), f"{_package(folder)} is not installed in CI"
            assert f"pip install --no-deps -e ./{folder.name}" in collected, collected[-3000:]


# --- tiers: auto-marking ----------------------------------------------------------------------------------


def _fixtures(path: Path) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            yield node


def _runs(fixture: ast.FunctionDef) -> set[str]:
    """What a fixture's code starts: ``train`` and/or ``install``, read from the string arguments of its
    calls (``thub("train", ...)``, ``subprocess.run([..., "pip", "install", ...])``); a dry run installs nothing."""
    found: set[str] = set()
    for call in (n for n in ast.walk(fixture) if isinstance(n, ast.Call)):
        words: list[str] = []
        for arg in call.args:
            for node in (arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    words.append(node.value)
        if "--dry-run" not in words:
            found |= {"train", "install"} & set(words)
    return found


def _test_files() -> list[Path]:
    return [ROOT / "conftest.py", *sorted(ROOT.glob("tests/**/*.py")),
            *sorted(ROOT.glob("thub-plugin-*/tests/**/*.py"))]


def test_every_fixture_that_trains_or_installs_is_listed_in_conftest(pytestconfig: pytest.Config) -> None:
    conftest = _conftest(pytestconfig)
    slow, install = conftest.SLOW_FIXTURES, conftest.INSTALL_FIXTURES
    defined = set()
    for path in _test_files():
        for fixture in _fixtures(path):
            key = f"{path.relative_to(ROOT).as_posix()}::{fixture.name}"
            defined.add(key)
            runs = _runs(fixture)
            if "install" in runs:
                assert key in install, f"{key} installs packages: add it to INSTALL_FIXTURES in conftest.py"
            elif "train" in runs:
                assert key in slow or key in install, f"{key} trains: add it to SLOW_FIXTURES in conftest.py"
    stale = sorted((slow.keys() | install.keys()) - defined)
    assert not stale, f"conftest.py lists fixtures that no longer exist: {stale}"


HOSTILE_CONFTEST = '''
import pytest

@pytest.fixture(scope="session")
def trl_lora_run():  # the name and file of the real one: here it trains nothing
    return "run"

@pytest.fixture
def report(trl_lora_run):  # uses it only through another fixture
    return trl_lora_run
'''
HOSTILE_TESTS = '''
import pytest

@pytest.fixture
def installed():  # the name of test_outside_plugin.py's fixture, in another file: installs nothing
    return "nothing"

def test_direct(trl_lora_run): pass
def test_through_a_fixture(report): pass
def test_plain(): pass
def test_same_name_elsewhere(installed): pass
'''
HOSTILE_INSTALL = '''
import pytest

@pytest.fixture(scope="module")
def installed():
    return "site"

def test_uses_the_install(installed): pass
@pytest.mark.slow
def test_marked_by_hand(): pass
'''


def _selected(project: Path, expression: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", expression, "tests"], capture_output=True, text=True, cwd=project, timeout=300)
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: everything deselected
    return sorted(line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line)


def test_tests_using_a_training_or_installing_fixture_are_marked(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "conftest.py", project / "conftest.py")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "tests" / "conftest.py").write_text(textwrap.dedent(HOSTILE_CONFTEST))
    (project / "tests" / "test_kinds.py").write_text(textwrap.dedent(HOSTILE_TESTS))
    (project / "tests" / "test_outside_plugin.py").write_text(textwrap.dedent(HOSTILE_INSTALL))
    assert _selected(project, "not slow") == ["test_plain", "test_same_name_elsewhere"]
    assert _selected(project, "slow") == ["test_direct", "test_marked_by_hand", "test_through_a_fixture",
                                          "test_uses_the_install"]
    assert _selected(project, "install") == ["test_uses_the_install"]
