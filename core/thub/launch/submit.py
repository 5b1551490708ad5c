"""``thub train ... --launcher slurm``: from a resolved run to a submitted (or dry-run) job.

The SLURM launcher's ``plan`` and ``submit`` (``LauncherSpec``, registered by
``thub_builtins.launchers``); ``thub.cli.train`` calls them through the spec. The flow
mirrors a local run: build the plan (:mod:`thub.launch.plan`: the data gate, the translation, the
script), prepare the run directory (refuse a finished run unless ``--overwrite``), write
``thub_run.json`` (with a ``launch`` section: cluster, nodes, script, job ids), write the script
into ``RUN_DIR/slurm/job.sbatch`` and submit it with its chain.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from thub.launch.options import LaunchOptions


def slurm_request(resolved: Any, options: LaunchOptions) -> Any:
    """The :class:`~thub.launch.slurm.SlurmRequest` for a resolved run."""
    from thub import __version__
    from thub.launch.slurm import SlurmRequest
    from thub.runner.poststeps import enabled

    profile = options.profile()
    values = resolved.values()
    return SlurmRequest(
        profile=profile, run_dir=Path(values["ckpt_output_dir"]), algorithm=resolved.algorithm.name,
        nodes=int(values.get("nnodes") or 1) // profile.tasks_per_node or 1,
        procs_per_node=int(values.get("nproc_per_node") or 1), time=options.time,
        max_restarts=options.max_restarts, python=profile.python or sys.executable,
        launcher=resolved.backend.launcher, thub_version=__version__, workdir=Path.cwd(),
        export=values.get("export"), post_steps=tuple(step.name for step in enabled(values)),
    )


def _local_target(uri: str) -> bool:
    """Whether a push to ``uri`` stays on this machine (its storage scheme is ``local``: needs no network)."""
    from thub.manager import get_registry

    spec = get_registry().storage.get(uri.partition("://")[0])
    return bool(spec and spec.local)


def _warnings(resolved: Any, profile: Any) -> list[str]:
    values = resolved.values()
    notes = []
    if profile.offline and values.get("wandb_project"):
        notes.append(f"cluster {profile.name!r} is offline: wandb logs locally (WANDB_MODE=offline); "
                     "sync it later with `wandb sync`")
    uri = str(values.get("mlflow_tracking_uri") or "")
    if profile.offline and uri.startswith(("http://", "https://")):
        notes.append(f"cluster {profile.name!r} is offline: mlflow_tracking_uri {uri} will not be reachable")
    push = str(values.get("push") or "")
    if profile.offline and push and not _local_target(push) and not profile.push_partition:
        notes.append(f"cluster {profile.name!r} is offline and names no push_partition: the push job runs on "
                     f"{profile.export_partition or profile.partition or 'the default partition'} without network "
                     f"(HF_HUB_OFFLINE=1); add a login/transfer partition as push_partition")
    return notes


def slurm_plan(resolved: Any, options: LaunchOptions) -> tuple[Any, dict[str, Any], str]:
    """The SLURM launcher's ``plan`` (``LauncherSpec.plan``): the request, the ``launch`` section
    and the batch script (:func:`thub.launch.plan.plan_for` stores them in the plan)."""
    from thub.launch.slurm import render_script

    request, section = slurm_launch(resolved, options)
    return request, section, render_script(request)


def slurm_launch(resolved: Any, options: LaunchOptions) -> tuple[Any, dict[str, Any]]:
    """The :class:`~thub.launch.slurm.SlurmRequest` of a resolved run and the ``launch`` section
    of its plan and ``thub_run.json`` (:mod:`thub.launch.plan` builds both)."""
    from thub.launch import slurm

    request = slurm_request(resolved, options)
    section = {"launcher": "slurm", "cluster": request.profile.name, "nodes": request.nodes,
               "procs_per_node": request.procs_per_node, "agents": request.agents, "time": request.wall_time,
               "max_restarts": request.max_restarts, "script_path": str(request.script_path),
               "sbatch": slurm.sbatch_commands(request), "warnings": _warnings(resolved, request.profile),
               # the post-run steps' jobs (thub.runner.poststeps), the last of launch.job_ids, in this order
               "post_steps": [{"name": name, "script_path": str(request.step_script_path(name)), "script": text}
                              for name, text in slurm.step_scripts(request).items()]}
    return request, section


def launch_slurm(resolved: Any, options: LaunchOptions, *, dry_run: bool, as_json: bool, overwrite: bool,
                 resume: bool, command_line: list[str], force_launch: bool = False) -> int:
    """Dry-run (render, write and show the script) or submit; returns the exit code (the SLURM
    launcher's ``LauncherSpec.submit``). ``force_launch`` concerns the preflight, which the job runs.

    Both build the run's plan (:func:`thub.launch.plan.plan_for`: the data gate, the translation,
    the script) before anything is written, as a local run does."""
    from thub.launch import slurm
    from thub.launch.plan import plan_for
    from thub.ui.output import console, emit_json

    plan = plan_for(resolved, options)
    request, launch, notes = plan.request, plan.launch_section, plan.launch_section["warnings"]
    if dry_run:
        from thub.ui.plan import show_plan

        slurm.write_script(request)
        if as_json:
            emit_json(plan.as_dict())
            return 0
        show_plan(plan.as_dict(), False, footer=None)
        out = console()
        out.print(f"\n[bold]SLURM batch script[/bold] (written to {request.script_path}):\n", highlight=False)
        import shlex

        import click

        click.echo(plan.script)  # verbatim: no wrapping or markup, so it can be copied as is
        for name, text in slurm.step_scripts(request).items():  # export -> eval -> push, each chained afterok
            out.print(f"\n[bold]SLURM {name} script[/bold] (written to {request.step_script_path(name)}):\n",
                      highlight=False)
            click.echo(text)
        for argv in launch["sbatch"]:
            click.echo("$ " + shlex.join(argv))
        for note in notes:
            out.print(f"[yellow]warning:[/yellow] {note}", highlight=False)
        out.print("\n[dim]Dry run: only the script was written; nothing was submitted.[/dim]")
        return 0

    from thub.runner.prepare import prepared_run
    from thub.runner.rundir import RunDirectory, write_json_atomic

    run_dir = RunDirectory(request.run_dir)
    # the same lock, preparation and record as a local run; the lock is released once submitted:
    # the job takes it (thub.launch.worker waits for it). The plan validated the data here, in
    # seconds, rather than after the queue wait.
    with prepared_run(resolved, run_dir, plan.data, overwrite=overwrite, resume=resume, command_line=command_line,
                      launch={**launch, "job_ids": [], "submitted": None,
                              "environment": slurm.environment_summary()}) as prepared:
        record = prepared.record
        slurm.write_script(request)
        job_ids = slurm.submit(request)
        record["launch"].update(job_ids=job_ids, submitted=time.time())
        write_json_atomic(run_dir.record, record)
    result = {"status": "submitted", "run_dir": str(run_dir.path), "job_ids": job_ids,
              "script": str(request.script_path), "warnings": notes}
    if as_json:
        emit_json(result)
    else:
        out = console()
        for note in notes:
            out.print(f"[yellow]warning:[/yellow] {note}", highlight=False)
        chain = f" (+{len(job_ids) - 1} chained restarts)" if len(job_ids) > 1 else ""
        out.print(f"submitted job {job_ids[0]}{chain} to cluster {request.profile.name!r}: {run_dir.path}\n"
                  f"follow it with: thub runs status {run_dir.path}", markup=False, highlight=False)
    return 0
