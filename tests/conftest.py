"""Fixtures shared by the core tests: for ``thub doctor`` (test_doctor.py, test_doctor_checks.py) a registry
with a fake plugin whose checks have every kind of outcome, and the real registry; for the trackers an
interpreter without wandb."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

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
