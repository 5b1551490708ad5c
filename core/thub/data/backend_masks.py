"""The tokens a backend itself will train on, from its own preprocessing, next to thub's.

OpenThoughts trained the same conversations under LLaMA-Factory and axolotl and found different
tokens trained. ``thub data preview --backend B`` shows what B builds, and :func:`compare` says
whether it trains the same text as thub's assistant mask.

A backend plugin exposes its preprocessing as ``<plugin package>.masks:token_masks(model_path,
rows, params) -> [{"input_ids", "labels"}, ...]`` (one per canonical row, ``None`` where the
library drops the row). It runs in the backend's own interpreter (its managed environment, or
this one): ``python -m thub.data.backend_masks`` reads ``{"target", "model", "rows", "params"}``
on stdin and prints the result as JSON. Backends without such a module tokenize with thub's own
masks (``thub.data.tokenize_chat``), so thub's preview is already theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from thub.errors import UsageError

IGNORE = -100


def masks_target(runner: str) -> str:
    """``pkg.masks:token_masks`` for a backend whose runner is ``pkg.runner:run`` (or ``pkg.x:run``)."""
    package = runner.split(":", 1)[0].rsplit(".", 1)[0]
    return f"{package}.masks:token_masks"


def has_own_masks(runner: str, python: str | None) -> bool:
    """Whether the backend's plugin ships a ``masks`` module (checked in its interpreter)."""
    from thub.selection import module_origin

    return module_origin(masks_target(runner).split(":", 1)[0], python, timeout=120) is not None


def backend_masks(backend: str, model: str, rows: list[dict[str, Any]],
                  params: dict[str, Any]) -> list[dict[str, Any] | None]:
    """``[{"input_ids", "labels"}, ...]`` for ``rows`` from ``backend``'s own preprocessing.

    Raises :class:`UsageError` when the backend is unknown or exposes no preprocessing.
    """
    from thub.manager import get_registry

    registry = get_registry()
    spec = registry.backends.get(backend)
    if spec is None:
        raise UsageError(f"--backend: unknown backend {backend!r} (known: {', '.join(sorted(registry.backends))})")
    if not has_own_masks(spec.runner, spec.python):
        raise UsageError(f"--backend {backend}: the backend trains on thub's own masks (thub.data.tokenize_chat), "
                         "which `thub data preview` without --backend shows")
    request = json.dumps({"target": masks_target(spec.runner), "model": model, "rows": rows, "params": params})
    done = subprocess.run([spec.python or sys.executable, "-m", "thub.data.backend_masks"], input=request,
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    if done.returncode != 0:
        raise UsageError(f"--backend {backend}: its preprocessing failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def trained_text(example: dict[str, Any]) -> str:
    """The trained text of a preview example (``explain``'s segments), runs joined by a newline-free
    separator so that two runs never merge into one."""
    return "\x00".join(s["text"] for s in example["segments"] if s["trained"])


def compare(thub_example: dict[str, Any], backend_example: dict[str, Any] | None) -> dict[str, Any]:
    """Whether thub and the backend train exactly the same text in one row, and where they differ.

    Compared as decoded text, whitespace included (a trained newline after the end-of-turn token is
    a difference), so that libraries splitting the same text into different tokens still compare
    equal. ``thub_only``/``backend_only`` are the trained pieces one side has and the other lacks.
    """
    if backend_example is None:
        return {"equal": False, "dropped_by_backend": True,
                "thub_only": [t for t in trained_text(thub_example).split("\x00") if t], "backend_only": []}
    import difflib

    ours, theirs = trained_text(thub_example), trained_text(backend_example)
    if ours.replace("\x00", "") == theirs.replace("\x00", ""):
        return {"equal": True, "thub_only": [], "backend_only": []}
    thub_only, backend_only = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ours, theirs, autojunk=False).get_opcodes():
        if op in ("delete", "replace"):
            thub_only += [t for t in ours[i1:i2].split("\x00") if t]
        if op in ("insert", "replace"):
            backend_only += [t for t in theirs[j1:j2].split("\x00") if t]
    return {"equal": False, "thub_only": thub_only, "backend_only": backend_only}


def _main() -> None:
    from thub.specs import load_object

    request = json.load(sys.stdin)
    function = load_object(request["target"])
    result = function(request["model"], request["rows"], request["params"])
    print(json.dumps(result))


if __name__ == "__main__":
    _main()


def backend_preview(report: list[dict[str, Any]], rows: list[dict[str, Any]], backend: str, model: str,
                    tokenizer: Any, *, max_seq_len: int | None, unmask: bool, as_json: bool) -> None:
    """``thub data preview --backend B``: B's own trained tokens for each shown row, next to thub's.

    ``report`` holds thub's examples (``explain``) for ``rows``; each gets ``backend`` (B's tokens
    as trained/masked segments) and ``comparison`` (:func:`compare`). Printed like thub's preview,
    or as JSON.
    """
    from thub.data.preview import explain
    from thub.ui.output import JSON_SCHEMA_VERSION, emit_json, stdout_console

    chat = [i for i, row in enumerate(rows) if "messages" in row]
    if not chat:
        raise UsageError("--backend: the shown rows hold no conversation (masks differ only on chat data)")
    built = backend_masks(backend, model, [rows[i] for i in chat],
                          {"max_seq_len": max_seq_len, "unmask_messages": unmask})
    for i, encoded in zip(chat, built, strict=True):
        view = explain(encoded, tokenizer) if encoded else None
        report[i]["backend"] = {"name": backend, **view} if view else {"name": backend, "dropped": True}
        report[i]["comparison"] = compare(report[i], view)
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "model": model, "backend": backend, "examples": report})
        return
    out = stdout_console()
    for example in report:
        if "backend" not in example:
            continue
        out.print(f"==> {example['location']} ({example['format']}) <==", markup=False)
        for who, view in (("thub", example), (backend, example["backend"])):
            if view.get("dropped"):
                out.print(f"[{who}] dropped this row (no trainable sample)", markup=False)
                continue
            marked = "".join(f"[[{s['text']}]]" if s["trained"] else s["text"] for s in view["segments"])
            out.print(f"[{who}] {view['tokens']} tokens, {view['trained_tokens']} trained:", markup=False)
            out.print(marked, markup=False)
        diff = example["comparison"]
        if diff["equal"]:
            out.print(f"same trained text under thub and {backend}", markup=False)
        else:
            out.print(f"DIFFERENT trained text: thub only {diff['thub_only']}, {backend} only {diff['backend_only']}",
                      markup=False)
    same = sum(1 for e in report if e.get("comparison", {}).get("equal"))
    compared = sum(1 for e in report if "comparison" in e)
    out.print(f"{same} of {compared} examples train the same text under thub and {backend}  (legend: [[trained]] "
              "masked)",
              markup=False)
