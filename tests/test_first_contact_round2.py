"""Issue 24, items 6, 7 and 9: what a newcomer meets right after `scripts/setup.sh` is right. The
README's demo command is the one setup.sh ran, every fix the doctor or a backend prints is a
command that exists, listings name what `thub install` offers, and piped or narrow tables read well.
Each test runs the real CLI (click's runner or a piped child process) or reads the real files."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def thub(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``thub ARGS`` as a child process with stdout and stderr piped (not a terminal)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_") and k != "COLUMNS"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=300, cwd=cwd or ROOT)


# --- item 6: the README's demo command is the one setup.sh runs ---------------------------------


def _readme_demo() -> list[str]:
    """The `thub train` line of the README's code block right after "runs the demo"."""
    readme = (ROOT / "README.md").read_text()
    after = readme.split("runs the demo", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, flags=re.S)
    assert block, "no code block after 'runs the demo' in README.md"
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return shlex.split(next(line for line in lines if line.startswith("thub train")))


def _setup_demo() -> list[str]:
    """The demo command scripts/setup.sh runs (its `demo=(...)` array)."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    found = re.search(r"^\s*demo_command=\((.*?)\)\s*$", setup, flags=re.M)
    assert found, "scripts/setup.sh defines no demo_command=(...) array"
    return shlex.split(found.group(1))


def test_readme_demo_command_is_the_one_setup_runs() -> None:
    """Right after setup.sh, runs/demo-sft holds a finished run: the README's command must be the
    one setup.sh ran (with --overwrite), or it fails on the first thing a newcomer types."""
    assert _readme_demo() == _setup_demo()
    assert "--overwrite" in _readme_demo()
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '"${demo_command[@]}"' in setup, "setup.sh runs the array it prints"
