"""SLURM: render one batch script from a cluster profile, submit it (with a restart chain), and
ask the scheduler about it (status, cancel).

The script starts one task per node with ``srun``; each task is a thub node worker
(``python -m thub.launch.worker node RUN_DIR``) that starts torchrun with a c10d rendezvous on
the first node (or the backend's own launcher) and supervises it. Before ``srun`` the batch
host runs ``worker prepare``, which makes a chained job resume from the latest checkpoint.

No injection: user values reach the script only through :func:`shlex.quote`, reach ``sbatch``
and friends only as argv items, and ``#SBATCH`` lines carry only validated tokens (profile
fields are checked on load; the job name is sanitised; paths are never put in directives: the
output file is relative to the run directory, which is sbatch's working directory).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thub.errors import ThubError, UsageError
from thub.launch.profiles import ClusterProfile, format_time, parse_time
from thub.redact import child_environment

# AF_UNIX socket paths are limited to 108 bytes (sun_path); libraries put sockets under
# $TMPDIR with ~40 bytes of their own (datasets' SyncManager: pymp-XXXX/listener-XXXX).
SUN_PATH_MAX = 108
SOCKET_SUFFIX = 40
SCRIPT_NAME = "job.sbatch"
EXPORT_SCRIPT_NAME = "export.sbatch"
# sbatch errors worth retrying: the controller is busy or restarting
_TRANSIENT = re.compile(r"temporarily unavailable|timed out|Socket timed out|try again|Unable to contact", re.I)


@dataclass
class SlurmRequest:
    """Everything the batch script depends on (so a golden test can render it offline)."""

    profile: ClusterProfile
    run_dir: Path
    algorithm: str
    nodes: int = 1
    procs_per_node: int = 1
    time: str | None = None
    max_restarts: int = 0
    python: str = field(default_factory=lambda: sys.executable)
    launcher: str = "torchrun"
    thub_version: str = ""
    workdir: Path | None = None  # where relative data/model paths resolve (the submit directory)
    export: str | None = None  # the export folder: a CPU job chained afterok after training (--export)
    #: the post-run steps (thub.runner.poststeps.STEPS names, in order), each a CPU job chained afterok;
    #: empty: export alone where ``export`` is set
    post_steps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.export and "export" not in self.post_steps:
            self.post_steps = ("export", *self.post_steps)
        self.run_dir = Path(self.run_dir)
        self.workdir = Path(self.workdir or self.run_dir)
        if self.nodes < 1 or self.procs_per_node < 1:
            raise UsageError("--nodes and --gpus-per-node must be at least 1")
        if self.max_restarts < 0:
            raise UsageError("--max-restarts must be 0 or more")
        if self.profile.max_nodes and self.nodes > self.profile.max_nodes:
            raise UsageError(f"--nodes {self.nodes}: cluster {self.profile.name!r} allows at most "
                             f"{self.profile.max_nodes}")
        if self.profile.gpus_per_node and self.procs_per_node > self.profile.gpus_per_node:
            raise UsageError(f"--gpus-per-node {self.procs_per_node}: nodes of cluster {self.profile.name!r} "
                             f"have {self.profile.gpus_per_node} GPUs")
        if self.profile.tmpdir == "refuse" and len(self.profile.tmpdir_base) + SOCKET_SUFFIX > SUN_PATH_MAX:
            raise UsageError(f"cluster {self.profile.name!r}: tmpdir_base is too long for AF_UNIX sockets")
        seconds = parse_time(self.time or self.profile.default_time)
        if seconds <= 0:
            raise UsageError("--time must be positive")
        if self.profile.max_time and seconds > parse_time(self.profile.max_time):
            raise UsageError(f"--time {self.time}: cluster {self.profile.name!r} allows at most "
                             f"{self.profile.max_time}")
        self.time = format_time(seconds)

    @property
    def wall_time(self) -> str:
        """The normalised time limit (validated in ``__post_init__``)."""
        return self.time or ""

    @property
    def agents(self) -> int:
        """torchrun agents (SLURM tasks) across the job: ``nodes x tasks_per_node``."""
        return self.nodes * self.profile.tasks_per_node

    @property
    def cpus_per_task(self) -> int:
        if self.profile.cpus_per_node:
            return max(1, self.profile.cpus_per_node // self.profile.tasks_per_node)
        # CPU nodes without a stated size: one CPU per training process
        return self.procs_per_node

    @property
    def job_name(self) -> str:
        # a directive token: anything unusual in the run directory's name becomes "_"
        raw = f"thub-{self.algorithm}-{self.run_dir.name}"
        return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:64]

    @property
    def script_path(self) -> Path:
        return self.run_dir / "slurm" / SCRIPT_NAME

    @property
    def export_script_path(self) -> Path:
        return self.run_dir / "slurm" / EXPORT_SCRIPT_NAME

    def step_script_path(self, name: str) -> Path:
        """Where the post-run step ``name``'s script is written (``slurm/<name>.sbatch``)."""
        return self.run_dir / "slurm" / f"{name}.sbatch"


def directives(req: SlurmRequest) -> list[str]:
    """The ``#SBATCH`` options (validated tokens only)."""
    p = req.profile
    lines = [
        f"--job-name={req.job_name}",
        f"--nodes={req.nodes}",
        f"--ntasks-per-node={p.tasks_per_node}",
        f"--cpus-per-task={req.cpus_per_task}",
        f"--time={req.wall_time}",
        # relative to the working directory, which sbatch sets to the run directory
        "--output=logs/slurm-%j.out",
        "--open-mode=append",
    ]
    for key in ("partition", "account", "qos", "reservation", "constraint"):
        value = getattr(p, key)
        if value:
            lines.append(f"--{key}={value}")
    if p.gpus_per_node and p.gpu_directive == "gres":
        kind = f"{p.gpu_type}:" if p.gpu_type else ""
        lines.append(f"--gres=gpu:{kind}{req.procs_per_node}")
    elif p.gpus_per_node and p.gpu_directive == "gpus-per-node":
        lines.append(f"--gpus-per-node={req.procs_per_node}")
    if p.mem_per_node:
        lines.append(f"--mem={p.mem_per_node}")
    lines += p.sbatch_extra
    return lines


def _environment(req: SlurmRequest, network: bool = False) -> list[str]:
    """The script's exports; ``network``: a job on a partition with network (the push job on
    ``push_partition``), which is not told that the profile's compute nodes are offline."""
    p = req.profile
    q = shlex.quote
    out = [f"export {key}={q(value)}" for key, value in sorted(p.env.items())]
    if p.gpus_per_node:
        out.append('# fewer OOMs from fragmentation; a value set by the preamble or profile wins')
        out.append('export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"')
    if p.offline and not network:
        out.append("# offline compute nodes: never reach for the hub; loggers write locally instead of crashing")
        out += ["export HF_HUB_OFFLINE=1", "export HF_DATASETS_OFFLINE=1", "export TRANSFORMERS_OFFLINE=1",
                "export WANDB_MODE=offline", "export HF_HUB_DISABLE_TELEMETRY=1"]
    return out


def _tmpdir_block(req: SlurmRequest) -> list[str]:
    p = req.profile
    if p.tmpdir == "keep":
        return []
    limit = SUN_PATH_MAX - SOCKET_SUFFIX
    check = f'if [ "${{#TMPDIR}}" -gt {limit} ]; then'
    if p.tmpdir == "refuse":
        return [
            "# TMPDIR longer than the AF_UNIX socket path limit allows: refuse (profile tmpdir: refuse)",
            'TMPDIR="${TMPDIR:-/tmp}"',
            check,
            '  echo "thub: TMPDIR=$TMPDIR is too long for AF_UNIX sockets (108 bytes); set a shorter one" >&2',
            "  exit 2",
            "fi",
        ]
    return [
        "# sockets under a long TMPDIR break (AF_UNIX paths <= 108 bytes): use a short per-job one",
        'TMPDIR="${TMPDIR:-/tmp}"',
        check,
        f'  export TMPDIR={shlex.quote(p.tmpdir_base.rstrip("/") or "/")}/thub_"$SLURM_JOB_ID"',
        '  mkdir -p "$TMPDIR"; export TMP="$TMPDIR" TEMP="$TMPDIR"',
        "fi",
        "export TMPDIR",
    ]


def _worker_command(req: SlurmRequest) -> str:
    """``srun ... worker node RUN_DIR`` (argv items, each quoted)."""
    p = req.profile
    srun = ["srun", "--kill-on-bad-exit=1", f"--nodes={req.nodes}", f"--ntasks-per-node={p.tasks_per_node}",
            f"--cpus-per-task={req.cpus_per_task}"]
    srun_extra, wrapper = _container(req, gpus=bool(p.gpus_per_node))
    quoted = " ".join(shlex.quote(a) for a in [*srun, *srun_extra, *wrapper])
    return f'{quoted} "$PYTHON" -m thub.launch.worker node "$RUN_DIR"'


def _container(req: SlurmRequest, gpus: bool) -> tuple[list[str], list[str]]:
    """The profile's container: (srun options for pyxis, or a runtime ``exec`` wrapper), run dir mounted."""
    p = req.profile
    run_dir = str(req.run_dir)
    if p.container and p.container.runtime == "pyxis":
        mounts = ",".join([f"{run_dir}:{run_dir}", *p.container.mounts])
        return [f"--container-image={p.container.image}", f"--container-mounts={mounts}", *p.container.options], []
    if not p.container:
        return [], []
    wrapper = [p.container.runtime, "exec", *(["--nv"] if gpus else [])]
    for mount in [run_dir, *p.container.mounts]:
        wrapper += ["--bind", mount]
    return [], [*wrapper, *p.container.options, p.container.image]


def render_script(req: SlurmRequest) -> str:
    """The complete batch script (deterministic: golden tests compare it byte for byte)."""
    lines = _head(req, directives(req), "re-render with --dry-run")
    lines += [
        "",
        "# --- c10d rendezvous on the first node; the port derives from the job id so that jobs",
        "# sharing a host do not collide, and NodeAddr avoids depending on DNS",
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "HEAD_ADDR=$(scontrol show node \"$HEAD\" -o 2>/dev/null | grep -oP 'NodeAddr=\\K\\S+' || true)",
        'export THUB_RDZV_ENDPOINT="${HEAD_ADDR:-$HEAD}:$((20000 + SLURM_JOB_ID % 10000))"',
        f"export THUB_NPROC_PER_NODE={req.procs_per_node} THUB_RDZV_JOIN_TIMEOUT={req.profile.rdzv_join_timeout}",
        "",
        "# --- resume from the latest checkpoint (restart chains); 3 = the run already finished",
        "status=0",
        '"$PYTHON" -m thub.launch.worker prepare "$RUN_DIR" || status=$?',
        'if [ "$status" -eq 3 ]; then exit 0; elif [ "$status" -ne 0 ]; then exit "$status"; fi',
        "",
        "# --- one task per node: a thub worker that starts and supervises torchrun",
        _worker_command(req),
        "",
    ]
    return "\n".join(lines)


def _head(req: SlurmRequest, sbatch: list[str], note: str, network: bool = False) -> list[str]:
    """A script's directives, run directory, interpreter, working directory, preamble, environment and TMPDIR."""
    p = req.profile
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Rendered by thub {req.thub_version} (cluster profile {p.name!r}); {note}.",
        *(f"#SBATCH {d}" for d in sbatch),
        "set -euo pipefail",
        "",
        f"RUN_DIR={q(str(req.run_dir))}",
        f"PYTHON={q(req.python)}",
        "# relative paths in the parameters resolve as they did where the job was submitted",
        f"cd {q(str(req.workdir))}",
    ]
    if p.preamble:
        lines += ["", f"# --- cluster preamble (profile {p.name!r})", *p.preamble]
    env = _environment(req, network)
    if env:
        lines += ["", "# --- environment", *env]
    tmp = _tmpdir_block(req)
    if tmp:
        lines += ["", *tmp]
    return lines


def step_directives(req: SlurmRequest, name: str) -> list[str]:
    """A post-run step's ``#SBATCH`` options: one CPU task on one node of the partition its profile
    fields name (:data:`thub.runner.poststeps.STEPS`: ``export_partition``, ``push_partition``; none
    set: the training partition), no GPUs, the training job's time limit."""
    from thub.runner.poststeps import BY_NAME

    p = req.profile
    lines = [f"--job-name={req.job_name.replace('thub-', f'thub-{name}-', 1)[:64]}", "--nodes=1", "--ntasks=1",
             f"--cpus-per-task={req.cpus_per_task}", f"--time={req.wall_time}",
             f"--output=logs/slurm-{name}-%j.out", "--open-mode=append"]
    partition = next((getattr(p, f) for f in BY_NAME[name].partitions if getattr(p, f)), None) or p.partition
    if partition:
        lines.append(f"--partition={partition}")
    for key in ("account", "qos", "reservation"):
        value = getattr(p, key)
        if value:
            lines.append(f"--{key}={value}")
    if p.mem_per_node:
        lines.append(f"--mem={p.mem_per_node}")
    return lines


def export_directives(req: SlurmRequest) -> list[str]:
    """The export job's ``#SBATCH`` options (:func:`step_directives` of ``export``)."""
    return step_directives(req, "export")


def render_step_script(req: SlurmRequest, name: str) -> str:
    """A post-run step's job script: ``python -m ENTRY RUN_DIR [VALUE]`` (the step's entry point,
    :data:`thub.runner.poststeps.STEPS`) on a CPU node after training and the earlier steps succeeded."""
    from thub.runner.poststeps import BY_NAME

    step = BY_NAME[name]
    value = [str(req.export)] if step.takes_value else []
    index = req.post_steps.index(name)
    after = f"the {req.post_steps[index - 1]} job" if index else "training"
    return render_cpu_job(req, name, f"the {name} job, chained afterok after {after}", _STEP_NOTES[name],
                          [*step.entry, "$RUN_DIR", *value])


def render_cpu_job(req: SlurmRequest, step: str, note: str, comment: str, module_argv: list[str]) -> str:
    """A one-task CPU job on ``step``'s partition (:func:`step_directives`) running
    ``python -m MODULE_ARGV`` (``$RUN_DIR`` stays a shell variable; the rest is quoted): a post-run
    step's job, or ``thub checkpoint push --launcher slurm`` (:mod:`thub.launch.push_job`)."""
    srun_extra, wrapper = _container(req, gpus=False)
    launch = " ".join(shlex.quote(a) for a in (["srun", "--ntasks=1", *srun_extra] if srun_extra else wrapper))
    # the push job on push_partition has the network the offline compute nodes lack
    network = step == "push" and bool(req.profile.push_partition)
    lines = _head(req, step_directives(req, step), note, network)
    words = " ".join('"$RUN_DIR"' if a == "$RUN_DIR" else shlex.quote(a) for a in module_argv)
    lines += ["", f"# --- {comment}", f'{launch + " " if launch else ""}"$PYTHON" -m {words}', ""]
    return "\n".join(lines)


_STEP_NOTES = {"export": "the final model as a verified Hugging Face folder (result.json export)",
               "eval": "score the exported (else final) model on the run's eval tasks (RUN_DIR/eval, result.json eval)",
               "push": "publish the exported (else final) model with its card (result.json push)"}


def render_export_script(req: SlurmRequest) -> str:
    """The export job's script (``--export DIR``): ``python -m thub.checkpoint.export RUN_DIR DIR``
    on a CPU node after training succeeded (thub.checkpoint.export)."""
    return render_step_script(req, "export")


def step_scripts(req: SlurmRequest) -> dict[str, str]:
    """Every post-run step's script, by step, in order (what ``--dry-run`` shows and writes)."""
    return {name: render_step_script(req, name) for name in req.post_steps}


def sbatch_commands(req: SlurmRequest) -> list[list[str]]:
    """The sbatch argv for each job of the chain (``{prev}`` stands for the previous job id)."""
    script = str(req.script_path)
    first = ["sbatch", "--parsable", script]
    chained = ["sbatch", "--parsable", "--dependency=afterany:{prev}", "--kill-on-invalid-dep=yes", script]
    commands = [first] + [list(chained) for _ in range(req.max_restarts)]
    # after the last job of the chain (it ends 0 only when the run finished), each step after the one before
    for name in req.post_steps:
        commands.append(["sbatch", "--parsable", "--dependency=afterok:{prev}", "--kill-on-invalid-dep=yes",
                         str(req.step_script_path(name))])
    return commands


def _need(binary: str) -> str:
    found = shutil.which(binary)
    if not found:
        raise ThubError(f"{binary} not found: SLURM client commands are needed on this machine "
                        "(scripts/slurm-up.sh starts a local cluster for testing)")
    return found


def _sbatch(argv: list[str], cwd: Path, retries: int) -> str:
    """Run sbatch; retry transient controller errors with backoff; returns the job id."""
    delay = 1.0
    for attempt in range(retries + 1):
        # the job's environment comes from ours (sbatch --export=ALL): it carries the real
        # values of the parameters thub_run.json shows redacted (thub.redact)
        env = dict(os.environ, **child_environment(cwd))
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
        if done.returncode == 0:
            return done.stdout.strip().split(";")[0]
        message = (done.stderr or done.stdout).strip()
        if attempt == retries or not _TRANSIENT.search(message):
            raise ThubError(f"sbatch failed: {message}")
        time.sleep(delay)
        delay = min(delay * 2, 30)
    raise AssertionError("unreachable")


def submit_one(argv: list[str], cwd: Path, retries: int) -> str:
    """Submit one sbatch command line from ``cwd`` (transient controller errors retried); its job id."""
    _need("sbatch")
    return _sbatch(argv, cwd, retries)


def submit(req: SlurmRequest) -> list[str]:
    """Submit the written script (and its restart chain); returns the job ids in order."""
    _need("sbatch")
    ids: list[str] = []
    for argv in sbatch_commands(req):
        argv = [a.replace("{prev}", ids[-1]) if ids else a for a in argv]
        ids.append(_sbatch(argv, req.run_dir, req.profile.submit_retries))
    return ids


def write_script(req: SlurmRequest) -> Path:
    """Write the script into ``RUN_DIR/slurm/`` (executable, for a manual ``sbatch`` too)."""
    path = req.script_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_script(req))
    path.chmod(0o755)
    for name, text in step_scripts(req).items():
        req.step_script_path(name).write_text(text)
        req.step_script_path(name).chmod(0o755)
    return path


# --------------------------------------------------------------------- status and cancel


def job_states(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """State, elapsed time, time limit, reason/nodes and exit code per job id.

    Pending and running jobs come from ``squeue``; finished ones from ``scontrol show job``
    (kept for ``MinJobAge``) and, where accounting runs, ``sacct``.
    """
    states: dict[str, dict[str, str]] = {}
    if not job_ids:
        return states
    if shutil.which("squeue"):
        done = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%M|%l|%R"],
                              capture_output=True, text=True, timeout=60)
        for line in done.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 5:
                states[parts[0]] = {"state": parts[1], "elapsed": parts[2], "time_limit": parts[3],
                                    "reason": parts[4]}
    for job in job_ids:
        if job in states or not shutil.which("scontrol"):
            continue
        done = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60)
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        if "JobState" in fields:
            states[job] = {"state": fields["JobState"], "elapsed": fields.get("RunTime", ""),
                           "time_limit": fields.get("TimeLimit", ""), "reason": fields.get("Reason", ""),
                           "exit_code": fields.get("ExitCode", "")}
        elif shutil.which("sacct"):
            acct = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,Elapsed,ExitCode"],
                                  capture_output=True, text=True, timeout=60)
            first = acct.stdout.strip().splitlines()[:1]
            if first and first[0].count("|") == 2:
                state, elapsed, code = first[0].split("|")
                states[job] = {"state": state.split()[0], "elapsed": elapsed, "exit_code": code}
    return states


def cancel(job_ids: list[str]) -> subprocess.CompletedProcess[str]:
    """``scancel`` every job of the chain (argv list: the ids are never shell-parsed)."""
    _need("scancel")
    for job in job_ids:
        if not re.fullmatch(r"\d+(_\d+)?", job):
            raise UsageError(f"not a SLURM job id: {job!r}")
    return subprocess.run(["scancel", *job_ids], capture_output=True, text=True, timeout=60)


def environment_summary() -> dict[str, Any]:
    """What sbatch will see: SLURM_CONF matters on clusters without /etc/slurm/slurm.conf."""
    return {"SLURM_CONF": os.environ.get("SLURM_CONF"), "sbatch": shutil.which("sbatch")}
