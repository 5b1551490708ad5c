"""One atomic file write for all of thub and its plugins (``thub.backend.write_text_atomic``).

Kept apart from the run directory code so that cheap callers (the start-up caches of
:mod:`thub.discovery`, the environment manifests) import nothing else of thub.
"""

from __future__ import annotations

import os
from pathlib import Path


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
