"""The trainer never outlives thub: the child stops when the thub process dies, however it dies.

Two mechanisms, because either alone has a gap:

* Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, set between fork and exec of the child (also
  torchrun's agent, which runs no thub code): the kernel signals the child when its parent dies.
* A parent-liveness pipe (portable): the child inherits the read end; when thub dies, the
  kernel closes the write end and the child's watcher thread reads EOF.

Either way the child gets SIGTERM, its usual stop request: the backend checkpoints at the next
step boundary and the child writes an ``interrupted`` result itself (the supervisor that would
have written it is gone). A child deaf to SIGTERM exits after ``THUB_ORPHAN_GRACE`` seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable

from thub.runner.lock import pid_alive

PR_SET_PDEATHSIG = 1
PIPE_ENV = "THUB_PARENT_PIPE"
PARENT_ENV = "THUB_PARENT_PID"


def death_signal_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux only).

    libc is loaded here, in the parent: the function that runs between fork and exec only
    calls ``prctl`` and ``getppid`` (nothing that could need a lock another thread holds).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody would signal us
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def parent_alive() -> bool:
    """False once the thub process that started this run is gone (in the child)."""
    pid = os.environ.get(PARENT_ENV)
    if not pid:
        return True
    try:
        return pid_alive(int(pid))
    except ValueError:
        return True


def watch_parent(grace: float | None = None) -> None:
    """In the child: stop (SIGTERM to ourselves) when the parent's pipe reaches EOF."""
    fd_text = os.environ.pop(PIPE_ENV, None)  # not for our own children: they do not inherit the fd
    if not fd_text:
        return
    try:
        fd = int(fd_text)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except (ValueError, OSError):
        return  # not inherited: PR_SET_PDEATHSIG covers it
    limit = float(os.environ.get("THUB_ORPHAN_GRACE", "300")) if grace is None else grace

    def wait() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(limit)
        print(f"thub child: the thub process died and this child did not stop within {limit:g} s; exiting",
              file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=wait, name="thub-parent-watch", daemon=True).start()
