"""torchrun arguments from thub's distributed parameters.

Precedence: explicit parameters > ``PET_*`` environment (Kubeflow Trainer sets these) >
defaults. ``nproc_per_node`` may be ``auto``/``gpu`` (torchrun resolves them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# thub parameter -> (torchrun flag, PET_* variable)
_FLAGS = {
    "nproc_per_node": ("--nproc-per-node", "PET_NPROC_PER_NODE"),
    "nnodes": ("--nnodes", "PET_NNODES"),
    "node_rank": ("--node-rank", "PET_NODE_RANK"),
    "rdzv_id": ("--rdzv-id", "PET_RDZV_ID"),
    "rdzv_endpoint": ("--rdzv-endpoint", "PET_RDZV_ENDPOINT"),
    "master_addr": ("--master-addr", "PET_MASTER_ADDR"),
    "master_port": ("--master-port", "PET_MASTER_PORT"),
}

#: thub parameter -> the ``PET_*`` variable that sets it: a layer of
#: :func:`thub.config.resolve.resolve` (source ``env PET_NNODES``), below explicit values
PET_VARIABLES = {name: variable for name, (_flag, variable) in _FLAGS.items()}


def torchrun_values(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The effective torchrun settings with the precedence above."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, (_flag, variable) in _FLAGS.items():
        if params.get(name) is not None:
            values[name] = params[name]
        elif variable in environ:
            values[name] = environ[variable]
    values.setdefault("nproc_per_node", 1)
    values.setdefault("nnodes", 1)
    if "rdzv_endpoint" in values:
        values.setdefault("rdzv_backend", "c10d")
    return values


def torchrun_args(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Command-line flags for ``torch.distributed.run``."""
    values = torchrun_values(params, environ)
    args = []
    for name, (flag, _variable) in _FLAGS.items():
        if name in values:
            args += [flag, str(values[name])]
    if "rdzv_backend" in values:
        args += ["--rdzv-backend", values["rdzv_backend"]]
    if int(values["nnodes"]) == 1 and "rdzv_endpoint" not in values and "master_port" not in values:
        args.append("--standalone")  # single node: a free port, no rendezvous server needed
    return args


def torchrun_sources(params: Mapping[str, Any], sources: Mapping[str, str],
                     environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Each effective torchrun setting with where it came from (for ``--dry-run``)."""
    environ = os.environ if environ is None else environ
    shown: dict[str, dict[str, Any]] = {}
    for name, value in torchrun_values(params, environ).items():
        variable = _FLAGS.get(name, ("", ""))[1]
        if params.get(name) is not None:
            source = sources.get(name, "parameter")
        elif variable and variable in environ:
            source = f"env {variable}"
        else:
            source = "default"
        shown[name] = {"value": value, "source": source}
    return shown


def is_head_node(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this node owns the run's result: node rank 0, or not a multi-node launch at all."""
    environ = os.environ if environ is None else environ
    return str(environ.get("PET_NODE_RANK", "0")).strip() in ("", "0")


def is_distributed(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> bool:
    """More than one process, or a ``PET_*`` environment: worth showing torchrun settings."""
    environ = os.environ if environ is None else environ
    procs = params.get("nproc_per_node")
    return (any(name.startswith("PET_") for name in environ) or int(params.get("nnodes") or 1) > 1
            or isinstance(procs, str) or int(procs or 1) > 1)
