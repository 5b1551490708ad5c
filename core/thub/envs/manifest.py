"""The manifest of a managed environment: what it holds, written at install time.

``<data>/envs/<name>/thub-env.json`` is written by ``thub install`` from what the environment
itself reports (:mod:`thub.envs.describe`), so listing its backends costs one small file read
and never imports the environment's packages. The backend specs built from it carry
``python`` = the environment's interpreter; their ``requirements`` are empty because they are
satisfied *there*, not in the interpreter running thub (the manifest keeps them, with the
versions installed, and ``thub doctor`` compares both with the environment's metadata).

``THUB_ENVS`` (comma-separated environment names; set but empty means none) limits which
managed environments are read, as ``THUB_PLUGINS`` does for the current environment's plugins.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thub.envs.paths import MANIFEST_NAME, envs_dir
from thub.specs import BackendSpec, Provenance

SCHEMA_VERSION = 1


@dataclass
class Manifest:
    """A parsed ``thub-env.json``; ``data`` is the raw JSON object."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.data.get("name") or self.path.parent.name)

    @property
    def env_path(self) -> Path:
        return self.path.parent

    @property
    def python(self) -> str:
        return str(self.data["python"])

    @property
    def lock_path(self) -> Path | None:
        lock = self.data.get("lock")
        return self.env_path / lock if lock else None

    @property
    def backends(self) -> list[dict[str, Any]]:
        return list(self.data.get("backends") or [])

    def backend(self, name: str) -> dict[str, Any] | None:
        return next((b for b in self.backends if b.get("name") == name), None)

    def specs(self) -> list[BackendSpec]:
        """The backend specs this environment provides, runnable through its interpreter."""
        return [backend_spec(entry, self.python) for entry in self.backends]

    def write(self) -> None:
        """Write atomically (a reader never sees half a manifest)."""
        from thub.fileio import write_text_atomic

        write_text_atomic(self.path, json.dumps(self.data, indent=2, sort_keys=False, default=str) + "\n")


def backend_spec(entry: dict[str, Any], python: str) -> BackendSpec:
    """A :class:`BackendSpec` from one manifest backend entry (see :mod:`thub.envs.describe`)."""
    return BackendSpec(
        name=entry["name"],
        summary=entry.get("summary", ""),
        algorithms={alg: frozenset(params) for alg, params in entry.get("algorithms", {}).items()},
        runner=entry["runner"],
        check_rows=entry.get("check_rows"),  # run through the environment's interpreter (Registry.check_rows)
        tracker_params_alone=frozenset(entry.get("tracker_params_alone") or ()),
        requirements=(),  # satisfied in the managed environment; kept in the manifest
        needs_cuda=bool(entry.get("needs_cuda", False)),
        priority=int(entry.get("priority", 0)),
        defaults=dict(entry.get("defaults") or {}),
        launcher=entry.get("launcher", "python"),
        python=python,
        docs=entry.get("docs"),
        provenance=Provenance(entry.get("plugin", "?"), entry.get("distribution"), entry.get("version")),
    )


def read_manifest(path: Path) -> Manifest:
    """Parse one manifest file; ValueError when it is not a thub manifest."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or "python" not in data or "backends" not in data:
        raise ValueError(f"{path} is not a thub environment manifest")
    return Manifest(path, data)


def _allowed() -> set[str] | None:
    value = os.environ.get("THUB_ENVS")
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def iter_manifests(root: Path | None = None) -> Iterator[Manifest | tuple[Path, str]]:
    """Every managed environment's manifest, or ``(path, error)`` for an unreadable one."""
    root = root or envs_dir()
    allowed = _allowed()
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return
    for folder in folders:
        if allowed is not None and folder.name not in allowed:
            continue
        path = folder / MANIFEST_NAME
        if not path.exists():
            continue  # an install in progress, or a folder that is not ours
        try:
            yield read_manifest(path)
        except (OSError, ValueError, KeyError) as exc:
            yield path, f"{type(exc).__name__}: {exc}"


def list_manifests(root: Path | None = None) -> list[Manifest]:
    """The readable manifests (unreadable ones are reported by ``thub doctor``)."""
    return [m for m in iter_manifests(root) if isinstance(m, Manifest)]


def find_manifest(name: str) -> Manifest | None:
    """The manifest of environment ``name``, if it exists."""
    from thub.envs.paths import env_dir

    path = env_dir(name) / MANIFEST_NAME
    return read_manifest(path) if path.exists() else None


def manifest_for_python(python: str | None) -> Manifest | None:
    """The manifest of the managed environment whose interpreter is ``python``."""
    if not python:
        return None
    env = Path(python).parent.parent
    path = env / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return read_manifest(path)
    except (OSError, ValueError):
        return None


def managed_backends() -> tuple[list[tuple[str, BackendSpec]], list[tuple[str, str]]]:
    """``([(env name, spec)], [(env name, error)])`` over every managed environment."""
    found: list[tuple[str, BackendSpec]] = []
    errors: list[tuple[str, str]] = []
    for item in iter_manifests():
        if isinstance(item, Manifest):
            try:
                found.extend((item.name, spec) for spec in item.specs())
            except (KeyError, TypeError, ValueError) as exc:
                errors.append((item.name, f"bad manifest {item.path}: {type(exc).__name__}: {exc}"))
        else:
            errors.append((item[0].parent.name, item[1]))
    return found, errors
