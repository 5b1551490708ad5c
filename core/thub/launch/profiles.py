"""Cluster profiles: what a scheduler needs to know about one cluster, written once in YAML.

Profiles are read from, later files overriding earlier ones by name:

1. the built-in ``local`` profile (a one-node SLURM on this machine, e.g. ``scripts/slurm-up.sh``);
2. ``$XDG_CONFIG_HOME/thub/clusters.yaml`` (default ``~/.config/thub/clusters.yaml``);
3. ``thub-clusters.yaml`` in the current directory (a project file, committed with the configs);
4. ``$THUB_CLUSTER_FILE`` and then ``--cluster-file PATH``.

A file is a mapping ``clusters: {NAME: {...}}`` (or directly ``{NAME: {...}}``). See docs/slurm.md.

Values that end up in ``#SBATCH`` lines (partition, account, ...) must be plain tokens: a
directive line cannot be quoted safely, so anything with spaces, quotes, ``$`` or newlines is
rejected here, when the profile is loaded, instead of being passed to the scheduler.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from thub.errors import UsageError

# what may appear after "#SBATCH --key=" (slurm node lists, gres specs, qos names, ...)
_DIRECTIVE_TOKEN = re.compile(r"^[A-Za-z0-9_.,:+@%=/\[\]-]+$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")

LOCAL_PROFILE: dict[str, Any] = {
    "description": "one-node SLURM on this machine (scripts/slurm-up.sh); CPU, gloo",
    "scheduler": "slurm",
    "gpus_per_node": 0,
    "default_time": "00:30:00",
}


def parse_time(text: str) -> int:
    """SLURM time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``) in seconds."""
    match = _TIME.match(str(text).strip())
    if not match:
        raise UsageError(f"time {text!r}: expected MM, HH:MM:SS or D-HH:MM:SS")
    days, a, b, c = match.groups()
    parts = [int(p) for p in (a, b, c) if p is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    if len(parts) == 1:  # MM
        return parts[0] * 60
    if len(parts) == 2:  # MM:SS
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def format_time(seconds: int) -> str:
    """Seconds as SLURM's ``D-HH:MM:SS`` (or ``HH:MM:SS`` under a day)."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


class Container(BaseModel):
    """Run each node's worker inside a container image."""

    model_config = ConfigDict(extra="forbid")
    runtime: Literal["apptainer", "singularity", "pyxis"] = Field(
        "apptainer", description="apptainer/singularity exec, or pyxis (srun --container-image).")
    image: str = Field(description="Image path or URI.")
    options: list[str] = Field(default_factory=list, description="Extra runtime arguments (one argv item each).")
    mounts: list[str] = Field(default_factory=list,
                              description="Bind mounts SRC[:DST] (the run directory is always mounted).")


class ClusterProfile(BaseModel):
    """One cluster. Every field is optional except the scheduler, which defaults to slurm."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Profile name (the key in the file).")
    description: str = ""
    scheduler: Literal["slurm"] = "slurm"
    partition: str | None = None
    export_partition: str | None = Field(None, description="CPU partition of the --export and eval jobs chained "
                                                           "after training (unset: the training partition).")
    push_partition: str | None = Field(None, description="Partition with network of the --push job (a login or "
                                                         "transfer partition; unset: export_partition, else the "
                                                         "training partition).")
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    max_time: str | None = Field(None, description="Longest wall time the partition allows.")
    default_time: str = Field("01:00:00", description="Wall time when --time is not given.")
    max_nodes: int | None = Field(None, ge=1)
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node; 0 = CPU nodes (one process per CPU task).")
    gpu_type: str | None = Field(None, description="GRES type, e.g. a100 (gres=gpu:a100:N).")
    gpu_directive: Literal["gres", "gpus-per-node", "none"] = "gres"
    cpus_per_node: int | None = Field(None, ge=1, description="CPUs given to each node's task.")
    mem_per_node: str | None = Field(None, description="SLURM --mem value, e.g. 200G.")
    tasks_per_node: int = Field(1, ge=1, description="torchrun agents per node; >1 only to simulate nodes on one host.")
    sbatch_extra: list[str] = Field(default_factory=list, description="More directives, e.g. --exclusive.")
    preamble: list[str] = Field(default_factory=list,
                                description="Shell lines run first (module load, activation). Trusted: written by the "
                                            "profile's author.")
    env: dict[str, str] = Field(default_factory=dict,
                                description="Exported literally (quoted); use the preamble for $-expansion.")
    python: str | None = Field(None, description="Interpreter on the compute nodes (default: the one running thub).")
    tmpdir: Literal["shorten", "refuse", "keep"] = Field(
        "shorten", description="When TMPDIR would break the 108-byte AF_UNIX socket path limit.")
    tmpdir_base: str = "/tmp"
    offline: bool = Field(False, description="Compute nodes have no internet: hub offline, reporting local only.")
    container: Container | None = None
    rdzv_join_timeout: int = Field(600, ge=1, description="Seconds torchrun waits for every node to join.")
    submit_retries: int = Field(3, ge=0, description="Retries of a failed sbatch (transient controller errors).")

    @field_validator("partition", "export_partition", "push_partition", "account", "qos", "reservation", "constraint",
                     "gpu_type", "mem_per_node")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not _DIRECTIVE_TOKEN.match(value):
            raise ValueError(f"{value!r} is not a plain token (letters, digits, _.,:+@%=/[]-)")
        return value

    @field_validator("sbatch_extra")
    @classmethod
    def _directives(cls, values: list[str]) -> list[str]:
        for value in values:
            key, _, arg = value.partition("=")
            if not re.match(r"^--[a-z][a-z0-9-]*$", key) or (arg and not _DIRECTIVE_TOKEN.match(arg)):
                raise ValueError(f"{value!r}: expected --option or --option=token")
        return values

    @field_validator("env")
    @classmethod
    def _env_names(cls, values: dict[str, str]) -> dict[str, str]:
        for key, value in values.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if "\0" in str(value):
                raise ValueError(f"{key}: NUL byte in value")
        return {k: str(v) for k, v in values.items()}

    @field_validator("max_time", "default_time")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        if value is not None:
            parse_time(value)
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r}: use letters, digits, '_', '.', '-'")
        return value


class LoadedProfiles(BaseModel):
    """Every profile found, where each came from, and the files that failed to load."""

    profiles: dict[str, ClusterProfile]
    origins: dict[str, str]
    errors: list[str]


def search_paths(cluster_file: str | Path | None = None, cwd: Path | None = None) -> list[Path]:
    """Profile files in the order they are read (later ones win)."""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    paths = [config_home / "thub" / "clusters.yaml", (cwd or Path.cwd()) / "thub-clusters.yaml"]
    if os.environ.get("THUB_CLUSTER_FILE"):
        paths.append(Path(os.environ["THUB_CLUSTER_FILE"]))
    if cluster_file:
        paths.append(Path(cluster_file))
    return paths


def _read_file(path: Path) -> dict[str, dict[str, Any]]:
    from thub.config.yamlfile import load_yaml  # size limit, repeated keys, file:line errors

    data = load_yaml(path, "cluster file")[0] or {}
    if isinstance(data, dict) and "clusters" in data:
        data = data["clusters"]
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UsageError(f"{path}: expected `clusters: {{NAME: {{...}}}}`")
    return data


def _build(name: str, raw: dict[str, Any], where: str) -> ClusterProfile:
    try:
        return ClusterProfile(name=name, **raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                             for e in exc.errors())
        raise UsageError(f"{where}: cluster {name!r}: {problems}") from None


def load_profiles(cluster_file: str | Path | None = None, *, strict: bool = True) -> LoadedProfiles:
    """Read every profile file. ``strict``: a bad file is an error (else it is listed in ``errors``)."""
    profiles = {"local": ClusterProfile(name="local", **LOCAL_PROFILE)}
    origins = {"local": "built-in"}
    errors: list[str] = []
    for path in search_paths(cluster_file):
        if not path.exists():
            if cluster_file and path == Path(cluster_file):
                raise UsageError(f"--cluster-file {path}: no such file")
            continue
        try:
            for name, raw in _read_file(path).items():
                profiles[str(name)] = _build(str(name), raw, str(path))
                origins[str(name)] = str(path)
        except UsageError as exc:
            if strict:
                raise
            errors.append(str(exc))
    return LoadedProfiles(profiles=profiles, origins=origins, errors=errors)


def get_profile(name: str, cluster_file: str | Path | None = None) -> ClusterProfile:
    """The profile called ``name`` (an error lists the known names)."""
    from thub.errors import did_you_mean

    loaded = load_profiles(cluster_file)
    if name not in loaded.profiles:
        known = ", ".join(sorted(loaded.profiles))
        raise UsageError(f"unknown cluster {name!r}{did_you_mean(name, loaded.profiles)}; known: {known} "
                         "(see `thub clusters`)")
    return loaded.profiles[name]
