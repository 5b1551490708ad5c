"""The job side of a scheduler launch: ``python -m thub.launch.worker prepare|node RUN_DIR``.

``prepare`` runs once per job on the batch host, before ``srun``: it makes the job continue
from the latest checkpoint (restart chains, a job that hit its time limit), or exits 3 when the
run already finished so that later jobs of a chain end at once.

``node`` runs once per SLURM task (one per node): it starts torchrun with a c10d rendezvous on
the first node (``THUB_RDZV_ENDPOINT`` from the script) and supervises it like a local run
(signals forwarded, metrics followed, events fired, root cause on failure). Only task 0 writes
``result.json``; the others log to ``logs/train-node<R>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thub.runner.metrics import truncate_after
from thub.runner.rundir import FINISHED, RunDirectory, read_json, write_json_atomic

ALREADY_FINISHED = 3


@dataclass(frozen=True)
class _NodeRunDirectory(RunDirectory):
    """A run directory whose log file is per node (nodes share the directory on a shared FS)."""

    node_rank: int = 0

    @property
    def log_file(self) -> Path:
        return self.logs / ("train.log" if self.node_rank == 0 else f"train-node{self.node_rank}.log")


# how long a job waits for the run directory's lock (the submitting thub may still hold it)
LOCK_WAIT_SECONDS = 120


def prepare(run_path: str, environ: dict[str, str] | None = None) -> int:
    """Set ``resume_from`` to the latest checkpoint and drop the work lost since it."""
    from thub.runner.lock import RunLock

    with RunLock(Path(run_path)).acquire(wait=LOCK_WAIT_SECONDS):  # one live run per directory
        return _prepare(run_path, environ)


def _prepare(run_path: str, environ: dict[str, str] | None = None) -> int:
    environ = dict(os.environ) if environ is None else environ
    run_dir = RunDirectory(Path(run_path))
    record = read_json(run_dir.record)
    if record is None:
        print(f"thub worker: no thub_run.json in {run_dir.path}", file=sys.stderr)
        return 2
    previous = read_json(run_dir.result)
    if previous and previous.get("status") in FINISHED:
        print(f"thub worker: the run already finished ({previous['status']}); nothing to do")
        return ALREADY_FINISHED
    latest = run_dir.latest_checkpoint()
    resume_from = str(latest[0]) if latest else record.get("resume_from")
    if resume_from and not Path(resume_from).exists():
        resume_from = None
    # lines logged after the checkpoint we continue from would repeat steps
    truncate_after(run_dir.metrics, latest[1] if latest else 0)
    run_dir.result.unlink(missing_ok=True)
    if record.get("resume_from") != resume_from:
        record["resume_from"] = resume_from
        write_json_atomic(run_dir.record, record)
    attempt = {"job_id": environ.get("SLURM_JOB_ID"), "resume_from": resume_from, "started": time.time(),
               "previous_status": previous.get("status") if previous else None}
    (run_dir.path / "slurm").mkdir(exist_ok=True)
    with open(run_dir.path / "slurm" / "attempts.jsonl", "a") as handle:
        handle.write(json.dumps(attempt) + "\n")
    print(f"thub worker: job {attempt['job_id']} " + (f"resumes from {resume_from}" if resume_from else "starts"))
    return 0


def node_layout(environ: dict[str, str]) -> dict[str, Any]:
    """This task's place in the job, from SLURM's variables and the script's THUB_* ones."""
    return {
        "nnodes": int(environ.get("SLURM_NTASKS", "1")),
        "node_rank": int(environ.get("SLURM_PROCID", "0")),
        "nproc_per_node": int(environ.get("THUB_NPROC_PER_NODE", "1")),
        "rdzv_endpoint": environ.get("THUB_RDZV_ENDPOINT", "127.0.0.1:29500"),
        "rdzv_id": environ.get("SLURM_JOB_ID", "thub"),
        "join_timeout": int(environ.get("THUB_RDZV_JOIN_TIMEOUT", "600")),
    }


def node_command(python: str, launcher: str, layout: dict[str, Any], run_path: str) -> list[str]:
    """torchrun (c10d, one agent per task) around the child, or the child alone."""
    child = ["-m", "thub.runner.child", run_path]
    if launcher != "torchrun" or layout["nnodes"] * layout["nproc_per_node"] == 1:
        return [python, *child]  # the backend's own launcher reads PET_* (set by node())
    return [python, "-m", "torch.distributed.run",
            "--nnodes", str(layout["nnodes"]), "--nproc-per-node", str(layout["nproc_per_node"]),
            "--node-rank", str(layout["node_rank"]), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", layout["rdzv_endpoint"], "--rdzv-id", str(layout["rdzv_id"]),
            "--rdzv-conf", f"join_timeout={layout['join_timeout']}", *child]


def node(run_path: str) -> int:
    """Run this node's share of the job under the run supervisor."""
    from thub.config.resolve import ResolvedConfig
    from thub.manager import get_registry
    from thub.runner.supervisor import supervise

    layout = node_layout(dict(os.environ))
    run_dir = _NodeRunDirectory(Path(run_path), node_rank=layout["node_rank"])
    record = read_json(run_dir.record)
    if record is None:
        print(f"thub worker: no thub_run.json in {run_path}", file=sys.stderr)
        return 2
    registry = get_registry()
    algorithm = registry.algorithm(record["algorithm"])
    backend = registry.backend(record["backend"])
    values = {k: v["value"] for k, v in record["parameters"].items()}
    # validated at submit time; a re-validation of dumped values could trip cross-field checks
    params = algorithm.load_parameters().model_construct(**values)
    resolved = ResolvedConfig(algorithm, backend, params, {k: v["source"] for k, v in record["parameters"].items()})
    # the same variables Kubeflow Trainer sets: backends with their own launcher read them
    os.environ.update({"PET_NNODES": str(layout["nnodes"]), "PET_NODE_RANK": str(layout["node_rank"]),
                       "PET_NPROC_PER_NODE": str(layout["nproc_per_node"]),
                       "PET_RDZV_ENDPOINT": layout["rdzv_endpoint"], "PET_RDZV_ID": str(layout["rdzv_id"])})
    command = node_command(backend.python or sys.executable, backend.launcher, layout, run_path)
    from thub.runner.lock import RunLock

    head = layout["node_rank"] == 0
    # the head node holds the run directory's lock for the job's life (with its training child)
    with RunLock(Path(run_path)).acquire(wait=LOCK_WAIT_SECONDS) if head else contextlib.nullcontext() as lock:
        result = supervise(resolved, run_dir, command, command_line=record.get("command_line"),
                           resume_from=record.get("resume_from"), quiet_json=True, head=head, lock=lock)
    print(f"thub worker {layout['node_rank']}: {result['status']}"
          + (f" ({result.get('error')})" if result.get("error") else ""), flush=True)
    return 0 if result["status"] == "succeeded" else 1


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("prepare", "node"):
        print("usage: python -m thub.launch.worker prepare|node RUN_DIR", file=sys.stderr)
        return 2
    from thub.errors import UsageError

    try:
        return prepare(argv[1]) if argv[0] == "prepare" else node(argv[1])
    except UsageError as exc:  # e.g. another live run holds the directory
        print(f"thub worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
