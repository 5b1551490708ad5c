"""Split a global batch honestly into per-device batch x gradient accumulation x world size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thub.errors import UsageError


def world_size(params: Mapping[str, Any]) -> int:
    """Processes across all nodes asked for by the torchrun parameters (1 when unset)."""
    per_node = params.get("nproc_per_node")
    per_node = per_node if isinstance(per_node, int) else 1
    return per_node * int(params.get("nnodes") or 1)


def split_batch(effective_batch_size: int, world_size: int, max_micro_batch: int) -> tuple[int, int]:
    """(per-device batch, gradient accumulation) with product x world_size == effective_batch_size.

    Picks the largest per-device batch not above ``max_micro_batch``. If the global batch is not a
    multiple of the world size it cannot be met exactly: the error names the nearest valid values.
    """
    if effective_batch_size % world_size:
        lower = (effective_batch_size // world_size) * world_size
        upper = lower + world_size
        nearest = ", ".join(str(v) for v in (lower, upper) if v > 0)
        raise UsageError(
            f"effective_batch_size {effective_batch_size} is not a multiple of the world size "
            f"{world_size} (processes across all nodes); nearest valid values: {nearest}"
        )
    per_rank = effective_batch_size // world_size
    micro = max(d for d in range(1, min(per_rank, max_micro_batch) + 1) if per_rank % d == 0)
    return micro, per_rank // micro
