"""``thub_manifest.json``: the sha256 and size of every file of a model folder thub wrote.

``thub checkpoint merge``, ``consolidate`` and export (``thub train --export``) write it into the
folder as their last step, before the folder is renamed into place; ``thub checkpoint verify``
checks the folder against it (a flipped bit in a tensor that still loads and is finite is found
only this way); ``thub checkpoint push`` refuses a folder that no longer matches it and lists each
file with its sha256 in the model card and in ``result.json``'s push entry. A manifest is about
regular files inside the folder: a listed path that is absolute, climbs out (``..``) or is a link
is itself a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["MANIFEST", "ManifestCheck", "check_manifest", "file_entries", "manifest_bytes", "sha256_of",
           "write_manifest"]

MANIFEST = "thub_manifest.json"
_CHUNK = 8 << 20
#: the largest manifest read back (a folder of a million files is ~150 MB; anything larger is not one)
_MAX_BYTES = 256 << 20


def sha256_of(path: Path) -> str:
    """The sha256 of ``path``'s bytes, read in chunks (a model shard is never held whole)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _regular_files(folder: Path) -> list[Path]:
    """Every regular file under ``folder`` (links neither listed nor followed), sorted, the manifest
    itself left out."""
    found: list[Path] = []
    for where, _dirs, names in os.walk(folder):  # followlinks=False: a linked folder is not entered
        for name in names:
            path = Path(where) / name
            if not path.is_symlink() and path.is_file() and path.relative_to(folder).as_posix() != MANIFEST:
                found.append(path)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def file_entries(folder: Path) -> list[dict[str, Any]]:
    """``{"path", "bytes", "sha256"}`` of every regular file under ``folder`` (relative POSIX path),
    sorted by path; links are not followed."""
    return [{"path": p.relative_to(folder).as_posix(), "bytes": p.stat().st_size, "sha256": sha256_of(p)}
            for p in _regular_files(folder)]


def manifest_bytes(files: list[dict[str, Any]], written_by: str) -> bytes:
    """A manifest's content listing ``files`` (``{path, bytes, sha256}``, sorted by path here)."""
    listed = sorted(({"path": f["path"], "bytes": f["bytes"], "sha256": f["sha256"]} for f in files),
                    key=lambda f: f["path"])
    content = {"manifest_version": 1, "written_by": written_by, "created": round(time.time(), 3), "files": listed}
    return (json.dumps(content, indent=2) + "\n").encode()


def write_manifest(folder: Path, written_by: str) -> dict[str, Any]:
    """Write ``folder/thub_manifest.json`` for the files there now; returns its content."""
    data = manifest_bytes(file_entries(folder), written_by)
    (folder / MANIFEST).write_bytes(data)
    return json.loads(data)  # type: ignore[no-any-return]


@dataclass
class ManifestCheck:
    """The folder against its manifest: ``ok`` None when there is no manifest."""

    ok: bool | None
    message: str
    problems: list[str] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)


def _listed(content: Any) -> tuple[list[dict[str, Any]] | None, str | None]:
    files = content.get("files") if isinstance(content, dict) else None
    if not isinstance(files, list):
        return None, "has no list of files"
    for entry in files:
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str) and isinstance(entry.get("sha256"), str)
                and isinstance(entry.get("bytes"), int) and not isinstance(entry.get("bytes"), bool)):
            return None, f"holds an entry that is not {{path, bytes, sha256}}: {str(entry)[:80]}"
    return files, None


def check_manifest(folder: Path) -> ManifestCheck:
    """``folder`` against its ``thub_manifest.json``: every listed file there, a regular file inside
    the folder, with the listed size and sha256, and no file that it does not list."""
    path = folder / MANIFEST
    if not path.is_file() or path.is_symlink():
        return ManifestCheck(None, f"no {MANIFEST} (thub merge, consolidate and export write one)")
    try:
        if path.stat().st_size > _MAX_BYTES:
            return ManifestCheck(False, f"{MANIFEST} is larger than any manifest ({path.stat().st_size} bytes)")
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        return ManifestCheck(False, f"{MANIFEST} is unreadable ({type(exc).__name__})")
    files, why = _listed(content)
    if files is None:
        return ManifestCheck(False, f"{MANIFEST} {why}")
    problems: list[str] = []
    root = folder.resolve()
    for entry in files:
        name = PurePosixPath(entry["path"])
        target = folder / name
        if name.is_absolute() or ".." in name.parts or not name.parts:
            problems.append(f"{entry['path']}: a path outside the folder")
        elif target.is_symlink() or not target.resolve().is_relative_to(root):
            problems.append(f"{entry['path']}: a link (the manifest lists regular files only)")
        elif not target.is_file():
            problems.append(f"{entry['path']}: missing")
        elif target.stat().st_size != entry["bytes"]:
            problems.append(f"{entry['path']}: {target.stat().st_size} bytes, the manifest says {entry['bytes']}")
        elif sha256_of(target) != entry["sha256"]:
            problems.append(f"{entry['path']}: its sha256 differs from the manifest's (changed since it was written)")
    listed = {entry["path"] for entry in files}
    problems += [f"{p.relative_to(folder).as_posix()}: not in the manifest (added after it was written)"
                 for p in _regular_files(folder) if p.relative_to(folder).as_posix() not in listed]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return ManifestCheck(False, f"{problems[0]}{more}", problems, files)
    return ManifestCheck(True, f"{len(files)} files, each as {MANIFEST} lists it (size and sha256)", [], files)
