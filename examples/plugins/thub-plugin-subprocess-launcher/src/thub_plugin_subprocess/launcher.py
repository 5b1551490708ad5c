"""The subprocess launcher's plan, submit, status and cancel (``LauncherSpec`` import strings).

Submitting is what ``--launcher slurm`` does without a scheduler: build the plan, prepare the
run directory under its lock (``thub_run.json`` with this launcher's ``launch`` section), start
the node worker detached (its own session, so it outlives ``thub train``), and record its pid in
``launch.job_ids``. The worker waits for the lock ``thub train`` releases, then supervises the
training child exactly as a SLURM job does.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LOG = "subprocess.out"


def _argv(run_dir: str) -> list[str]:
    return [sys.executable, "-m", "thub.launch.worker", "node", run_dir]


def plan(resolved: Any, options: Any) -> tuple[list[str], dict[str, Any], str]:
    """The command it would start, as the dry run shows it (``launch`` section and script)."""
    run_dir = os.path.abspath(resolved.values()["ckpt_output_dir"])
    argv = _argv(run_dir)
    section = {"launcher": "subprocess", "command": argv, "log": str(Path(run_dir) / "logs" / LOG)}
    return argv, section, shlex.join(argv)


def submit(resolved: Any, options: Any, *, dry_run: bool, as_json: bool, overwrite: bool, resume: bool,
           command_line: list[str], force_launch: bool = False) -> int:
    """Show the plan (``dry_run``) or start the run detached; returns the exit code."""
    from thub.launch.plan import plan_for
    from thub.runner.prepare import prepared_run
    from thub.runner.rundir import RunDirectory, write_json_atomic
    from thub.ui.output import emit_json
    from thub.ui.plan import show_plan

    the_plan = plan_for(resolved, options)
    if dry_run:
        show_plan(the_plan.as_dict(), as_json)
        return 0
    argv = the_plan.request
    run_dir = RunDirectory(Path(resolved.values()["ckpt_output_dir"]))
    with prepared_run(resolved, run_dir, the_plan.data, overwrite=overwrite, resume=resume,
                      command_line=command_line,
                      launch={**the_plan.launch_section, "job_ids": [], "submitted": None}) as prepared:
        run_dir.logs.mkdir(parents=True, exist_ok=True)
        with open(run_dir.logs / LOG, "ab") as log:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=os.getcwd())
        record = prepared.record
        record["launch"].update(job_ids=[str(child.pid)], submitted=time.time())
        write_json_atomic(run_dir.record, record)
    result = {"status": "submitted", "run_dir": str(run_dir.path), "job_ids": [str(child.pid)]}
    if as_json:
        emit_json(result)
    else:
        print(f"started pid {child.pid}: {run_dir.path}\nfollow it with: thub runs status {run_dir.path}")
    return 0


def _ours(pid: int, run_dir: Path) -> bool:
    """The pid is alive and still our worker for this run (a reused pid is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
        return False  # a zombie has ended
    here = os.path.realpath(run_dir)
    return b"thub.launch.worker" in cmdline and any(os.path.realpath(os.fsdecode(arg)) == here
                                                    for arg in cmdline if arg.startswith(b"/"))


def status(run_dir: Path, job_ids: list[str]) -> dict[str, dict[str, str]]:
    """RUNNING while the worker lives; then COMPLETED or FAILED from ``result.json``."""
    from thub.runner.rundir import RunDirectory, read_json

    result = read_json(RunDirectory(Path(run_dir)).result) or {}
    states = {}
    for job in job_ids:
        if job.isdigit() and _ours(int(job), Path(run_dir)):
            states[job] = {"state": "RUNNING"}
        else:
            states[job] = {"state": "COMPLETED" if result.get("status") == "succeeded" else "FAILED"}
    return states


def cancel(run_dir: Path, job_ids: list[str], dry_run: bool) -> str:
    """SIGTERM to each live worker's process group (the supervisor records the run interrupted)."""
    from thub.errors import UsageError

    live = [job for job in job_ids if job.isdigit() and _ours(int(job), Path(run_dir))]
    command = "kill -TERM " + " ".join(f"-{job}" for job in live)
    if not live:
        raise UsageError(f"{run_dir}: no live process of the run (ids {', '.join(job_ids)})")
    if not dry_run:
        for job in live:
            os.killpg(int(job), signal.SIGTERM)
    return command
