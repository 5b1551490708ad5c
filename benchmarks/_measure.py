"""Shared measurement helpers for the benchmarks: wall time and peak RSS of a command."""

from __future__ import annotations

import os
import statistics
import subprocess
import time


def run_once(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB over the process and the descendants it waited for)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{command} exited with {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_maxrss / 1024


def median_of(command: list[str], repeats: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Median wall time and median peak RSS of ``repeats`` runs (after one warm-up)."""
    run_once(command, env)
    samples = [run_once(command, env) for _ in range(repeats)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
