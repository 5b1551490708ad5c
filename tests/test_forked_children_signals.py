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


AT_ONCE = textwrap.dedent("""
    import multiprocessing, os, signal, sys
    from thub.cli.main import _interrupt, install_signal_handlers

    install_signal_handlers()
    assert signal.getsignal(signal.SIGTERM) is _interrupt
    pid = os.fork()
    if pid == 0:
        ok = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGINT) is signal.SIG_DFL
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        os._exit(0 if ok and signal.SIGTERM not in blocked else 3)
    assert os.waitpid(pid, 0)[1] == 0, "the forked child kept thub's handler or a blocked SIGTERM"
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, []), "the parent's mask not restored"
    assert signal.getsignal(signal.SIGTERM) is _interrupt
    # what lm-eval's bootstrap does: a pool stopped (SIGTERM to its workers) as soon as its work is done
    context = multiprocessing.get_context("fork")
    for _ in range(int(sys.argv[1])):
        with context.Pool(2) as pool:
            assert pool.map(abs, [-1, -2]) == [1, 2]
    print("ok")
""")


def test_a_pool_stopped_as_soon_as_it_started_never_hangs() -> None:
    """Found as a hang of ``thub eval`` in CI: lm-eval's bootstrap pool was terminated right after it
    started; a worker whose SIGTERM arrived before the interpreter's after-fork reset lost it (thub's
    Python handler was inherited), and ``Pool.terminate`` waited for it forever. Now the signals are
    blocked across the fork and a forked child gets the default action back."""
    done = subprocess.run([sys.executable, "-c", AT_ONCE, "40"], capture_output=True, text=True,
                          timeout=600)  # a hang guard only
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
