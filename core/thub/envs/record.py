"""What ``thub_run.json`` records about the environment a run's child process uses."""

from __future__ import annotations

import sys
from typing import Any

from thub.specs import BackendSpec


def environment_record(backend: BackendSpec) -> dict[str, Any]:
    """``{"kind": "current"|"managed", ...}``; a managed one with its manifest's lock.

    The lock's requirement lines are copied in, so a run stays reproducible after its
    environment is removed or upgraded (``pip install -r`` them, torch first).
    """
    from thub.envs.manifest import manifest_for_python

    manifest = manifest_for_python(backend.python)
    if manifest is None:
        return {"kind": "current", "python": backend.python or sys.executable, "prefix": sys.prefix}
    entry = manifest.backend(backend.name) or {}
    lock = manifest.lock_path
    lines: list[str] = []
    if lock is not None and lock.exists():
        lines = [line for line in lock.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {
        "kind": "managed",
        "name": manifest.name,
        "path": str(manifest.env_path),
        "python": manifest.python,
        "python_version": manifest.data.get("python_version"),
        "installer": manifest.data.get("installer"),
        "torch": manifest.data.get("torch"),
        "library": entry.get("library"),
        "lock": {
            "path": str(lock) if lock else None,
            "sha256": manifest.data.get("lock_sha256"),
            "requirements": lines,
        },
    }
