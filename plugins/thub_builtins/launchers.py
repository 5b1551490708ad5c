"""Built-in launchers, registered through ``thub_register_launchers`` like a plugin's.

* ``local``: this machine (``PET_*`` make it one node's worker of a multi-node run): the run
  starts now, in this process's child (:func:`thub.runner.run_training`);
* ``slurm``: one batch script per run, chained restarts and post-run CPU jobs, submitted with
  ``sbatch`` (:mod:`thub.launch.submit`, :mod:`thub.launch.slurm`, :mod:`thub.launch.push_job`),
  followed with ``squeue``/``scontrol``/``sacct`` and cancelled with ``scancel``.

Registering imports nothing: every callable is an import string, loaded when its launcher is used.
The functions below are the SLURM launcher's glue, moved here from the branches the core had
(``launch/options.py``, ``cli/runs.py``, ``cli/checkpoint/push.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from thub import hookimpl
from thub.specs import LauncherSpec

LAUNCHERS: tuple[LauncherSpec, ...] = (
    LauncherSpec(
        "local", "this machine (PET_* makes it one node's worker)",
        submit="thub_builtins.launchers_local:submit",
    ),
    LauncherSpec(
        "slurm", "a SLURM batch job (sbatch) per run, with chained restarts and post-run CPU jobs",
        submit="thub.launch.submit:launch_slurm",
        plan="thub.launch.submit:slurm_plan",
        status="thub_builtins.launchers:slurm_status",
        cancel="thub_builtins.launchers:slurm_cancel",
        logs=("slurm-*.out",),
        options=("cluster", "cluster_file", "time", "max_restarts"),
        distributed="thub_builtins.launchers:slurm_distributed",
        runs_elsewhere=True,
        chained_steps=True,
        push_job="thub_builtins.launchers:slurm_push_job",
    ),
)


@hookimpl
def thub_register_launchers(register: Callable[[LauncherSpec], None]) -> None:
    for spec in LAUNCHERS:
        register(spec)


def slurm_distributed(options: Any, flags: Mapping[str, Any], sources: dict[str, str]) -> tuple[int, int]:
    """Under SLURM ``nnodes`` counts torchrun agents (nodes x the profile's tasks_per_node) and the
    profile gives the processes per node when no flag does (``LauncherSpec.distributed``)."""
    from thub.errors import UsageError

    nodes, procs = options.nodes, options.gpus_per_node
    profile = options.profile()
    cluster = f"cluster {profile.name}"
    if procs is None:
        procs = flags.get("nproc_per_node") or profile.gpus_per_node or 1
        sources["nproc_per_node"] = "flag --nproc-per-node" if flags.get("nproc_per_node") else cluster
    if not isinstance(procs, int):
        raise UsageError("--launcher slurm needs a number of processes per node (--gpus-per-node N)")
    if nodes is None:
        sources["nnodes"] = "flag --nnodes" if flags.get("nnodes") else cluster
    nodes = (nodes or flags.get("nnodes") or 1) * profile.tasks_per_node
    if profile.tasks_per_node > 1:
        sources["nnodes"] += f" x {profile.tasks_per_node} tasks per node ({cluster})"
    return nodes, procs


def slurm_status(run_dir: Path, job_ids: list[str]) -> dict[str, dict[str, str]]:
    """The scheduler's view of the run's jobs (``squeue``, ``scontrol``, ``sacct``)."""
    from thub.launch import slurm

    return slurm.job_states(job_ids)


def slurm_cancel(run_dir: Path, job_ids: list[str], dry_run: bool) -> str:
    """``scancel`` every job of the chain; returns the command (``dry_run``: cancels nothing)."""
    from thub.errors import UsageError
    from thub.launch import slurm

    command = "scancel " + " ".join(job_ids)
    if dry_run:
        return command
    done = slurm.cancel(job_ids)
    if done.returncode != 0:
        raise UsageError(f"scancel failed: {done.stderr.strip()}")
    return command


def slurm_push_job(directory: str, to: str, *, as_json: bool, dry_run: bool, **options: Any) -> None:
    """The push as a SLURM job (:mod:`thub.launch.push_job`): shown with --dry-run, else submitted."""
    import click

    from thub.launch import push_job
    from thub.ui.output import emit_json

    plan = push_job.plan_job(directory, to, **options)
    job_id = None if dry_run else push_job.submit_job(plan)
    if as_json:
        emit_json({"schema_version": 1, "dry_run": dry_run, "job_id": job_id, **plan})
        return
    if dry_run:
        click.echo(f"would write {plan['script_path']} and run: {' '.join(plan['sbatch'])}\n\n{plan['script']}")
        click.echo("nothing submitted (--dry-run)")
        return
    after = f", after job {plan['after']} succeeds" if plan["after"] else ""
    click.echo(f"submitted push job {job_id} on cluster {plan['cluster']}"
               + (f" (partition {plan['partition']})" if plan["partition"] else "") + after
               + f": {plan['script_path']}; its log: {plan['job_dir']}/logs/slurm-push-{job_id}.out")
