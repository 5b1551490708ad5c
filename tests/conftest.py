"""Fixtures shared by the core tests: for ``thub doctor`` (test_doctor.py, test_doctor_checks.py) a registry
with a fake plugin whose checks have every kind of outcome, and the real registry; for the trackers an
interpreter without wandb; ``thub``, the CLI in a subprocess (one helper for every test module); and
real files a run or a library wrote, built once per session (``fsdp2_dcp``)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from thub import hookimpl
from thub.manager import Registry, get_registry, load_registry, set_registry
from thub.specs import BackendSpec, CheckContext, CheckResult, CheckSpec


def _hang(_: CheckContext) -> CheckResult:
    time.sleep(30)  # far past the check's timeout
    return CheckResult("ok", "slept 30")


def _boom(_: CheckContext) -> CheckResult:
    raise RuntimeError("kaboom")


class FakePlugin:
    """Registers a backend and checks with every kind of outcome."""

    @hookimpl
    def thub_register_backends(self, register):  # type: ignore[no-untyped-def]
        register(BackendSpec("fakebe", "fake backend", {"sft": frozenset()}, "nowhere:run",
                             requirements=("thub-surely-not-installed>=1",)))
        register(BackendSpec("otherbe", "other backend", {"sft": frozenset()}, "nowhere:run"))

    @hookimpl
    def thub_register_checks(self, register):  # type: ignore[no-untyped-def]
        register(CheckSpec("fake.ok", "Fine", lambda c: CheckResult("ok", "all good"),
                           tags=frozenset({"preflight"})))
        register(CheckSpec("fake.warn", "Meh", lambda c: CheckResult("warn", "so-so", fix="echo fix-warn"),
                           tags=frozenset({"faketag"})))
        register(CheckSpec("fake.fail", "Broken", lambda c: CheckResult("fail", "broken", ("a detail",),
                                                                         fix="echo fix-fail"),
                           tags=frozenset({"failtag"})))
        register(CheckSpec("fake.crash", "Crashes", _boom, tags=frozenset({"crashtag"})))
        register(CheckSpec("fake.hang", "Hangs", _hang, tags=frozenset({"hangtag"}), timeout=0.3))
        register(CheckSpec("fake.na", "Not here", lambda c: CheckResult("ok", "never"),
                           applies=lambda c: False, tags=frozenset({"natag"})))
        register(CheckSpec("fake.backend-only", "Only for otherbe", lambda c: CheckResult("ok", "x"),
                           tags=frozenset({"preflight"}), backends=frozenset({"otherbe"})))


@pytest.fixture
def fake_registry() -> Iterator[Registry]:
    registry = load_registry(extra_plugins=[("fakeplugin", FakePlugin())])
    set_registry(registry)
    try:
        yield registry
    finally:
        set_registry(None)


@pytest.fixture
def real_registry() -> Iterator[Registry]:
    set_registry(None)
    try:
        yield get_registry()
    finally:
        set_registry(None)


@pytest.fixture
def without_wandb(tmp_path: Path) -> Path:
    """A folder to put on PYTHONPATH: its sitecustomize makes ``wandb`` unimportable for the whole
    interpreter, as if the package were not installed."""
    folder = tmp_path / "without_wandb"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys

        class _NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name == "wandb" or name.startswith("wandb."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, _NotInstalled())
    """))
    return folder


class Thub:
    """``python -m thub ARGS`` in a subprocess, as a user runs it: no THUB_* variable of the caller's
    leaks in, and the cache (``XDG_CACHE_HOME``) is this test process's own (``~/.cache/thub`` is
    shared with every checkout that uses this venv)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    def environ(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a thub subprocess gets: this one without THUB_*, then ``env`` on top."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
        environ["XDG_CACHE_HOME"] = str(self.cache)
        environ.update(env or {})
        return environ

    def __call__(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Run thub; ``timeout`` is only a hang guard."""
        return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                              env=self.environ(env), cwd=cwd, timeout=timeout)


@pytest.fixture(scope="session")
def thub(tmp_path_factory: pytest.TempPathFactory) -> Thub:
    """Run the thub CLI in a subprocess: ``thub("checkpoint", "ls", str(run), "--json")`` (see :class:`Thub`)."""
    return Thub(tmp_path_factory.mktemp("thub-cache"))


@pytest.fixture(scope="session")
def fsdp2_dcp(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model sharded by FSDP2 over 2 gloo processes and saved with ``dcp.save``
    (examples/write_fsdp2_dcp.py), written once per session: tests copy it before changing anything."""
    out = tmp_path_factory.mktemp("fsdp2") / "dcp"
    done = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "examples" / "write_fsdp2_dcp.py"),
                           "--model", str(tiny_model), "--out", str(out), "--nproc", "2"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@dataclasses.dataclass(frozen=True)
class ExportedLoraRun:
    """A finished trl ``lora_sft`` run exported with ``--export``: its folder, the export and what thub printed."""

    run: Path
    hf: Path
    stdout: str


@pytest.fixture(scope="session")
def trl_lora_run(thub: Thub, tiny_model: Path, demo_data: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> ExportedLoraRun:
    """One real trl lora_sft run for the checkpoint tests (test_checkpoint_merge_verify.py,
    test_checkpoint_export.py): 3 steps on the tiny model, an adapter saved at step 2 (checkpoints/checkpoint-2)
    and at the end, and ``--export``: the final adapter merged and verified into ``hf``. Tests copy what they
    change."""
    root = tmp_path_factory.mktemp("lora")
    done = thub("train", "lora_sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(root / "run"), "--max-steps", "3",
                "--lora-r", "4", "--learning-rate", "5e-2", "--save-steps", "2", "--export", str(root / "hf"))
    assert done.returncode == 0, done.stdout + done.stderr
    return ExportedLoraRun(root / "run", root / "hf", done.stdout)


# --- a real one-node SLURM (scripts/slurm-up.sh), one per session: tests/test_slurm_cluster.py,
# tests/test_post_run_slurm.py

_ROOT = Path(__file__).parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def slurm_env() -> Iterator[dict[str, str]]:
    """A fresh cluster for the session; yields the environment clients need (SLURM_CONF)."""
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-up.sh runs munged, slurmctld and slurmd as root (SlurmUser=root): "
                    "run these tests as root")
    base = Path(tempfile.mkdtemp(prefix="thub-slurm-", dir="/tmp"))  # short: munge's socket lives here
    env = {**os.environ, "SLURMCTLD_PORT": str(_free_port()), "SLURMD_PORT": str(_free_port())}
    up = subprocess.run([str(_ROOT / "scripts" / "slurm-up.sh"), str(base)], capture_output=True, text=True,
                        env=env, timeout=600)  # a hang guard (slurm-up.sh waits up to 6 min)
    if up.returncode != 0:
        pytest.fail(f"slurm-up.sh failed:\n{up.stdout}\n{up.stderr}")
    try:
        yield {"SLURM_CONF": str(base / "etc" / "slurm.conf")}
    finally:
        subprocess.run([str(_ROOT / "scripts" / "slurm-down.sh"), str(base)], capture_output=True, timeout=120)


@dataclasses.dataclass
class S3Server:
    """moto's S3 server running in its own process, with a ``models`` bucket."""

    environ: dict[str, str]  #: what points boto3/s3fs (and thub's children) at it
    process: subprocess.Popen[bytes]

    def client(self) -> object:
        import boto3  # type: ignore[import-untyped]  # ships no stubs

        return boto3.client("s3", endpoint_url=self.environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                            aws_access_key_id="x", aws_secret_access_key="y")


@pytest.fixture
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible server (moto's server mode) on a free port of 127.0.0.1, stopped after
    the test (throwaway credentials: the server accepts any)."""
    pytest.importorskip("moto")
    pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = S3Server({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test-access-id",
                       "AWS_SECRET_ACCESS_KEY": "test-secret-access-key", "AWS_DEFAULT_REGION": "us-east-1"},
                      process)
    try:
        client: Any = server.client()
        deadline = time.monotonic() + 120  # a hang guard only: it is up in about a second
        while True:
            try:
                client.create_bucket(Bucket="models")
                break
            except Exception:  # noqa: BLE001 - not listening yet
                if process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)
