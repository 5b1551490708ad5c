"""An fsspec push (``file://``, ``s3://``, ``gs://``) cut off halfway, found and replaced by the next one.

Before the first file, :func:`begin` writes :data:`PARTIAL` into the target: who is pushing (host, pid,
source folder) and every file the push will write. The card (``README.md``) is written last and the
marker removed after it: a target holding the marker is a push that did not finish. A retry of
``thub checkpoint push`` to that target (:func:`clear_unfinished`) removes exactly the files the marker
lists (never another file) and pushes again; it refuses while the process that wrote the marker is
still running on this host, and a marker from another host (its process cannot be checked from here)
is named with what to do. A target holding anything else is still refused ("already holds files").
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import PurePosixPath
from typing import Any

from thub.errors import UsageError
from thub.runner.lock import pid_alive

__all__ = ["PARTIAL", "begin", "clear_unfinished", "finish"]

PARTIAL = ".thub-push-partial"
#: the largest marker read back (it lists paths only)
_MAX_BYTES = 64 << 20


def _listed(fs: Any, root: str, shown: str) -> list[str]:
    """The files an unfinished push's marker lists (checked: relative paths inside the target)."""
    marker = f"{root}/{PARTIAL}"
    try:
        if fs.size(marker) > _MAX_BYTES:
            raise ValueError("larger than any marker")
        content = json.loads(fs.cat_file(marker))
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"--to {shown}: holds an unreadable {PARTIAL} ({type(exc).__name__}); it is not a push "
                         "thub can finish: push to a new or empty path") from None
    files = content.get("files") if isinstance(content, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise UsageError(f"--to {shown}: its {PARTIAL} lists no files; push to a new or empty path")
    for name in files:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise UsageError(f"--to {shown}: its {PARTIAL} names {name!r}, outside the target; nothing removed")
    host, pid = content.get("host"), content.get("pid")
    if host == socket.gethostname() and isinstance(pid, int) and pid != os.getpid() and pid_alive(pid):
        raise UsageError(f"--to {shown}: another push (pid {pid}, from {content.get('source')}) is writing it now; "
                         "wait for it, or push to another path")
    if host != socket.gethostname():
        raise UsageError(f"--to {shown}: an unfinished push from host {host} (pid {pid}) is there; if it is no "
                         f"longer running, remove {shown.rstrip('/')}/{PARTIAL} and the files it lists, then push "
                         "again")
    return list(files)


def clear_unfinished(fs: Any, root: str, shown: str, say: Any = None) -> list[str]:
    """When ``root`` holds an unfinished thub push (its marker), remove the files it lists and the
    marker; returns them ([] when there is no marker). UsageError when it cannot be replaced."""
    if not fs.exists(f"{root}/{PARTIAL}"):
        return []
    files = _listed(fs, root, shown)
    known = {f"{root}/{name}".rstrip("/") for name in [*files, "README.md", PARTIAL]}
    foreign = sorted(path for path in fs.find(root) if path.rstrip("/") not in known)
    if foreign:  # the unfinished push is not all that is there: nothing is removed
        name = foreign[0][len(root):].lstrip("/")
        raise UsageError(f"--to {shown}: already holds files besides an unfinished push's ({name}"
                         f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}); nothing removed: push to "
                         "a new or empty path")
    removed = []
    for name in [*files, "README.md"]:
        path = f"{root}/{name}"
        if fs.exists(path) and not fs.isdir(path):
            fs.rm_file(path)
            removed.append(name)
    fs.rm_file(f"{root}/{PARTIAL}")
    folders = {str(PurePosixPath(name).parent) for name in files} - {"."}
    for folder in sorted(folders, key=lambda f: -len(PurePosixPath(f).parts)):  # deepest first
        try:
            if fs.isdir(f"{root}/{folder}") and not fs.ls(f"{root}/{folder}", detail=False):
                fs.rmdir(f"{root}/{folder}")
        except OSError:
            pass  # object stores have no empty folders to remove
    if say is not None:
        say(f"push: {shown} held an unfinished push ({len(removed)} of its files there): replaced")
    return removed


def begin(fs: Any, root: str, source: str, files: list[str]) -> None:
    """Write the marker before the first file: this push is unfinished until :func:`finish`."""
    content = {"host": socket.gethostname(), "pid": os.getpid(), "source": source, "started": time.time(),
               "files": [*files, "README.md"]}
    fs.makedirs(root, exist_ok=True)
    fs.pipe_file(f"{root}/{PARTIAL}", json.dumps(content).encode())


def finish(fs: Any, root: str) -> None:
    """Remove the marker after the card: the push is whole."""
    fs.rm_file(f"{root}/{PARTIAL}")
