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

from collections.abc import Callable
from contextlib import ExitStack
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
    the outcome); ``progress=False`` prints nothing. A registered dialect may take Python objects
    from the keywords and add result keys (``DialectSpec.api_run``: Training Hub's ``callbacks``
    and ``iteration_callback`` are called in this process from the run's events, never pickled
    into the child).
    """
    with python_api():
        return train_call(algorithm, backend, None, config, overwrite, resume, allow_ignored, progress, params)


@dataclass(frozen=True)
class Caller:
    """How a dialect's call (Training Hub's ``thub.sft(...)``, its command line) reached the API: the
    source label of its values, the command line recorded with the run, ``dry_run`` (return the
    plan), ``on_resolved`` (called with the resolved config before anything runs: the command line
    prints its thub equivalent)."""

    label: str = "api"
    command_line: tuple[str, ...] = ()
    dry_run: bool = False
    on_resolved: Callable[[ResolvedConfig], None] | None = None


def train_call(algorithm: str, backend: str | None, backend_reason: str | None, config: str | Path | None,
               overwrite: bool, resume: bool, allow_ignored: bool, progress: bool,
               params: dict[str, Any], relabel: dict[str, str] | None = None,
               caller: Caller = Caller()) -> dict[str, Any]:
    """One run of the Python API (``thub.train``, a dialect's functions): ``backend_reason`` says
    why that backend (a dialect's default), ``relabel`` re-labels sources (parameter -> source)."""
    from thub.runner import run_training
    from thub.specs import load_object

    registry = get_registry()
    spec = registry.algorithms.get(algorithm)
    # an algorithm's own parameters (gepa's ``callbacks``: GEPACallbacks, run in the child) stay keywords
    own = frozenset(spec.load_parameters().model_fields) if spec is not None else frozenset()
    runs = [load_object(d.api_run)(params, own) for d in registry.dialects.values() if d.api_run]
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
    with ExitStack() as stack:
        for run in runs:
            stack.enter_context(run)
        result = run_training(resolved, overwrite=overwrite, resume=resume,
                              command_line=list(caller.command_line) or ["thub.train", algorithm],
                              quiet_json=not progress)
    for run in runs:
        result = run.finish(resolved, result)
    return result


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
