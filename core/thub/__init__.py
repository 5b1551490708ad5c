"""thub: a small, fast, plugin-based CLI and Python API for LLM post-training.

The package import is cheap: the Python API below is loaded on first use.

    import thub
    result = thub.sft(model_path="m", data_path="d.jsonl", ckpt_output_dir="out", backend="trl")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from thub._version import __version__

__all__ = ["__version__", "hookimpl", "train", "dry_run", "sft", "osft", "lora_sft", "grpo", "lora_grpo",
           "embedding_sft", "gepa", "evaluate_model", "TrainingHubCallback", "TrainingHubContext", "TrainingHubControl"]

_API = {"train", "sft", "osft", "lora_sft", "grpo", "lora_grpo", "embedding_sft", "gepa", "dry_run", "evaluate_model"}
# Training Hub's callback classes, so `from training_hub import ...` lines move over as is
_TRAINING_HUB = {"TrainingHubCallback", "TrainingHubContext", "TrainingHubControl"}

if TYPE_CHECKING:
    from thub.api import dry_run, embedding_sft, evaluate_model, gepa, grpo, lora_grpo, lora_sft, osft, sft, train
    from thub.hookspecs import hookimpl


def __getattr__(name: str) -> Any:
    if name == "hookimpl":  # pluggy is imported when a plugin needs it, not by `thub --help`
        from thub.hookspecs import hookimpl

        return hookimpl
    if name in _TRAINING_HUB:
        from thub.compat import training_hub_api

        return getattr(training_hub_api, name)
    if name in _API:
        from thub import api

        return getattr(api, name)
    raise AttributeError(f"module 'thub' has no attribute {name!r}")
