"""Retention (``save_total_limit``) where the training library has no option of its own.

The HF Trainer backends (trl, unsloth, LLaMA-Factory, axolotl) pass ``save_total_limit`` to
``TrainingArguments`` and verl to ``trainer.max_actor_ckpt_to_keep``: the library rotates its own
checkpoints. mini-trainer and instructlab-training have no limit (instructlab's
``keep_last_checkpoint_only`` overwrites one ``last_epoch`` folder in place, so while it is being
written there is no complete checkpoint at all): there thub prunes, in the training child, each time
the runner reports a complete save (:meth:`thub.runner.context.RunContext.checkpoint`).

What is pruned: the folders beside the reported checkpoint that :func:`thub.checkpoint.layouts.detect`
finds complete, ordered by step (or samples seen), oldest first, down to the newest ``keep``.
Never deleted: the reported checkpoint and anything newer (a save under way), an incomplete
checkpoint (it may be one being written, and it is not counted), a best-validation checkpoint
(mini-trainer's ``samples_N_best_val_loss``), the paths given in ``protect`` (the final model, the best
checkpoint by the run's metric: issue 28), and anything outside the run directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["prune", "thub_retention"]


def thub_retention(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The native configuration of thub's own retention for a translation to put in its plan
    (``retention``), so the dry run shows it and the runner passes it to the run context; None
    when ``save_total_limit`` is unset (every checkpoint is kept)."""
    limit = params.get("save_total_limit")
    if limit is None:
        return None
    return {"save_total_limit": int(limit), "applied_by": "thub",
            "keeps": "the newest save_total_limit complete checkpoints beside each one saved; the final model, "
                     "best-validation saves and incomplete ones are never deleted"}


def _order(checkpoint: Any) -> int | None:
    """A checkpoint's place in time: its step, else the samples seen (``hf_format/samples_N``)."""
    if checkpoint.step is not None:
        return int(checkpoint.step)
    samples = checkpoint.details.get("samples")
    return int(samples) if isinstance(samples, int) else None


def _best(path: Path) -> bool:
    """A best-validation save (mini-trainer's ``samples_N_best_val_loss``): kept whatever the limit."""
    return "_best" in path.name


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def prune(reported: str | Path, keep: int, *, root: str | Path, protect: Iterable[str | Path] = ()) -> list[Path]:
    """Delete the complete checkpoints beside ``reported`` older than the newest ``keep``; returns
    what was deleted (oldest first). ``root`` is the run directory: nothing outside it is touched.

    Nothing is deleted when ``reported`` is not a complete checkpoint of a known layout (the save
    did not finish: the older ones are what a resume would use)."""
    from thub.checkpoint.layouts import detect

    if keep < 1:
        raise ValueError(f"save_total_limit must be at least 1, got {keep}")
    reported, root = Path(reported), Path(root)
    current = detect(reported)
    newest = _order(current) if current is not None and current.complete else None
    if newest is None or not _inside(reported, root):
        return []
    kept_paths = {Path(p).resolve() for p in protect} | {reported.resolve()}
    complete = []
    for child in reported.parent.iterdir():
        if not child.is_dir() or child.is_symlink() or _best(child):
            continue
        found = detect(child)
        order = _order(found) if found is not None else None
        # newer than the reported one: a save under way (never counted, never deleted)
        if found is not None and found.complete and order is not None and order <= newest:
            complete.append((order, child))
    complete.sort(reverse=True)
    removed = []
    for _order_key, path in sorted(complete[keep:]):
        if path.resolve() in kept_paths:
            continue
        shutil.rmtree(path)
        removed.append(path)
        print(f"thub: save_total_limit {keep}: removed {path} (older than the newest {keep} complete "
              "checkpoints)", flush=True)
    return removed
