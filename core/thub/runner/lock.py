"""One live run per directory: an OS lock (``flock``) on ``RUN_DIR/.thub.lock``.

The thub process takes the lock before it touches the directory and hands the descriptor to
the training child (``pass_fds``), so the lock lives as long as either of them: the kernel
drops it when the last holder exits, however it exits (``kill -9`` included), and a stale lock
file left behind is no lock at all. The file says who holds it, so a refused second process can
name the live PID.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from thub.errors import UsageError

LOCK_NAME = ".thub.lock"

try:
    import fcntl
except ImportError:  # Windows: no flock; runs there are not guarded
    fcntl = None  # type: ignore[assignment]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """The exclusive lock of one run directory; ``fd`` is what the child inherits."""

    def __init__(self, run_path: Path) -> None:
        self.path = Path(run_path) / LOCK_NAME
        self.fd: int | None = None
        self.holder: dict[str, Any] = {}

    def acquire(self, wait: float = 0) -> RunLock:
        """Take the lock or raise UsageError (exit 2) naming the live run's process.

        ``wait``: seconds to keep trying first (a SLURM job whose submitting ``thub`` has not
        quite let go yet); 0 refuses at once.
        """
        if fcntl is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
            os.close(fd)
            raise UsageError(f"{self.path.parent} is in use by a live thub run ({self.describe_holder()}); "
                             "wait for it to end or stop it first (one live run per ckpt_output_dir)")
        self.fd = fd
        self._write({"pid": os.getpid(), "started": time.time()})
        return self

    def describe_holder(self) -> str:
        """``pid 123, training child pid 456``, from the lock file (only the live ones)."""
        for _ in range(20):  # the holder may be rewriting it this instant
            try:
                holder = json.loads(self.path.read_text())
                break
            except (OSError, ValueError):
                time.sleep(0.05)
        else:
            return "pid unknown"
        parts = []
        if isinstance(holder.get("pid"), int) and pid_alive(holder["pid"]):
            parts.append(f"pid {holder['pid']}")
        if isinstance(holder.get("child"), int) and pid_alive(holder["child"]):
            parts.append(f"training child pid {holder['child']}")
        return ", ".join(parts) or f"pid {holder.get('pid')}, exiting"

    def set_child(self, pid: int) -> None:
        """Record the training child that now holds the lock with us."""
        self._write({**self.holder, "child": pid})

    def _write(self, holder: dict[str, Any]) -> None:
        self.holder = holder
        if self.fd is None:
            return
        data = json.dumps(holder).encode()
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        except OSError:
            pass  # a full disk: the lock itself still holds; only the PID in the message is lost

    def release(self) -> None:
        """Drop our hold (the child may still hold its inherited copy until it exits)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunLock:
        return self.acquire() if self.fd is None else self

    def __exit__(self, *exc: Any) -> None:
        self.release()
