"""Split a global batch honestly into per-device batch x gradient accumulation x world size."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from thub.errors import UsageError


def visible_gpus(environ: Mapping[str, str] | None = None) -> int:
    """NVIDIA GPUs this process may use, without importing torch: ``CUDA_VISIBLE_DEVICES`` when
    set, else the GPUs ``nvidia-smi -L`` lists (0 without a driver)."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        devices = [d for d in listed.split(",") if d.strip()]
        return 0 if devices[:1] == ["-1"] else len(devices)
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def processes_per_node(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> int:
    """``nproc_per_node`` as torchrun resolves it (``torch.distributed.run.determine_local_world_size``):
    ``gpu`` = the visible GPUs (an error without one), ``auto`` = the GPUs, else the CPUs this
    process may run on; unset = 1."""
    value = params.get("nproc_per_node")
    if value is None:
        return 1
    if isinstance(value, int):
        return value
    gpus = visible_gpus(environ)
    if gpus:
        return gpus
    if value == "gpu":
        raise UsageError("nproc_per_node gpu starts one process per GPU, but no NVIDIA GPU is visible; "
                         "set nproc_per_node to a number of processes")
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def world_size(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> int:
    """Processes across all nodes: in a torchrun child, torchrun's ``WORLD_SIZE``; otherwise
    :func:`processes_per_node` × ``nnodes`` (1 when unset)."""
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" in environ and "LOCAL_WORLD_SIZE" in environ:  # set by torchrun for its workers
        return int(environ["WORLD_SIZE"])
    return processes_per_node(params, environ) * int(params.get("nnodes") or 1)


def split_batch(effective_batch_size: int, world_size: int, max_micro_batch: int) -> tuple[int, int]:
    """(per-device batch, gradient accumulation) with product x world_size == effective_batch_size.

    Picks the largest per-device batch not above ``max_micro_batch``. If the global batch is not a
    multiple of the world size it cannot be met exactly: the error names the nearest valid values.
    """
    if effective_batch_size % world_size:
        lower = (effective_batch_size // world_size) * world_size
        upper = lower + world_size
        nearest = ", ".join(str(v) for v in (lower, upper) if v > 0)
        raise UsageError(
            f"effective_batch_size {effective_batch_size} is not a multiple of the world size "
            f"{world_size} (processes across all nodes); nearest valid values: {nearest}"
        )
    per_rank = effective_batch_size // world_size
    micro = max(d for d in range(1, min(per_rank, max_micro_batch) + 1) if per_rank % d == 0)
    return micro, per_rank // micro
