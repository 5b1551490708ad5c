"""Issue 15, item 1: two commands from a fresh clone. The README's commands are the scripts CI
runs, the set-up takes CPU torch from the PyTorch CPU index, and a missing optional plugin makes
its tests skip with the install command (a real pytest run with the plugin made unimportable)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Makes the named top-level modules look uninstalled: find_spec gives None, import fails.
BLOCKER = textwrap.dedent("""
    import importlib.util, os, sys
    blocked = {n for n in os.environ.get("BLOCK_MODULES", "").split(",") if n}
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, Block())
    real = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: (
        None if name.partition(".")[0] in blocked else real(name, package))
""")


def _code_blocks(markdown: str) -> list[str]:
    return re.findall(r"```(?:bash)?\n(.*?)```", markdown, flags=re.S)


def test_readme_has_two_commands_and_ci_runs_them() -> None:
    readme = (ROOT / "README.md").read_text()
    first = _code_blocks(readme.split("## Two commands", 1)[1])[0]
    commands = [line.split("#")[0].strip() for line in first.splitlines() if line.strip()]
    assert commands == ["bash scripts/setup.sh", "bash scripts/test-all.sh"], commands
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-2:] == commands, ci
    assert not any("pip install" in line for line in ci), "install lines belong in scripts/test-all.sh"
    assert "download.pytorch.org/whl/cpu" in readme and '-m "not slow"' in readme
    assert re.search(r"whole suite.{0,80}?about \d+ minutes", readme, re.S), "the README says how long the tests take"


def test_setup_takes_cpu_torch_and_test_all_installs_then_tests() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "torch==2.13.0+cpu" in setup and "--extra-index-url https://download.pytorch.org/whl/cpu" in setup
    assert '-e ".[test]" -e ./thub-plugin-trl' in setup and "make_tiny_model.py" in setup
    assert "thub train sft --backend trl --config examples/configs/sft.yaml" in setup
    test_all = (ROOT / "scripts" / "test-all.sh").read_text()
    assert "scripts/setup.sh --no-demo" in test_all
    assert test_all.count("pip install") >= 5 and test_all.rstrip().endswith('exec bash scripts/test.sh "$@"')
    for plugin in sorted(ROOT.glob("thub-plugin-*")):
        assert f"./{plugin.name}" in test_all + setup, f"{plugin.name} is installed by neither script"
    for script in ("setup.sh", "test-all.sh", "test.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)]).returncode == 0


def _pytest(args: list[str], blocked: str, tmp_path: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, BLOCK_MODULES=blocked, PYTHONPATH=str(tmp_path))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_missing_plugin_skips_its_tests_with_the_install_command(tmp_path: Path) -> None:
    done = _pytest(["--collect-only", "thub-plugin-verl/tests", "thub-plugin-minitrainer/tests"],
                   "thub_plugin_verl,thub_plugin_minitrainer", tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode in (0, 5), out  # 5: nothing collected, everything skipped
    assert "error" not in out.lower(), out
    assert "pip install --no-deps -e ./thub-plugin-verl" in out
    assert "pip install --no-deps -e ./thub-plugin-minitrainer" in out and "scripts/test-all.sh" in out


@pytest.mark.slow
def test_test_module_importing_a_missing_plugin_is_skipped(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "conftest.py", project / "conftest.py")
    (project / "tests" / "test_uses_plugin.py").write_text("import thub_plugin_verl\n\ndef test_x():\n    pass\n")
    (project / "tests" / "test_typo.py").write_text("import no_such_module_at_all\n")
    done = _pytest(["tests"], "thub_plugin_verl", tmp_path, cwd=project)
    out = done.stdout + done.stderr
    assert "thub_plugin_verl is not installed" in out and "scripts/test-all.sh" in out, out
    assert "no_such_module_at_all" in out and "1 error" in out, out  # a real mistake still errors
