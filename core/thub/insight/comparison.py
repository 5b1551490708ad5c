"""``thub compare``'s reading of finished runs: one record per backend, and what differs, and why.

Pure functions over run directories (``result.json``, ``built.json``, ``training_metrics.jsonl``,
``thub_run.json``), so the table, the ``--json`` document and the first-difference naming are
tested on recorded runs without a training library.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: first-step loss and gradient norm agree when within this relative difference (same model and
#: data; batches may be drawn in another order and kernels round differently)
LOSS_TOLERANCE = 0.02
GRAD_NORM_TOLERANCE = 0.10
#: learning rates come from the same schedule formula: equal but for float rounding
LR_TOLERANCE = 1e-6
QUANTITIES = ("status", "examples", "masks", "samples_per_step", "learning_rate", "loss", "grad_norm")


def backend_record(backend: str, run_dir: Path) -> dict[str, Any]:
    """What one backend's run did: status, what its library built, and each step's metrics."""
    from thub.runner.built import read_built
    from thub.runner.metrics import read_metrics
    from thub.runner.rundir import RunDirectory, read_json

    layout = RunDirectory(run_dir)
    result = read_json(layout.result) or {}
    record = read_json(layout.record) or {}
    built = read_built(run_dir) or {}
    from thub.runner.metrics import is_eval_line

    lines = [line for line in read_metrics(layout.metrics) if not is_eval_line(line)]  # training steps only
    per_example = built.get("per_example") or {}
    speeds = [line["tokens_per_second"] for line in lines if isinstance(line.get("tokens_per_second"), (int, float))]
    first = lines[0] if lines else {}
    created = record.get("created")
    return {
        "backend": backend,
        "run_dir": str(run_dir),
        "status": result.get("status", "missing"),
        "error": result.get("error"),
        "built_by": built.get("by"),
        "examples": built.get("examples"),
        "tokens": built.get("tokens"),
        "trained_tokens": built.get("trained_tokens"),
        "as_validated": built.get("matches"),
        "difference_from_thub": built.get("difference"),
        "first_location": built.get("first_location"),
        "library_reason": built.get("reason"),
        "mask_hashes": per_example.get("hashes"),
        "samples_per_step": built.get("samples_per_step"),
        "steps": [{key: line.get(key) for key in ("step", "loss", "learning_rate", "grad_norm")} for line in lines],
        "tokens_per_second": round(sum(speeds) / len(speeds), 1) if speeds else None,
        "time_to_first_step": (round(first["timestamp"] - created, 2)
                               if isinstance(first.get("timestamp"), (int, float)) and isinstance(created, (int, float))
                               else None),
    }


def _close(a: Any, b: Any, tolerance: float) -> bool:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=1e-12)


def _step_value(record: Mapping[str, Any], index: int, key: str) -> Any:
    steps = record["steps"]
    return steps[index].get(key) if index < len(steps) else None


def differences(records: Sequence[Mapping[str, Any]], known: Mapping[str, Mapping[str, str]],
                sources: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Everything that differs between the backends' records, in :data:`QUANTITIES` order, each
    with the backends it concerns, one line of text and ``why`` when thub knows (the library's
    own reason, the backend's declared ``known_differences``, where a parameter's value came from).

    ``known``: backend -> its declared known differences; ``sources``: backend -> parameter ->
    ``{"value", "source"}`` as ``thub_run.json`` records them. A failed run is named as such and
    left out of the other comparisons.
    """
    found: list[dict[str, Any]] = []
    names = [r["backend"] for r in records]
    sources = sources or {}

    def add(quantity: str, concerned: list[str], text: str, why: list[str | None]) -> None:
        reasons = [w for w in why if w] + [f"{b}: {known[b][quantity]}" for b in concerned
                                           if quantity in known.get(b, {})]
        found.append({"quantity": quantity, "backends": concerned, "text": text, "why": "; ".join(reasons) or None})

    def where_from(param: str) -> str | None:
        given = {b: sources.get(b, {}).get(param) or {} for b in names}
        if len({json.dumps(v.get("value"), sort_keys=True, default=str) for v in given.values()}) < 2:
            return None
        return f"{param} is " + ", ".join(f"{v.get('value')} ({v.get('source')}) on {b}" for b, v in given.items())

    failed = [r for r in records if r["status"] != "succeeded"]
    for r in failed:
        add("status", [r["backend"]], f"{r['backend']} {r['status']}: {r.get('error') or 'see ' + r['run_dir']}", [])
    records = [r for r in records if r["status"] == "succeeded"]  # the rest is compared between runs that ran
    names = [r["backend"] for r in records]
    if len(records) < 2:
        return found
    if len({r["examples"] for r in records}) > 1:
        add("examples", names, "examples: " + ", ".join(f"{r['backend']} {r['examples']}" for r in records),
            [_thub_view(r) for r in records if r["as_validated"] is False])
    hashes = [Counter(r["mask_hashes"] or ()) for r in records]
    if any(r["mask_hashes"] is None for r in records) or len({tuple(sorted(h.items())) for h in hashes}) > 1:
        if any(r["mask_hashes"] is not None for r in records) and not any(f["quantity"] == "examples" for f in found):
            off = [r for r in records if r["as_validated"] is False] or list(records[1:])
            add("masks", [r["backend"] for r in off], "trained-token masks differ: " + "; ".join(
                f"{r['backend']} first at {r['first_location'] or '?'}" for r in off),
                [_thub_view(r) for r in off])
    if len({r["samples_per_step"] for r in records}) > 1:
        add("samples_per_step", names,
            "samples per optimizer step: " + ", ".join(f"{r['backend']} {r['samples_per_step']}" for r in records),
            [where_from("effective_batch_size")])
    for key, quantity, tolerance, only_first in (("learning_rate", "learning_rate", LR_TOLERANCE, False),
                                                  ("loss", "loss", LOSS_TOLERANCE, True),
                                                  ("grad_norm", "grad_norm", GRAD_NORM_TOLERANCE, True)):
        longest = max(len(r["steps"]) for r in records) if records else 0
        for index in range(1 if only_first else longest):
            values = [_step_value(r, index, key) for r in records]
            if all(v is None for v in values):
                continue
            if not all(_close(values[0], v, tolerance) for v in values[1:]):
                shown = ", ".join(f"{b} {_fmt(v)}" for b, v in zip(names, values, strict=True))
                add(quantity, names, f"{key} at step {index + 1}: {shown}"
                    + (f" (more than {tolerance:.0%} apart)" if only_first else ""),
                    [where_from("learning_rate") if key == "learning_rate" else None])
                break
    return found


def _thub_view(record: Mapping[str, Any]) -> str | None:
    """One backend's measured difference from thub's validated data (built.json), if any."""
    if not record.get("difference_from_thub"):
        return None
    text = f"{record['backend']} {record['difference_from_thub']}"
    if record.get("library_reason"):
        text += f" (the library: {record['library_reason']})"
    return text


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def table(records: Sequence[Mapping[str, Any]], max_steps: int) -> list[list[str]]:
    """The side-by-side table: one row per quantity, one column per backend (header first)."""
    reference = Counter(records[0]["mask_hashes"] or ()) if records else Counter()

    def masks(r: Mapping[str, Any]) -> str:
        if r["mask_hashes"] is None:
            return "not measured"
        same = "same as " + records[0]["backend"] if r is not records[0] else "reference"
        if r is not records[0] and Counter(r["mask_hashes"]) != reference:
            same = "DIFFER from " + records[0]["backend"]
        return same + (", as validated" if r["as_validated"] else ", NOT as validated" if r["as_validated"] is False
                       else "")

    rows: list[list[str]] = [["", *(r["backend"] for r in records)]]
    rows.append(["status", *(str(r["status"]) for r in records)])
    rows.append(["examples", *(_fmt(r["examples"]) for r in records)])
    rows.append(["trained tokens", *(_fmt(r["trained_tokens"]) for r in records)])
    rows.append(["tokens", *(_fmt(r["tokens"]) for r in records)])
    rows.append(["masks", *(masks(r) for r in records)])
    rows.append(["samples/step", *(_fmt(r["samples_per_step"]) for r in records)])
    for key, label in (("learning_rate", "lr"), ("loss", "loss"), ("grad_norm", "grad norm")):
        for index in range(max_steps):
            rows.append([f"{label} step {index + 1}", *(_fmt(_step_value(r, index, key)) for r in records)])
    rows.append(["tokens/s", *(_fmt(r["tokens_per_second"]) for r in records)])
    rows.append(["first step after (s)", *(_fmt(r["time_to_first_step"]) for r in records)])
    return rows


def render(rows: Sequence[Sequence[str]]) -> str:
    """The table as aligned plain text."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)
