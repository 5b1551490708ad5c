"""The best checkpoint of a run that validates: the lowest ``eval_loss`` among its saved checkpoints.

Read from the run's own files, the same for every backend: the evaluation lines of
``training_metrics.jsonl`` (:data:`thub.runner.metrics.EVAL_FIELDS`) and the checkpoints reported
(``events.jsonl``). A checkpoint counts when an evaluation line has its step (it was evaluated
after that optimizer step, before or as it was saved) and it is still there, complete
(:func:`thub.checkpoint.layouts.detect`). ``result.json`` names it as ``best_checkpoint``
(:func:`thub.runner.result.write_result`; ``thub eval --checkpoints best`` reads it), and thub's own
retention never deletes it (:meth:`thub.runner.context.RunContext.checkpoint`); the HF Trainer
backends keep it through the library's rotation (``metric_for_best_model``,
:func:`thub.runner.hf_trainer.validation_training_args`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from thub.runner.metrics import is_eval_line

__all__ = ["GREATER_IS_BETTER", "METRIC", "best_checkpoint"]

#: the metric the best checkpoint is chosen by
METRIC = "eval_loss"
#: per known metric: whether a higher value is better (a loss: lower is)
GREATER_IS_BETTER: dict[str, bool] = {"eval_loss": False}


def _complete(path: str) -> bool:
    from thub.checkpoint.layouts import detect

    found = detect(Path(path))
    return found is not None and found.complete


def best_checkpoint(lines: Iterable[Mapping[str, Any]], checkpoints: Iterable[Mapping[str, Any]],
                    metric: str = METRIC, *, check_files: bool = True) -> dict[str, Any] | None:
    """``{"path", "step", "metric", "value"}`` of the best checkpoint, or None when no saved
    checkpoint has an evaluation at its step.

    ``lines``: the metrics lines (an evaluation line's last value per step counts: a resumed run
    evaluates a step again); ``checkpoints``: ``{path, step}`` in the order they were reported (of
    two at the same step, the first: ``checkpoint-N`` before the final model saved from it).
    ``check_files=False`` skips the check that each one is still there and complete.
    """
    if metric not in GREATER_IS_BETTER:
        raise ValueError(f"unknown metric {metric!r} for the best checkpoint (known: {', '.join(GREATER_IS_BETTER)})")
    scores: dict[int, float] = {}
    for line in lines:
        value = line.get(metric)
        if is_eval_line(line) and isinstance(value, (int, float)) and not isinstance(value, bool):
            scores[int(line["step"])] = float(value)
    higher = GREATER_IS_BETTER[metric]
    best: dict[str, Any] | None = None
    seen: set[str] = set()
    for entry in checkpoints:
        path, step = str(entry.get("path")), entry.get("step")
        if step is None or int(step) not in scores or path in seen:
            continue
        seen.add(path)
        value = scores[int(step)]
        if best is not None and not (value > best["value"] if higher else value < best["value"]):
            continue  # not better: the first of equal ones stays
        if check_files and not _complete(path):
            continue  # deleted since, or not complete
        best = {"path": path, "step": int(step), "metric": metric, "value": value}
    return best
