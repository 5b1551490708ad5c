"""The run lifecycle shared by every backend: run directory, supervised child, metrics, result.

Submodules are imported on use so that cheap helpers (``thub.runner.batching``) stay cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thub.runner.context import RunContext
    from thub.runner.supervisor import run_training

__all__ = ["RunContext", "run_training"]


def __getattr__(name: str) -> Any:
    if name == "run_training":
        from thub.runner.supervisor import run_training

        return run_training
    if name == "RunContext":
        from thub.runner.context import RunContext

        return RunContext
    raise AttributeError(name)
