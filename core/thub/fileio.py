"""One atomic file write for all of thub and its plugins (``thub.backend.write_text_atomic``), and
one content hash of data files (the keys of kept and prepared data).

Kept apart from the run directory code so that cheap callers (the start-up caches of
:mod:`thub.discovery`, the environment manifests) import nothing else of thub.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str, *, parents: bool = False, mode: int = 0o666) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one.

    The text goes to a uniquely named temporary file in the same directory (so concurrent
    writers, such as every rank writing the same input file, never share one), is flushed to
    disk, then renamed over ``path``; on any error the temporary file is removed and ``path``
    is left as it was. ``parents`` creates the missing parent directories first; ``mode`` is
    the new file's permission bits before the umask (as for ``open``).
    """
    path = Path(path)
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def hash_contents(digest: Any, path: str | Path, *, names: str = "relative", also: Any = None) -> None:
    """Feed the bytes of ``path`` (a file, or every file under a directory, sorted) into ``digest``
    (a :mod:`hashlib` object), each file preceded by its name: relative to ``path`` for a directory,
    the file's own name for a file (``names="relative"``), or the full path (``names="full"``).
    Keys made from it change with any edit, whatever the size or modification time say. ``also``:
    a second digest fed the bytes alone, in the same read (a file's plain sha256)."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    for file in files:
        name = str(file) if names == "full" else str(file.relative_to(root) if root.is_dir() else file.name)
        digest.update(name.encode() + b"\0")
        with file.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
                if also is not None:
                    also.update(block)
