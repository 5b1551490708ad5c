"""``thub checkpoint push ... --launcher slurm``: the push as a SLURM job where the network is.

Compute nodes of many clusters have no internet; a login or transfer partition has. This renders
one CPU job on the cluster profile's ``push_partition`` (else ``export_partition``, else the
training partition: :func:`thub.launch.slurm.step_directives` of ``push``), running the same
``thub checkpoint push`` on the cluster, and submits it, chained ``afterok`` after a job id given
with ``--after`` (a training job, a ``thub checkpoint consolidate`` job). ``thub train --push``
chains the same step after training itself (:mod:`thub.runner.poststeps`); this is the push of a
folder that is already there, or that an earlier job will write.

The job's script and log live in ``JOB_DIR/slurm/`` and ``JOB_DIR/logs/``: the run directory
(``--run``) unless ``--job-dir`` names another folder; the pushed folder itself is never written into.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from thub.errors import UsageError

SCRIPT_NAME = "checkpoint-push.sbatch"


def _command(directory: Path, to: str, *, public: bool, force: bool, run: Path | None) -> list[str]:
    """The ``thub checkpoint push`` the job runs (absolute paths: the job's working directory differs)."""
    argv = ["checkpoint", "push", str(directory), "--to", to]
    if public:
        argv.append("--public")
    if force:
        argv.append("--force")
    if run is not None:
        argv += ["--run", str(run)]
    return argv


def plan_job(directory: str, to: str, *, public: bool = False, force: bool = False, run: str | None = None,
             cluster: str | None = None, cluster_file: str | None = None, after: str | None = None,
             time: str | None = None, job_dir: str | None = None) -> dict[str, Any]:
    """The push job: its script, where it is written and the sbatch command; nothing is written.

    Refuses (UsageError, exit 2) what would fail on the cluster anyway: a target of no known shape,
    ``--public`` for a target without visibility, a job id that is not one, no folder for the job's
    files. ``DIR`` must exist unless ``--after`` names the job that writes it.
    """
    from thub import __version__
    from thub.checkpoint.push import parse_target
    from thub.launch.profiles import get_profile
    from thub.launch.slurm import SlurmRequest, render_cpu_job, step_directives

    target = parse_target(to)
    if public and not (target.spec and target.spec.visibility):
        from thub.checkpoint.storage import visible_schemes

        raise UsageError(f"--public: only an {visible_schemes()} target has a visibility "
                         f"({target.scheme}:// has none)")
    if after is not None and not re.fullmatch(r"\d+(_\d+)?", after):
        raise UsageError(f"--after: expected a SLURM job id (digits), found {after!r}")
    folder = Path(directory).expanduser().resolve()
    if after is None and not folder.is_dir():
        raise UsageError(f"{directory}: not a folder (give --after JOB_ID when an earlier job writes it)")
    run_dir = Path(run).expanduser().resolve() if run else None
    where = Path(job_dir).expanduser().resolve() if job_dir else run_dir
    if where is None:
        raise UsageError("--launcher slurm: the job's script and log need a folder: give --run RUN_DIR "
                         "(they go into its slurm/ and logs/) or --job-dir DIR")
    profile = get_profile(cluster or "local", cluster_file)
    req = SlurmRequest(profile, run_dir=where, algorithm="checkpoint", time=time, thub_version=__version__,
                       python=sys.executable, workdir=Path.cwd())
    argv = _command(folder, to, public=public, force=force, run=run_dir)
    note = f"thub checkpoint push, chained afterok after job {after}" if after else "thub checkpoint push"
    text = render_cpu_job(req, "push", note, "publish the folder with its model card (thub checkpoint push)",
                          ["thub", *argv])
    script = where / "slurm" / SCRIPT_NAME
    sbatch = ["sbatch", "--parsable"]
    if after:
        sbatch += [f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes"]
    return {"cluster": profile.name, "partition": next((d.split("=", 1)[1] for d in step_directives(req, "push")
                                                        if d.startswith("--partition=")), None),
            "after": after, "job_dir": str(where), "script_path": str(script), "script": text,
            "sbatch": [*sbatch, str(script)], "command": ["thub", *argv], "retries": profile.submit_retries}


def submit_job(plan: dict[str, Any]) -> str:
    """Write the job's script (and its log folder) and submit it; returns the job id."""
    from thub.launch.slurm import submit_one

    script = Path(plan["script_path"])
    script.parent.mkdir(parents=True, exist_ok=True)
    (Path(plan["job_dir"]) / "logs").mkdir(parents=True, exist_ok=True)  # sbatch does not create --output's folder
    script.write_text(plan["script"])
    script.chmod(0o755)
    return submit_one(plan["sbatch"], Path(plan["job_dir"]), plan["retries"])
