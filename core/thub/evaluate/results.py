"""Where ``thub eval`` results live and how they are read back.

``EVAL_DIR/<task>.json`` (``RUN_DIR/eval/`` for a run, ``--out`` for a model folder)::

    {"task": "arith", "path": "/abs/arith.jsonl" | null,
     "evaluator": {"name": "lmeval", "distribution": "thub-plugin-lmeval", "version": "0.1.0"},
     "models": {"final": {"model_path", "step", "metrics", "stderr", "higher_is_better", "samples",
                          "harness", "arguments", "evaluated_at"}, "base": {...}}}

A new evaluation merges into the file by label (re-running ``base`` keeps ``final``). Each file
names the run it scored (``run_created``: ``thub_run.json``'s ``created``): a run trained again in
the same directory (``--overwrite``, ``--resume``: ``eval/`` is the user's and stays) makes the old
results stale, so they are neither merged with the new ones nor shown. A run's
``result.json`` gets the summary under ``eval``: per task, per label its metrics, and per tuned
label its difference from ``base`` per metric (:func:`summarise`). Every write is atomic.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from thub.evaluate import TaskScore
from thub.runner.rundir import write_json_atomic

_STEP = re.compile(r"checkpoint-(\d+)$")


def label_order(label: str, step: int | None = None) -> tuple[int, float]:
    """Sort key: ``base`` first, then checkpoints by step, then ``final`` (and anything else)."""
    if label == "base":
        return (0, 0.0)
    if label == "final":
        return (2, 0.0)
    match = _STEP.match(label)
    if match:
        return (1, float(match.group(1)))
    return (1, float(step)) if step is not None else (2, 0.0)


def read_task_file(path: Path) -> dict[str, Any] | None:
    """A task's results file, None when it is absent or unreadable (a hand-edited file is replaced)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("models"), dict) else None


def entry(score: TaskScore, model_path: str, step: int | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One model's results of one task, as filed."""
    return {"model_path": model_path, "step": step, "metrics": dict(score.metrics), "stderr": dict(score.stderr),
            "higher_is_better": dict(score.higher_is_better), "samples": score.samples,
            "harness": dict(score.harness), "arguments": dict(score.arguments),
            "evaluated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}


def run_created(run_dir: str | Path) -> float | None:
    """The identity of the training run in ``run_dir``: ``thub_run.json``'s ``created`` (None: no run)."""
    try:
        value = json.loads((Path(run_dir) / "thub_run.json").read_text(encoding="utf-8")).get("created")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return _number(value)


def _current(document: dict[str, Any], created: float | None) -> bool:
    """Whether ``document`` scored the run made at ``created`` (always, outside a run)."""
    return created is None or _number(document.get("run_created")) == created


def merged_task(existing: dict[str, Any] | None, task: str, path: str | None, evaluator: dict[str, Any],
                entries: dict[str, dict[str, Any]], created: float | None = None) -> dict[str, Any]:
    """``existing`` (or nothing) with ``entries`` filed by label, the newest evaluator recorded;
    results of another run in the same directory (``created`` differs) are dropped."""
    kept = existing if existing is not None and _current(existing, created) else None
    models = dict((kept or {}).get("models") or {})
    models.update(entries)
    ordered = dict(sorted(models.items(), key=lambda kv: label_order(kv[0], kv[1].get("step"))))
    document: dict[str, Any] = {"task": task, "path": path, "evaluator": evaluator, "models": ordered}
    if created is not None:
        document["run_created"] = created
    return document


def write_tasks(eval_dir: Path, documents: dict[str, dict[str, Any]]) -> list[Path]:
    """Write each task's document to ``eval_dir/<task>.json`` (atomically, one by one, only after
    every model was scored: a failure before leaves the earlier files as they were)."""
    eval_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for task, document in documents.items():
        target = eval_dir / f"{task}.json"
        write_json_atomic(target, document)
        written.append(target)
    return written


def read_all(eval_dir: Path, created: float | None = None) -> dict[str, dict[str, Any]]:
    """Every task's results under ``eval_dir``, by task name; with ``created``, only those of that
    run (:func:`run_created`)."""
    if not eval_dir.is_dir():
        return {}
    found = {}
    for path in sorted(eval_dir.glob("*.json")):
        document = read_task_file(path)
        if document is not None and _current(document, created):
            found[str(document.get("task") or path.stem)] = document
    return found


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def deltas(models: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per tuned label, ``value - base value`` of each metric both have (none without ``base``)."""
    base = (models.get("base") or {}).get("metrics") or {}
    out: dict[str, dict[str, float]] = {}
    for label, data in models.items():
        if label == "base" or not base:
            continue
        diff = {}
        for metric, value in (data.get("metrics") or {}).items():
            a, b = _number(value), _number(base.get(metric))
            if a is not None and b is not None:
                diff[metric] = a - b
        out[label] = diff
    return out


def summarise(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``result.json``'s ``eval``: per task, per label the metrics and samples, per tuned label the
    difference from ``base``, and which metrics are better higher."""
    tasks = {}
    for task, document in sorted(documents.items()):
        models = document.get("models") or {}
        higher: dict[str, bool] = {}
        for data in models.values():
            higher.update(data.get("higher_is_better") or {})
        tasks[task] = {
            "path": document.get("path"),
            "models": {label: {"metrics": data.get("metrics") or {}, "step": data.get("step"),
                               "samples": data.get("samples")} for label, data in models.items()},
            "delta": deltas(models),
            "higher_is_better": higher,
            "evaluator": (document.get("evaluator") or {}).get("name"),
        }
    return {"tasks": tasks, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def update_result(run_dir: Path, summary: dict[str, Any]) -> None:
    """Put ``summary`` under ``eval`` in the run's ``result.json`` (atomically; the rest unchanged)."""
    path = run_dir / "result.json"
    result = json.loads(path.read_text(encoding="utf-8"))
    result["eval"] = summary
    write_json_atomic(path, result)


def verdict(delta: float, higher_is_better: bool | None) -> str:
    """``better`` / ``worse`` / ``same`` for a difference, by the metric's direction ('' unknown)."""
    if delta == 0:
        return "same"
    if higher_is_better is None:
        return ""
    return "better" if (delta > 0) == higher_is_better else "worse"


def run_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's eval summary: ``result.json``'s ``eval``, else one made from ``RUN_DIR/eval/`` (None
    when the run was never evaluated)."""
    run = Path(run_dir)
    try:
        result = json.loads((run / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        result = None
    if isinstance(result, dict) and isinstance(result.get("eval"), dict):
        return result["eval"]  # type: ignore[no-any-return]
    documents = read_all(run / "eval", run_created(run))
    return summarise(documents) if documents else None


def comparison(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    """Two runs' eval results side by side: per task and metric, each run's base, tuned (``final``,
    else its last checkpoint) and difference."""
    summaries = [run_summary(run) or {"tasks": {}} for run in (run_a, run_b)]
    rows = []
    for task in sorted(set(summaries[0]["tasks"]) | set(summaries[1]["tasks"])):
        sides = [s["tasks"].get(task) or {} for s in summaries]
        metrics = sorted({m for side in sides for data in (side.get("models") or {}).values()
                          for m in data.get("metrics") or {}})
        for metric in metrics:
            row: dict[str, Any] = {"task": task, "metric": metric}
            for key, side in zip(("a", "b"), sides, strict=True):
                models = side.get("models") or {}
                tuned = tuned_label(models)
                base = (models.get("base") or {}).get("metrics", {}).get(metric)
                value = (models.get(tuned) or {}).get("metrics", {}).get(metric) if tuned else None
                row[key] = {"label": tuned, "base": base, "tuned": value,
                            "delta": ((side.get("delta") or {}).get(tuned) or {}).get(metric) if tuned else None}
                row.setdefault("higher_is_better", (side.get("higher_is_better") or {}).get(metric))
            rows.append(row)
    return {"a": str(run_a), "b": str(run_b), "rows": rows}


def tuned_label(models: dict[str, Any]) -> str | None:
    """The label that stands for the tuned model: ``final``, else the latest checkpoint."""
    if "final" in models:
        return "final"
    others = sorted((label for label in models if label != "base"),
                    key=lambda label: label_order(label, (models[label] or {}).get("step")))
    return others[-1] if others else None


def _fmt(value: Any) -> str:
    number = _number(value)
    return "-" if number is None else f"{number:.4g}"


def table_rows(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of one task's table: metric, each label's value (± its stderr), and the
    tuned model's difference from base, signed, with whether that is better or worse."""
    models = document.get("models") or {}
    labels = list(models)
    tuned = tuned_label(models)
    with_delta = "base" in models and tuned is not None
    columns = ["metric", *labels, *([f"{tuned} - base"] if with_delta else [])]
    metrics = list(dict.fromkeys(m for data in models.values() for m in data.get("metrics") or {}))
    rows = []
    for metric in metrics:
        row = [metric]
        higher = None
        for label in labels:
            data = models[label]
            value = (data.get("metrics") or {}).get(metric)
            se = _number((data.get("stderr") or {}).get(metric))
            row.append(_fmt(value) + (f" ± {se:.2g}" if se else ""))
            higher = (data.get("higher_is_better") or {}).get(metric, higher)
        if with_delta and tuned is not None:
            diff = deltas({"base": models["base"], tuned: models[tuned]}).get(tuned, {}).get(metric)
            row.append("-" if diff is None else f"{diff:+.4g} {verdict(diff, higher)}".rstrip())
        rows.append(row)
    return columns, rows
