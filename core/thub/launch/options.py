"""The launcher options of ``thub train`` and the parameters they set.

``--nodes``/``--gpus-per-node`` set ``nnodes``/``nproc_per_node`` as a layer of
:func:`thub.config.resolve.resolve` (source ``flag --nodes``), so ``--dry-run`` shows where each
value came from and the CLI patches nothing after resolving. Imports nothing of ``thub.cli``.

``--launcher`` names a registered launcher (``thub_register_launchers``); what it accepts and how
it sets the distributed values come from its :class:`~thub.specs.LauncherSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from thub.errors import UsageError

if TYPE_CHECKING:
    from thub.specs import LauncherSpec

#: the launcher a run gets when none is named (``thub train`` without ``--launcher``, the Python API)
DEFAULT_LAUNCHER = "local"
#: the flag of each launcher option a launcher may take (``LauncherSpec.options``)
OPTION_FLAGS = {"cluster": "--cluster", "cluster_file": "--cluster-file", "time": "--time",
                "max_restarts": "--max-restarts"}


@dataclass
class LaunchOptions:
    """The launcher flags of ``thub train``."""

    launcher: str = DEFAULT_LAUNCHER
    cluster: str | None = None
    cluster_file: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    time: str | None = None
    max_restarts: int = 0

    @classmethod
    def pop_from(cls, kwargs: dict[str, Any]) -> LaunchOptions:
        """Take the launcher options out of a click callback's keyword arguments."""
        return cls(launcher=kwargs.pop("launcher") or DEFAULT_LAUNCHER, cluster=kwargs.pop("cluster"),
                   cluster_file=kwargs.pop("cluster_file"), nodes=kwargs.pop("nodes"),
                   gpus_per_node=kwargs.pop("gpus_per_node"), time=kwargs.pop("time_limit"),
                   max_restarts=kwargs.pop("max_restarts") or 0)

    def spec(self) -> LauncherSpec:
        """The registered launcher ``--launcher`` names; else a UsageError naming the registered ones."""
        from thub.manager import get_registry

        return get_registry().launcher(self.launcher)

    def check(self) -> None:
        """Refuse a launcher option the launcher does not take (naming the launchers that do)."""
        from thub.manager import get_registry

        spec = self.spec()
        values = {"cluster": self.cluster, "cluster_file": self.cluster_file, "time": self.time,
                  "max_restarts": self.max_restarts or None}
        used = [name for name, value in values.items() if value is not None and name not in spec.options]
        if used:
            takers = [other.name for other in get_registry().launchers.values() if set(used) <= set(other.options)]
            where = " or ".join(f"--launcher {name}" for name in takers) or "another launcher"
            raise UsageError(f"{', '.join(OPTION_FLAGS[name] for name in used)} only apply with {where}")
        if "cluster" in spec.options and not self.cluster:
            self.cluster = "local"  # the built-in cluster profile (thub.launch.profiles)

    def profile(self) -> Any:
        from thub.launch.profiles import get_profile

        return get_profile(self.cluster or "local", self.cluster_file)


def distributed_layer(options: LaunchOptions, flags: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """``--nodes`` -> ``nnodes`` and ``--gpus-per-node`` -> ``nproc_per_node``, with their sources.

    Going through the ordinary parameters keeps ``effective_batch_size`` fixed: the backend
    splits it over nnodes x nproc_per_node and an inexact split names the nearest valid values.
    A launcher that derives them (``LauncherSpec.distributed``: SLURM's cluster profile) gives
    them with their sources. ``flags``: the parameters given as flags (a ``--nnodes`` that
    disagrees with ``--nodes`` is an error).
    """
    nodes, procs = options.nodes, options.gpus_per_node
    sources = {"nnodes": "flag --nodes", "nproc_per_node": "flag --gpus-per-node"}
    derive = options.spec().distributed
    if derive is not None:
        from thub.specs import load_object

        nodes, procs = load_object(derive)(options, flags, sources)
    layer: dict[str, tuple[Any, str]] = {}
    for name, flag, value in (("nnodes", "--nodes", nodes), ("nproc_per_node", "--gpus-per-node", procs)):
        if value is None:
            continue
        if flags.get(name) not in (None, value) and derive is None:
            raise UsageError(f"{flag} {value} disagrees with --{name.replace('_', '-')} {flags[name]}")
        layer[name] = (value, sources[name])
    return layer
