"""scripts/system-packages.sh, the system-package step of scripts/test-all.sh (issue 24 item 2): as a
normal user without sudo it installs nothing, names the command that does and exits 0, so the suite
still runs; the tests needing those programs skip with that command as their reason (conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "system-packages.sh"
BINARIES = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel", "openssl",
            "shellcheck")
INSTALL = "sudo bash scripts/system-packages.sh"


def _bin(folder: Path, tools: dict[str, str]) -> str:
    """A PATH of one folder: the real ``dirname``, ``id``, ``env`` and ``true`` the script uses, plus
    ``tools`` (name -> shell script). Everything else (slurmctld, openssl, sudo, apt-get, ...) is missing."""
    folder.mkdir()
    for real in ("dirname", "id", "env", "true"):
        (folder / real).symlink_to(shutil.which(real) or f"/usr/bin/{real}")
    for name, body in tools.items():
        (folder / name).write_text(f"#!/bin/bash\n{body}\n")
        (folder / name).chmod(0o755)
    folder.chmod(0o755)
    return str(folder)


def _as_normal_user(args: list[str]) -> list[str]:
    """``args`` run as user nobody when this runs as root (as it does in CI), else as is."""
    if os.geteuid() != 0:
        return args
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux) to switch to a normal user")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *args]


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A temporary folder user nobody can read (pytest's own are private to this user)."""
    with tempfile.TemporaryDirectory(prefix="thub-system-packages-", dir="/tmp") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def _run(args: list[str], path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env={"PATH": path, "HOME": "/tmp"})


def test_a_normal_user_without_sudo_gets_the_install_command_and_exit_0(shared: Path) -> None:
    called = shared / "apt-get-called"
    path = _bin(shared / "bin", {"apt-get": f"touch {called}"})
    done = _run(_as_normal_user(["/bin/bash", str(SCRIPT)]), path)
    assert done.returncode == 0, done.stderr
    assert INSTALL in done.stderr and "not root and no passwordless sudo" in done.stderr
    assert "missing: slurmctld" in done.stderr and "shellcheck" in done.stderr
    assert "tests will skip" in done.stderr
    assert not called.exists()  # nothing was attempted


def test_a_normal_user_with_passwordless_sudo_installs_through_it(shared: Path) -> None:
    # sudo and apt-get stand in for the real ones (which would install system packages): sudo runs
    # the command it is given after -n, apt-get records its arguments
    log = shared / "apt-get.log"
    log.write_text("")
    log.chmod(0o666)
    path = _bin(shared / "bin", {"sudo": '[ "$1" = -n ] && shift; exec "$@"', "apt-get": f'echo "$*" >> {log}'})
    done = _run(_as_normal_user(["/bin/bash", str(SCRIPT)]), path)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "update -qq", "install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge openssl shellcheck"]


def test_nothing_to_do_when_every_program_is_there(tmp_path: Path) -> None:
    called = tmp_path / "apt-get-called"
    path = _bin(tmp_path / "bin", {**{b: "exit 0" for b in BINARIES}, "apt-get": f"touch {called}"})
    done = _run(["/bin/bash", str(SCRIPT)], path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not called.exists()


def test_tests_needing_those_programs_skip_with_the_command(tmp_path: Path) -> None:
    """pytest with a PATH without SLURM, openssl and shellcheck: skipped, each naming the install."""
    path = _bin(tmp_path / "bin", {})
    (tmp_path / "bin" / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs",
         "tests/test_slurm_cluster.py", "tests/test_smoke_checker.py", "tests/test_kubeflow.py",
         "-k", "shellcheck or slurm or rotating_token"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stdout[-3000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    reasons = "\n".join(skipped)
    assert "not on PATH: slurmctld, slurmd, munged" in reasons and "not on PATH: shellcheck" in reasons
    assert "not on PATH: openssl" in reasons
    assert len(skipped) >= 3 and all(INSTALL in line for line in skipped), reasons
    assert " passed" not in done.stdout.splitlines()[-1]  # every selected test needed one of them
