"""The real ``mini_trainer.TorchrunArgs`` / ``TrainingArgs`` from a translation (imports mini_trainer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def build(plan: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(TorchrunArgs, TrainingArgs)`` for ``translate(...)``'s output; raises what mini-trainer raises."""
    from mini_trainer import PretrainingConfig, TorchrunArgs, TrainingArgs, TrainingMode

    train = dict(plan["training_args"])
    train["training_mode"] = TrainingMode(train["training_mode"])
    if train.get("pretraining_config") is not None:
        train["pretraining_config"] = PretrainingConfig(**train["pretraining_config"])
    return TorchrunArgs(**plan["torchrun_args"]), TrainingArgs(**train)
