"""The training child's output on its way into ``logs/train.log``, redacted as it is written.

``python -m thub.runner.logsink LOG`` reads its stdin (the child's stdout and stderr, and those of
everything the child starts) until end of file and appends it to ``LOG`` (created owner-only)
through :func:`thub.redact.redact_output`: a library's ``View run at: ...?token=...`` or a URI's
password never reaches the file. Output is cut only after a newline or carriage return, so a
secret is never split between two redactions; a line longer than :data:`MAX_PENDING` is written
as it stands.

It runs in its own session and ignores SIGINT, SIGTERM and SIGHUP: stopping the child's process
group, a Ctrl-C or the death of thub does not lose the child's last lines; it ends when the last
writer closes the pipe. Only the standard library and :mod:`thub.redact` are imported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from thub.redact import output_secrets, redact_output

MAX_PENDING = 1 << 20  # bytes held back waiting for a line end
READ_SIZE = 1 << 16
DRAIN_SECONDS = 10.0  # after the child exits: what a grandchild still holding the pipe gets


def _write(fd: int, data: bytes, literals: list[str]) -> None:
    text = redact_output(data.decode("utf-8", "surrogateescape"), literals)
    try:
        os.write(fd, text.encode("utf-8", "surrogateescape"))
    except OSError:
        pass  # a full disk: keep draining so the child never blocks; the failure is the filesystem's to report


def pump(source: int, log: str, environ: dict[str, str] | None = None) -> None:
    """Copy ``source`` (a file descriptor) to the end of ``log``, redacted, until end of file."""
    literals = output_secrets(os.environ if environ is None else environ)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # a log an older thub created 0644
    pending = b""
    try:
        while chunk := os.read(source, READ_SIZE):
            pending += chunk
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
            if cut >= 0:
                _write(fd, pending[:cut + 1], literals)
                pending = pending[cut + 1:]
            elif len(pending) > MAX_PENDING:
                _write(fd, pending, literals)
                pending = b""
        if pending:
            _write(fd, pending, literals)
    finally:
        os.close(fd)


def start(log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """The sink process for ``log``: hand its ``stdin`` to the child as stdout and stderr, close
    this process's copy, and :func:`finish` it after the child exits."""
    # The sink writes only to the log: it holds none of thub's stdout/stderr (a caller reading them,
    # a terminal or a test's pipe, sees end of file when thub exits), and it is no training process
    # (no THUB_RUN_DIR: what the run's child and the libraries' hooks key on).
    sink_env = {k: v for k, v in env.items() if k != "THUB_RUN_DIR"}
    return subprocess.Popen([sys.executable, "-m", "thub.runner.logsink", str(log)], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=sink_env,
                            start_new_session=True)


def finish(sink: subprocess.Popen[bytes]) -> None:
    """Wait until the sink has written everything (the last writer closed the pipe); a process the
    child left behind that still holds the pipe is not waited for beyond :data:`DRAIN_SECONDS`."""
    if sink.stdin is not None and not sink.stdin.closed:
        sink.stdin.close()
    try:
        sink.wait(DRAIN_SECONDS)
    except subprocess.TimeoutExpired:
        pass  # it ends by itself when that process does


def main(argv: list[str]) -> int:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    pump(0, argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
