"""The Python API: the same resolution and validation as the CLI.

    import thub
    plan = thub.dry_run("sft", backend="trl", model_path="m", data_path="d.jsonl", ckpt_output_dir="out")
    result = thub.sft(backend="trl", model_path="m", data_path="d.jsonl", ckpt_output_dir="out")

Keyword arguments rank like CLI flags in the precedence order (they override ``config`` and
``THUB_*``). Errors raise :class:`thub.errors.UsageError` (bad input) or return a result with
``status`` ``failed``; their messages name the keywords (``overwrite=True``), not the CLI's flags
(:mod:`thub.surface`). A run shows its progress on stderr as ``thub train`` does (a bar on a
terminal, a line per step otherwise); ``progress=False`` keeps it quiet.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thub.config.resolve import ResolvedConfig, resolve
from thub.manager import get_registry
from thub.surface import python_api


def _resolve(algorithm: str, backend: str | None, config: str | Path | None, allow_ignored: bool,
             params: dict[str, Any], label: str = "api") -> ResolvedConfig:
    return resolve(get_registry(), algorithm, backend=backend, config_file=config, flags=params,
                   flag_label=label, allow_ignored=allow_ignored)


def dry_run(algorithm: str, *, backend: str | None = None, config: str | Path | None = None,
            allow_ignored: bool = False, **params: Any) -> dict[str, Any]:
    """Resolve, validate the data and translate; return the plan without running anything (what
    ``--dry-run --json`` prints: :mod:`thub.launch.plan`, the plan the real run uses). Bad input
    (a missing or bad data file included) raises :class:`thub.errors.UsageError`."""
    from thub.launch.plan import plan_for

    with python_api():
        return plan_for(_resolve(algorithm, backend, config, allow_ignored, params)).as_dict()


def train(algorithm: str, *, backend: str | None = None, config: str | Path | None = None,
          overwrite: bool = False, resume: bool = False, allow_ignored: bool = False,
          progress: bool = True, **params: Any) -> dict[str, Any]:
    """Run ``algorithm`` to its end in a supervised child process; returns ``result.json``.

    ``progress`` shows the run on stderr (a bar on a terminal, a line per step otherwise, then
    the outcome); ``progress=False`` prints nothing. Training Hub's ``callbacks``
    (TrainingHubCallback objects) and ``iteration_callback`` are called in this process from the
    run's events; they are never pickled into the child.
    """
    with python_api():
        return _train(algorithm, backend, None, config, overwrite, resume, allow_ignored, progress, params)


@dataclass(frozen=True)
class _Caller:
    """How a Training Hub call reached the API: the source label of its values, the command line
    recorded with the run, ``dry_run`` (return the plan), ``on_resolved`` (called with the resolved
    config before anything runs: the command line prints its thub equivalent)."""

    label: str = "api"
    command_line: tuple[str, ...] = ()
    dry_run: bool = False
    on_resolved: Callable[[ResolvedConfig], None] | None = None


def _train(algorithm: str, backend: str | None, backend_reason: str | None, config: str | Path | None,
           overwrite: bool, resume: bool, allow_ignored: bool, progress: bool,
           params: dict[str, Any], relabel: dict[str, str] | None = None,
           caller: _Caller = _Caller()) -> dict[str, Any]:
    from thub.compat.training_hub_api import observe, result_with_training_hub_keys
    from thub.runner import run_training

    spec = get_registry().algorithms.get(algorithm)
    # an algorithm with a ``callbacks`` parameter of its own (gepa: GEPACallbacks, run in the child) keeps it
    own = spec is not None and "callbacks" in spec.load_parameters().model_fields
    callbacks = None if own else params.pop("callbacks", None)
    iteration_callback = params.pop("iteration_callback", None)
    resolved = _resolve(algorithm, backend, config, allow_ignored, params, caller.label)
    if backend_reason:
        resolved.backend_reason = backend_reason
    for name, label in (relabel or {}).items():
        resolved.sources[name] = label
    if caller.on_resolved is not None:
        caller.on_resolved(resolved)
    if caller.dry_run:
        from thub.launch.plan import plan_for

        return plan_for(resolved).as_dict()
    with observe(callbacks, iteration_callback):
        result = run_training(resolved, overwrite=overwrite, resume=resume,
                              command_line=list(caller.command_line) or ["thub.train", algorithm],
                              quiet_json=not progress)
    return result_with_training_hub_keys(resolved, result)


def _training_hub_call(algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Training Hub's calling convention: its positional order, its default backend."""
    with python_api():
        return _training_hub_run(algorithm, args, kwargs)


def _training_hub_run(algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                      caller: _Caller = _Caller()) -> dict[str, Any]:
    """One Training Hub call (``thub.sft(...)``, or Training Hub's ``thub sft ...`` command line,
    :mod:`thub.cli.training_hub`): the one mapping of its keywords to a thub run."""
    from thub.compat import training_hub

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
    return _train(algorithm, backend, reason, config, control["overwrite"], control["resume"],
                  control["allow_ignored"], control["progress"], params, relabel, caller)


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


def evaluate_model(model_or_run: str | Path, tasks: str | list[str], *, base: bool = False,
                   checkpoints: str = "final", evaluator: str | None = None, limit: int | None = None,
                   batch_size: int = 1, device: str | None = None, options: dict[str, Any] | None = None,
                   allow_template_change: bool = False, out: str | Path | None = None, dry_run: bool = False,
                   progress: bool = True) -> dict[str, Any]:
    """``thub eval``: score a run's models (``final``; every checkpoint with ``checkpoints="all"``;
    result.json's best with ``"best"``; the base with ``base=True``) or a model folder on ``tasks``
    (harness task names or local task files), each served as trained (docs/eval.md).

    A run's results are filed in ``RUN_DIR/eval/<task>.json`` and summarised in its
    ``result.json`` (``eval``); a model folder's go to ``out`` (without it they are only
    returned). Returns ``{"results": {task: document}, "summary", "written"}``; with
    ``dry_run=True`` the resolved plan (models, tasks, settings), nothing loaded. Bad input raises
    :class:`thub.errors.UsageError`; ``progress=False`` prints nothing on stderr.
    """
    import sys

    from thub.evaluate.run import execute, plan

    eval_plan = plan(model_or_run, tasks, base=base, checkpoints=checkpoints, evaluator=evaluator, limit=limit,
                     batch_size=batch_size, device=device, options=options,
                     allow_template_change=allow_template_change, out=out, print_only=True)
    if dry_run:
        return eval_plan.as_dict()
    return execute(eval_plan, say=(lambda m: print(m, file=sys.stderr, flush=True)) if progress else (lambda m: None))
