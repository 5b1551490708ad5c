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

# named on the face for `from thub import *` and type checkers; provided by the built-in dialect plugin
# (DialectSpec.api: its thub.sft(...)-style functions and its callback classes), looked up by name
_DIALECT_API = {"sft", "osft", "lora_sft", "grpo", "lora_grpo", "embedding_sft", "gepa"}
_TRAINING_HUB = {"TrainingHubCallback", "TrainingHubContext", "TrainingHubControl"}
_API = {"train", "dry_run", "evaluate_model", *_DIALECT_API}

if TYPE_CHECKING:
    from collections.abc import Callable

    from thub.api import dry_run, evaluate_model, train
    from thub.hookspecs import hookimpl

    sft: Callable[..., dict[str, Any]]
    osft: Callable[..., dict[str, Any]]
    lora_sft: Callable[..., dict[str, Any]]
    grpo: Callable[..., dict[str, Any]]
    lora_grpo: Callable[..., dict[str, Any]]
    embedding_sft: Callable[..., dict[str, Any]]
    gepa: Callable[..., dict[str, Any]]


def _from_dialects(name: str) -> Any:
    """``name`` as a registered dialect provides it (``DialectSpec.api``); AttributeError if none does."""
    from thub.manager import get_registry
    from thub.specs import load_object

    for dialect in get_registry().dialects.values():
        if name in dialect.api:
            return load_object(dialect.api[name])
    raise AttributeError(f"module 'thub' has no attribute {name!r}: no installed plugin provides it "
                         "(a parameter dialect, `thub plugins` lists them)")


def __getattr__(name: str) -> Any:
    if name == "hookimpl":  # pluggy is imported when a plugin needs it, not by `thub --help`
        from thub.hookspecs import hookimpl

        return hookimpl
    if name in _DIALECT_API or name in _TRAINING_HUB:
        return _from_dialects(name)
    if name in _API:
        from thub import api

        return getattr(api, name)
    raise AttributeError(f"module 'thub' has no attribute {name!r}")
