"""The launcher options of ``thub train`` and the parameters they set.

``--nodes``/``--gpus-per-node`` set ``nnodes``/``nproc_per_node`` as a layer of
:func:`thub.config.resolve.resolve` (source ``flag --nodes``), so ``--dry-run`` shows where each
value came from and the CLI patches nothing after resolving. Imports nothing of ``thub.cli``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thub.errors import UsageError


@dataclass
class LaunchOptions:
    """The launcher flags of ``thub train``."""

    launcher: str = "local"
    cluster: str | None = None
    cluster_file: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    time: str | None = None
    max_restarts: int = 0

    @classmethod
    def pop_from(cls, kwargs: dict[str, Any]) -> LaunchOptions:
        """Take the launcher options out of a click callback's keyword arguments."""
        return cls(launcher=kwargs.pop("launcher") or "local", cluster=kwargs.pop("cluster"),
                   cluster_file=kwargs.pop("cluster_file"), nodes=kwargs.pop("nodes"),
                   gpus_per_node=kwargs.pop("gpus_per_node"), time=kwargs.pop("time_limit"),
                   max_restarts=kwargs.pop("max_restarts") or 0)

    def check(self) -> None:
        if self.launcher == "local":
            used = [flag for flag, value in (("--cluster", self.cluster), ("--cluster-file", self.cluster_file),
                                             ("--time", self.time), ("--max-restarts", self.max_restarts or None))
                    if value is not None]
            if used:
                raise UsageError(f"{', '.join(used)} only apply with --launcher slurm")
        elif not self.cluster:
            self.cluster = "local"

    def profile(self) -> Any:
        from thub.launch.profiles import get_profile

        return get_profile(self.cluster or "local", self.cluster_file)


def distributed_layer(options: LaunchOptions, flags: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """``--nodes`` -> ``nnodes`` and ``--gpus-per-node`` -> ``nproc_per_node``, with their sources.

    Going through the ordinary parameters keeps ``effective_batch_size`` fixed: the backend
    splits it over nnodes x nproc_per_node and an inexact split names the nearest valid values.
    Under SLURM ``nnodes`` counts torchrun agents (nodes x the profile's tasks_per_node) and the
    profile gives the processes per node when no flag does. ``flags``: the parameters given as
    flags (a ``--nnodes`` that disagrees with ``--nodes`` is an error).
    """
    nodes, procs = options.nodes, options.gpus_per_node
    sources = {"nnodes": "flag --nodes", "nproc_per_node": "flag --gpus-per-node"}
    if options.launcher == "slurm":
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
    layer: dict[str, tuple[Any, str]] = {}
    for name, flag, value in (("nnodes", "--nodes", nodes), ("nproc_per_node", "--gpus-per-node", procs)):
        if value is None:
            continue
        if flags.get(name) not in (None, value) and options.launcher != "slurm":
            raise UsageError(f"{flag} {value} disagrees with --{name.replace('_', '-')} {flags[name]}")
        layer[name] = (value, sources[name])
    return layer
