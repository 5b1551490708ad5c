"""Training Hub's Python API on thub: ``thub.sft(...)``, ``thub.osft(...)``, ... (its positional
order, its default backends, its signature defaults), registered on the ``thub`` package face by
the dialect (``DialectSpec.api``) and run through :func:`thub.api.train_call`, the call
``thub.train`` makes. Training Hub's ``thub sft ...`` command line (:mod:`.command`) makes the same
call (:func:`_training_hub_run`: one mapping for the Python API and the command line).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from thub.api import Caller as _Caller
from thub.api import train, train_call
from thub.manager import get_registry
from thub.surface import python_api

__all__ = ["GEPA_POSITIONAL", "embedding_sft", "gepa", "grpo", "lora_grpo", "lora_sft", "osft", "sft"]


def _training_hub_call(algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Training Hub's calling convention: its positional order, its default backend."""
    with python_api():
        return _training_hub_run(algorithm, args, kwargs)


def _training_hub_run(algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                      caller: _Caller | None = None) -> dict[str, Any]:
    """One Training Hub call (``thub.sft(...)``, or Training Hub's ``thub sft ...`` command line,
    :mod:`thub_builtins.training_hub.command`): the one mapping of its keywords to a thub run."""
    from thub_builtins.training_hub import names as training_hub

    params = training_hub.bind(algorithm, args, kwargs)
    training_hub.check_data_path(algorithm, params.get("data_path"))
    training_hub.check_meanings(algorithm, params)
    backend, config = params.pop("backend", None), params.pop("config", None)
    reason = None
    if backend is None and config is None:
        backend = training_hub.default_backend(get_registry(), algorithm)
        reason = f"Training Hub's default backend for {algorithm}" if backend else None
    relabel = {}
    if config is None:  # Training Hub's signature defaults rank as arguments: never over a config file
        relabel = training_hub.signature_defaults(get_registry(), algorithm, backend, params, os.environ)
    given = "num_iterations" in params and "num_iterations" not in relabel
    for name, label in training_hub.verl_epochs(get_registry(), algorithm, backend, params).items():
        previous = relabel.pop("num_iterations", None)
        relabel[name] = f"api num_iterations, {label}" if given else f"{previous}, {label}"
    defaults = inspect.signature(train).parameters  # train()'s keywords: one definition of the defaults
    control = {key: params.pop(key, defaults[key].default) for key in ("overwrite", "resume", "allow_ignored",
                                                                       "progress")}
    return train_call(algorithm, backend, reason, config, control["overwrite"], control["resume"],
                      control["allow_ignored"], control["progress"], params, relabel, caller or _Caller())


def sft(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("sft", ...)``: full fine-tuning (continued pretraining with is_pretraining).

    Takes Training Hub's ``sft`` arguments, positional or keyword (docs/migrating-from-training-hub.md).
    """
    return _training_hub_call("sft", args, kwargs)


def osft(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("osft", ...)``: orthogonal-subspace fine-tuning (Training Hub's ``osft`` arguments)."""
    return _training_hub_call("osft", args, kwargs)


def lora_sft(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("lora_sft", ...)``: LoRA/QLoRA supervised fine-tuning (Training Hub's ``lora_sft`` arguments)."""
    return _training_hub_call("lora_sft", args, kwargs)


def grpo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("grpo", ...)``: full-parameter GRPO (Training Hub's ``grpo`` arguments)."""
    return _training_hub_call("grpo", args, kwargs)


def lora_grpo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("lora_grpo", ...)``: GRPO on LoRA adapters (Training Hub's ``lora_grpo`` arguments)."""
    return _training_hub_call("lora_grpo", args, kwargs)


def embedding_sft(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("embedding_sft", ...)``: contrastive fine-tuning of a sentence-transformers embedding model
    (Training Hub's ``embedding_sft`` arguments; thub-plugin-sentence-transformers registers it)."""
    return _training_hub_call("embedding_sft", args, kwargs)


#: Training Hub 0.11.2's ``gepa(...)`` positional order (its signature; thub's parameter names are its names)
GEPA_POSITIONAL = ("seed_candidate", "task_lm", "data_path", "trainset", "valset", "output_dir", "backend")


def gepa(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``train("gepa", ...)``: gradient-free prompt optimisation (Training Hub's ``gepa`` arguments, its
    positional order too; thub-plugin-gepa registers it, and its parameter names are Training Hub's)."""
    if len(args) > len(GEPA_POSITIONAL):
        raise TypeError(f"gepa() takes {len(GEPA_POSITIONAL)} positional arguments but {len(args)} were given")
    for name, value in zip(GEPA_POSITIONAL, args):
        if name in kwargs:
            raise TypeError(f"gepa() got multiple values for argument {name!r}")
        kwargs[name] = value
    return train("gepa", **kwargs)
