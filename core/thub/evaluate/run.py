"""``thub eval``: resolve the models, tasks and evaluator (:func:`plan`), then score each model
in this process (:func:`execute`) and file the results with the run (:mod:`thub.evaluate.results`).

The evaluator's ``evaluate(request)`` is imported and called here, once per model, with no child
process: the harness's own model load is the only overhead over running it by hand.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thub.errors import ThubError, UsageError
from thub.evaluate import EvalRequest, EvalTask, TaskScore
from thub.evaluate.models import EvalModel, RunInfo, resolve_models
from thub.specs import EvaluatorSpec


@dataclass
class EvalPlan:
    """What ``thub eval`` will do, resolved and checked, nothing loaded (``--dry-run``)."""

    target: str
    run: RunInfo | None
    evaluator: EvaluatorSpec
    models: list[EvalModel]
    tasks: tuple[EvalTask, ...]
    eval_dir: Path | None  # None: results are printed only
    limit: int | None = None
    batch_size: int = 1
    device: str | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def request(self, model: EvalModel) -> EvalRequest:
        """The :class:`EvalRequest` for one model."""
        work = self.eval_dir / "harness" / model.label if self.eval_dir else None
        return EvalRequest(model_path=model.model_path, label=model.label, tasks=self.tasks,
                           apply_chat_template=model.apply_chat_template, max_seq_len=model.max_seq_len,
                           generation_config=model.generation_config, batch_size=self.batch_size,
                           limit=self.limit, device=self.device, seed=self.seed,
                           work_dir=str(work) if work else None, options=dict(self.options))

    def as_dict(self) -> dict[str, Any]:
        """JSON data: what ``--dry-run --json`` prints."""
        from thub.evaluate.evaluators import describe

        return {"target": self.target, "run_dir": str(self.run.path) if self.run else None,
                "data_kind": self.run.data_kind if self.run else None,
                "evaluator": describe(self.evaluator),
                "models": [m.as_dict() for m in self.models],
                "tasks": [{"name": t.name, "path": t.path} for t in self.tasks],
                "settings": {"limit": self.limit, "batch_size": self.batch_size, "device": self.device,
                             "seed": self.seed, "options": self.options},
                "results": str(self.eval_dir) if self.eval_dir else None}


def parse_options(values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs: a VALUE that reads as JSON (a number, true, a list) is that
    value, anything else the string. Raises UsageError for a pair without ``=``."""
    options: dict[str, Any] = {}
    for value in values:
        key, sep, raw = value.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option {value!r}: expected KEY=VALUE")
        try:
            options[key.strip()] = json.loads(raw)
        except ValueError:
            options[key.strip()] = raw
        except RecursionError:  # deeper than Python's JSON reader goes: no string was meant either
            raise UsageError(f"--option {key.strip()}: the value is nested too deeply (more levels of arrays and "
                             "objects than can be read)") from None
    return options


def plan(target: str | Path, tasks: str | list[str] | tuple[str, ...], *, base: bool = False,
         checkpoints: str = "final", evaluator: str | None = None, limit: int | None = None,
         batch_size: int = 1, device: str | None = None, options: dict[str, Any] | None = None,
         allow_template_change: bool = False, out: str | Path | None = None, print_only: bool = False,
         seed: int = 0, registry: Any = None) -> EvalPlan:
    """Resolve and check everything ``thub eval`` needs; raise UsageError (exit 2) for bad input.
    Nothing is loaded or written."""
    from thub.evaluate.evaluators import choose
    from thub.evaluate.tasks import resolve_tasks
    from thub.manager import get_registry

    registry = registry or get_registry()
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: expected a number of examples >= 1")
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: expected >= 1")
    spec = choose(registry, evaluator)
    task_list = resolve_tasks(tasks, tuple(spec.task_files))
    run, models = resolve_models(target, registry, checkpoints=checkpoints, base=base,
                                 allow_template_change=allow_template_change)
    if run is not None:
        if out:
            raise UsageError(f"--out {out}: a run's results stay with it in {run.path / 'eval'}; --out is for a "
                             "model folder")
        eval_dir: Path | None = run.path / "eval"
    elif out:
        eval_dir = Path(out).expanduser()
    elif print_only:
        eval_dir = None
    else:
        raise UsageError(f"{target}: a model folder has no run directory to keep results in: give --out DIR "
                         "(or --json to print them only)")
    return EvalPlan(str(target), run, spec, models, task_list, eval_dir, limit, batch_size, device, seed,
                    dict(options or {}))


def _merge(model: EvalModel, base: str | None, say: Callable[[str], None]) -> None:
    """Merge ``model``'s adapter into ``model.model_path`` unless an earlier merge of the same
    adapter is cached there (its ``thub_merge.json`` names it)."""
    from thub.checkpoint.merge import MERGE_RECORD, merge_adapter

    target = Path(model.model_path)
    try:
        record = json.loads((target / MERGE_RECORD).read_text())
    except (OSError, ValueError, RecursionError):
        record = None
    adapter_files = [p for p in Path(model.source).glob("adapter_model.*") if p.is_file()]
    fresh = bool(adapter_files) and (target / MERGE_RECORD).is_file() and all(
        (target / MERGE_RECORD).stat().st_mtime >= p.stat().st_mtime for p in adapter_files)
    # the same adapter path saved again (a run trained anew in its directory) is merged again
    if isinstance(record, dict) and record.get("adapter") == model.source and fresh \
            and (target / "config.json").is_file():
        say(f"{model.label}: using the merged model cached in {target}")
        return
    if target.exists():
        shutil.rmtree(target)  # a stale or partial cache of another adapter: ours to replace
    say(f"{model.label}: merging the adapter {model.source} into {target}")
    merge_adapter(model.source, target, base if base and Path(base).expanduser().is_dir() else None,
                  warn=lambda message: say(f"warning: {message}"))


def _checked(scores: Any, model: EvalModel, tasks: tuple[EvalTask, ...], name: str) -> dict[str, TaskScore]:
    """The evaluator's answer by task; one task missing or unasked for is the evaluator's bug."""
    if not isinstance(scores, (list, tuple)) or not all(isinstance(s, TaskScore) for s in scores):
        raise ThubError(f"evaluator {name!r} returned {type(scores).__name__} for {model.label}, "
                        "not a list of thub.evaluate.TaskScore")
    by_task = {s.task: s for s in scores}
    wanted = [t.name for t in tasks]
    missing = [t for t in wanted if t not in by_task]
    extra = [t for t in by_task if t not in wanted]
    if missing or extra:
        raise ThubError(f"evaluator {name!r} on {model.label}: " + "; ".join(
            part for part in (f"no score for {', '.join(missing)}" if missing else "",
                              f"scores for tasks not asked for: {', '.join(extra)}" if extra else "") if part))
    return by_task


def execute(eval_plan: EvalPlan, *, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Score every model of the plan on its tasks, then write the results (each task's file, and
    for a run ``result.json``'s ``eval``). Returns ``{"results": {task: document}, "summary",
    "written"}``. An evaluator's UsageError (an offline named task) stays a UsageError (exit 2);
    its other errors are a ThubError (exit 1); either way nothing is written."""
    from thub import installed
    from thub.evaluate import results
    from thub.evaluate.evaluators import check_ready, load_runner

    say = say or (lambda message: print(message, file=sys.stderr, flush=True))
    spec = eval_plan.evaluator
    check_ready(spec)
    runner = load_runner(spec)
    evaluator_info = {"name": spec.name, "distribution": spec.provenance.distribution,
                      "version": spec.provenance.version or (installed.version(spec.provenance.distribution)
                                                             if spec.provenance.distribution else None)}
    base_model = eval_plan.run.base_model if eval_plan.run else None
    scored: dict[str, dict[str, dict[str, Any]]] = {t.name: {} for t in eval_plan.tasks}
    for model in eval_plan.models:
        if model.merge:
            _merge(model, base_model, say)
        if model.template.get("status") == "changed":
            say(f"warning: {model.label}: evaluated with a chat template unlike the training input's "
                f"(--allow-template-change): {model.template['problem']}")
        say(f"{model.label}: scoring {model.model_path} on {', '.join(t.name for t in eval_plan.tasks)} "
            f"with {spec.name}")
        try:
            # a harness's own prints (lm-eval's "bootstrapping for stddev") go to stderr: stdout holds
            # only thub's report (--json: nothing but JSON)
            with contextlib.redirect_stdout(sys.stderr):
                answer = runner(eval_plan.request(model))
        except ThubError:
            raise
        except Exception as exc:
            raise ThubError(f"evaluator {spec.name!r} failed on {model.label} ({model.model_path}): "
                            f"{type(exc).__name__}: {exc}") from exc
        extra = {"source": model.source, "apply_chat_template": model.apply_chat_template,
                 "max_seq_len": model.max_seq_len}
        if model.template.get("status") == "changed":
            extra["template_change"] = model.template["problem"]
        if model.best:
            extra["best"] = True
        for name, score in _checked(answer, model, eval_plan.tasks, spec.name).items():
            scored[name][model.label] = results.entry(score, model.model_path, model.step, extra)
    documents = {}
    created = results.run_created(eval_plan.run.path) if eval_plan.run else None
    for task in eval_plan.tasks:
        existing = results.read_task_file(eval_plan.eval_dir / f"{task.name}.json") if eval_plan.eval_dir else None
        documents[task.name] = results.merged_task(existing, task.name, task.path, evaluator_info, scored[task.name],
                                                   created)
    written: list[Path] = []
    summary = results.summarise(documents)
    if eval_plan.eval_dir is not None:
        written = results.write_tasks(eval_plan.eval_dir, documents)
        if eval_plan.run is not None and (eval_plan.run.path / "result.json").is_file():
            # the summary covers every task filed with the run, not only those scored now
            summary = results.summarise(results.read_all(eval_plan.eval_dir, created))
            results.update_result(eval_plan.run.path, summary)
    return {"results": documents, "summary": summary, "written": [str(p) for p in written]}
