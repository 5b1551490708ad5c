"""SIGINT/SIGTERM in the thub process of a run, from its first line to its result.

Until the run's first training step there is nothing to checkpoint, so a signal stops the run at
once: while thub validates and prepares the directory it raises :class:`~thub.errors.Interrupted`
(the directory is left as it was, or with an ``interrupted`` result.json when it holds the run's
record); once the supervisor follows the child, the child is stopped at once (SIGKILL to its
process group) until its first step is logged, after which the first signal asks for
checkpoint-and-stop (:mod:`thub.runner.supervisor`).

The child runs in its own session (a terminal's Ctrl-C reaches only thub, which forwards it once),
so job control is forwarded too (:func:`forward_job_control`): Ctrl-Z stops the training with
thub, ``fg``/``bg`` continue both.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.errors import Interrupted

if TYPE_CHECKING:
    from thub.config.resolve import ResolvedConfig
    from thub.runner.rundir import RunDirectory


class RunSignals:
    """The one handler of SIGINT/SIGTERM for a run, installed for its whole length.

    While the run starts (validation, preflight, preparing the directory) a signal raises
    :class:`~thub.errors.Interrupted` at once; from :meth:`follow` on (the supervisor runs the
    child) it is only recorded in :attr:`received`, and the supervisor acts on it between polls.
    One handler object for the whole run: there is no moment at which neither behaviour holds.
    Outside the main thread (where Python cannot set handlers) nothing is installed.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self.raising = True
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)
        if self.raising:
            raise Interrupted(signum)

    def follow(self) -> None:
        """From now on the supervisor handles the signals (recorded, never raised)."""
        self.raising = False

    def __enter__(self) -> RunSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def early_reason(signum: int, resume_from: str | None) -> str:
    """``stopped by SIGINT before the first training step ...`` and where ``--resume`` goes on."""
    from thub.surface import again, option

    where = f"continues from {Path(resume_from).name}" if resume_from else "starts from step 1"
    return (f"stopped by {signal.Signals(signum).name} before the first training step (nothing to checkpoint); "
            f"{again()} with {option('resume')} {where}")


def stopped_while_preparing(resolved: ResolvedConfig, run_dir: RunDirectory, created: bool, signum: int,
                            resume_from: str | None) -> dict[str, Any] | None:
    """After a signal while the run directory was being prepared (its lock held): the directory
    holding the run's record gets an ``interrupted`` result.json (returned); one made for this
    run and holding no record yet is removed (None)."""
    if run_dir.record.exists():
        from thub.runner.result import write_result

        result = {"status": "interrupted", "algorithm": resolved.algorithm.name, "backend": resolved.backend.name,
                  "exit_code": None, "reason": early_reason(signum, resume_from), "final_checkpoint": None}
        return write_result(run_dir, result, started=time.time(), model_path=resolved.values()["model_path"])
    if created:
        import shutil

        shutil.rmtree(run_dir.path, ignore_errors=True)
    return None


def nothing_written(resolved: ResolvedConfig, run_dir: RunDirectory, signum: int, started: float) -> dict[str, Any]:
    """The outcome of a run stopped before it wrote anything (not a result.json: there is none)."""
    return {"status": "interrupted", "algorithm": resolved.algorithm.name, "backend": resolved.backend.name,
            "run_dir": str(run_dir.path), "final_checkpoint": None, "wall_seconds": round(time.time() - started, 3),
            "reason": f"stopped by {signal.Signals(signum).name} before the run started: nothing was written "
                      f"to {run_dir.path}"}


def forward_job_control(pid: int) -> Callable[[], None]:
    """Until the returned function is called: SIGTSTP (Ctrl-Z) stops the child's process group
    (SIGSTOP: it cannot be ignored) and then this process; SIGCONT (``fg``, ``bg``, ``kill -CONT``)
    continues the group. Without this a stopped thub left the training running in the background.
    Outside the main thread nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def group(sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(_signum: int, _frame: Any) -> None:
        group(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)  # (SIGTSTP would be discarded in an orphaned process group)
        group(signal.SIGCONT)  # continued: the training continues with us

    def cont(_signum: int, _frame: Any) -> None:
        group(signal.SIGCONT)

    previous = {signal.SIGTSTP: signal.signal(signal.SIGTSTP, stop),
                signal.SIGCONT: signal.signal(signal.SIGCONT, cont)}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore
