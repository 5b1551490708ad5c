"""Which evaluator runs ``thub eval``: the registered ones, whether each can run here, the chosen one.

Evaluators are registered by plugins (``thub_register_evaluators``, :class:`thub.specs.EvaluatorSpec`);
this module reads the registry and installed-package metadata only, never the harness itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thub.errors import UsageError, did_you_mean
from thub.specs import EvaluatorSpec

#: the evaluator thub knows of, installed only when wanted (docs/eval.md)
LMEVAL_PLUGIN = "thub-plugin-lmeval"


def install_hint() -> str:
    """The command that installs thub's lm-evaluation-harness evaluator (its install catalog entry)."""
    from thub.envs.catalog import CATALOG

    return CATALOG["lmeval"].install_command()


def missing(spec: EvaluatorSpec) -> list[str]:
    """The evaluator's requirements that no installed distribution satisfies (empty: it can run)."""
    from thub.selection import requirement_problem

    return [problem for requirement in spec.requirements if (problem := requirement_problem(requirement))]


def describe(spec: EvaluatorSpec) -> dict[str, Any]:
    """One ``thub evaluators`` row: name, summary, plugin, requirements and whether they are met."""
    problems = missing(spec)
    return {"name": spec.name, "summary": spec.summary, "plugin": spec.provenance.describe(),
            "distribution": spec.provenance.distribution, "version": spec.provenance.version,
            "runner": spec.runner, "requirements": list(spec.requirements), "missing": problems,
            "ready": not problems, "install": spec.install, "task_files": list(spec.task_files), "docs": spec.docs}


def listing(registry: Any) -> list[dict[str, Any]]:
    """:func:`describe` of every registered evaluator, by name."""
    return [describe(spec) for _, spec in sorted(registry.evaluators.items())]


def choose(registry: Any, name: str | None) -> EvaluatorSpec:
    """The evaluator named ``name``, or the only registered one. Raises UsageError (exit 2) when
    none is registered (with the install command), when several are and none is named, or for
    an unknown name."""
    evaluators: dict[str, EvaluatorSpec] = registry.evaluators
    if not evaluators:
        raise UsageError(f"no evaluator is installed: install lm-evaluation-harness's with `{install_hint()}` "
                         "(`thub evaluators` lists what is registered)")
    if name is None:
        if len(evaluators) > 1:
            raise UsageError(f"several evaluators are installed ({', '.join(sorted(evaluators))}): "
                             "choose one with --evaluator NAME")
        return next(iter(evaluators.values()))
    if name not in evaluators:
        raise UsageError(f"--evaluator {name!r}: no such evaluator{did_you_mean(name, evaluators)}; installed: "
                         f"{', '.join(sorted(evaluators))}")
    return evaluators[name]


def check_ready(spec: EvaluatorSpec) -> None:
    """Raise UsageError naming what is missing and the install command when ``spec`` cannot run."""
    problems = missing(spec)
    if problems:
        install = spec.install or (install_hint() if spec.provenance.distribution == LMEVAL_PLUGIN else None)
        fix = f"; install it with `{install}`" if install else ""
        raise UsageError(f"evaluator {spec.name!r} cannot run here: {'; '.join(problems)}{fix}")


def load_runner(spec: EvaluatorSpec) -> Callable[..., Any]:
    """The evaluator's ``evaluate(request)`` function, imported now (it may import torch)."""
    from thub.errors import ThubError
    from thub.specs import load_object

    try:
        runner = load_object(spec.runner)
    except ImportError as exc:
        raise ThubError(f"evaluator {spec.name!r}: cannot import {spec.runner}: {exc}") from None
    if not callable(runner):
        raise ThubError(f"evaluator {spec.name!r}: {spec.runner} is a {type(runner).__name__}, not a function")
    return runner  # type: ignore[no-any-return]
