"""A process forked from ``thub`` (a library's ``multiprocessing.Pool`` with the fork start method, as
lm-evaluation-harness uses for its bootstrap, stopped with ``terminate()``) inherits thub's SIGTERM
handler; there the signal must end the process as it would without thub: no ``Interrupted``
traceback per worker. (In thub's own process SIGTERM still stops the command with exit 130: the
run-safety tests.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import multiprocessing, os, sys, tempfile, time
    from pathlib import Path
    import click
    import thub.cli.main
    entry = sys.modules["thub.cli.main"]  # the module (thub.cli's `main` is the function)
    marks = Path(tempfile.mkdtemp())

    def busy(_):
        (marks / str(os.getpid())).touch()  # this worker is running Python code now
        time.sleep(120)

    @click.command()
    def pool():
        workers = multiprocessing.get_context("fork").Pool(2)
        workers.map_async(busy, range(2))
        deadline = time.monotonic() + 120  # a hang guard only
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers.terminate()  # SIGTERM to each worker, each inside busy()
        workers.join()
        print("pool terminated")

    entry.cli = pool
    entry.main([])
""")


def test_forked_pool_workers_end_quietly_on_sigterm() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pool terminated" in done.stdout
    assert "Traceback" not in done.stderr and "Interrupted" not in done.stderr, done.stderr
