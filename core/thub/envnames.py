"""Which ``THUB_*`` environment variables thub reads, and which set ones it does not know.

A mistyped ``THUB_LEARNNG_RATE`` would otherwise be silently ignored. ``thub train`` warns
about unknown names (with the nearest known one) and ``thub doctor`` (``core.env-vars``)
lists them. Known are thub's own settings below, ``THUB_<PARAMETER>`` of every registered
algorithm's parameters, and ``THUB_<BACKEND>_*`` settings of a backend plugin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from thub.errors import closest

#: thub's own settings (the parameters' ``THUB_<NAME>`` come from their models).
SETTINGS: dict[str, str] = {
    "THUB_PLUGINS": "allow-list of external plugins",
    "THUB_DISABLE_PLUGINS": "plugins never to load",
    "THUB_ENVS": "managed environments to read",
    "THUB_DATA_DIR": "thub's data directory (managed environments)",
    "THUB_PLUGIN_SOURCES": "folders holding plugin sources for `thub install`",
    "THUB_TORCH": "torch for managed environments",
    "THUB_EXIT_GRACE": "seconds a training child may linger after its result",
    "THUB_MIRROR_WAIT": "seconds a run waits at its end for checkpoint_storage uploads still under way",
    "THUB_PREFLIGHT_TIMEOUT": "seconds each preflight check may take before a run (default: its own, scaled by load)",
    "THUB_ORPHAN_GRACE": "seconds an orphaned training child may take to checkpoint and stop",
    "THUB_RUN_SECRETS": "secrets for the run, through the environment",
    "THUB_RUN_DIR": "set by thub for the training child",
    "THUB_PARENT_PID": "set by thub for the training child",
    "THUB_PARENT_PIPE": "set by thub for the training child",
    "THUB_CLUSTER_FILE": "extra cluster profiles",
    "THUB_KUBEFLOW_INTERVAL": "seconds between Kubeflow status updates",
    "THUB_KUBEFLOW_TIMEOUT": "seconds a Kubeflow status update may take",
    "THUB_KUBEFLOW_ALLOW_HTTP": "allow a plain-http Kubeflow status endpoint",
    "THUB_RDZV_ENDPOINT": "set by thub's SLURM script",
    "THUB_RDZV_JOIN_TIMEOUT": "set by thub's SLURM script",
    "THUB_NPROC_PER_NODE": "set by thub's SLURM script",
    # test-suite switches
    "THUB_TEST_STEP_SLEEP": "tests: slow a training step down",
    "THUB_UPDATE_GOLDEN": "tests: rewrite golden files",
    "THUB_VERL_CONFIG_DIR": "tests: verl's config folder",
}


def parameter_variables() -> set[str]:
    """``THUB_<NAME>`` of every parameter of every registered algorithm."""
    from thub.config.fields import param_infos
    from thub.manager import get_registry

    names: set[str] = set()
    for spec in get_registry().algorithms.values():
        names.update(info.env_var for info in param_infos(spec.load_parameters()).values())
    return names


def unknown_variables(environ: Mapping[str, str], known: Iterable[str] | None = None,
                      backends: Iterable[str] | None = None) -> list[tuple[str, str | None]]:
    """``(name, nearest known name or None)`` for every set ``THUB_*`` variable thub does not read.

    ``known`` defaults to :data:`SETTINGS` plus :func:`parameter_variables`; ``backends``
    (default: the installed ones and those thub can install) make ``THUB_<BACKEND>_*`` a
    plugin's own setting.
    """
    set_names = sorted(name for name in environ if name.startswith("THUB_"))
    if not set_names:
        return []  # the common case costs no registry
    if known is None:
        known = set(SETTINGS) | parameter_variables()
    known = set(known)
    if backends is None:
        from thub.envs.catalog import CATALOG
        from thub.manager import get_registry

        backends = {*get_registry().backends, *CATALOG}
    prefixes = tuple(f"THUB_{b.upper().replace('-', '_')}_" for b in backends)
    found = []
    for name in set_names:
        if name in known or (prefixes and name.startswith(prefixes)):
            continue
        found.append((name, closest(name, sorted(known), cutoff=0.75)))
    return found


def describe(unknown: list[tuple[str, str | None]]) -> list[str]:
    """One line per unknown variable: ``THUB_X is not a thub setting (did you mean THUB_Y?)``."""
    return [f"{name} is not a thub setting or parameter and is ignored"
            + (f" (did you mean {near}?)" if near else "") for name, near in unknown]
