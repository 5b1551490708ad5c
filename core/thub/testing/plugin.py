"""pytest fixtures for thub tests (registered through the ``pytest11`` entry point)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from thub import manager


@pytest.fixture
def thub_registry() -> Iterator[manager.Registry]:
    """A freshly loaded registry installed as the process-wide one, restored afterwards."""
    registry = manager.load_registry()
    manager.set_registry(registry)
    try:
        yield registry
    finally:
        manager.set_registry(None)


@pytest.fixture
def thub_plugin() -> Iterator[Callable[..., manager.Registry]]:
    """``thub_plugin(name, obj, ...)``: load a registry with extra in-process plugins."""

    def add(*plugins: tuple[str, object], entry_points: bool = True) -> manager.Registry:
        registry = manager.load_registry(extra_plugins=plugins, entry_points=entry_points)
        manager.set_registry(registry)
        return registry

    try:
        yield add
    finally:
        manager.set_registry(None)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None

    def json(self) -> Any:
        import json

        return json.loads(self.stdout)


@pytest.fixture
def thub_cli() -> Callable[..., CliResult]:
    """Run ``thub ARGS...`` in-process; returns exit code, stdout and stderr separately."""
    from click.testing import CliRunner

    from thub.cli.main import cli

    def invoke(*args: str, env: dict[str, str] | None = None) -> CliResult:
        result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)
        return CliResult(result.exit_code, result.stdout, result.stderr, result.exception)

    return invoke
