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
