"""The ``text_label`` data kind: one text and its class label a row (Training Hub's embedding_sft data).

    {"text": "What is the capital of France?", "label": 0}
    {"text": "Reset my password", "label": "account"}

A label is an integer or a non-empty string (a category name); each problem is reported as
``file:line: field: expected X, found Y`` by thub's row check.
"""

from __future__ import annotations

from typing import Any

from thub.backend import describe


def is_text_label(row: dict[str, Any]) -> bool:
    """A row with a ``text`` and a ``label`` (and no chat or preference fields)."""
    return "text" in row and "label" in row


def normalise_text_label(row: dict[str, Any], check: Any, source: Any) -> dict[str, Any] | None:
    """``{"text": str, "label": int | str}``; an empty text, a boolean, float or missing label is an error."""
    text, label = row.get("text"), row.get("label")
    ok = True
    if not isinstance(text, str) or not text.strip():
        check.error("text", "a non-empty string", describe(text))
        ok = False
    if isinstance(label, bool) or not isinstance(label, (int, str)) or (isinstance(label, str) and not label.strip()):
        check.error("label", "an integer or a non-empty string (a class)", describe(label))
        ok = False
    return {"text": text, "label": label} if ok else None


def preview_text_label(row: dict[str, Any], view: Any) -> list[dict[str, Any]]:
    """One panel: the text as the tokenizer splits it, titled by its label."""
    from thub.backend import explain_text

    return [{"title": f"label {row['label']}", **explain_text(row["text"], None, view)}]


def expected_text_label(params: Any, rows: Any, locations: Any, tokenizer: Any) -> int | None:
    """How many examples the library trains on: one a row, except for ``mnrl``, which trains on
    (anchor, positive) pairs built from the rows (None: nothing to compare them with)."""
    if params.get("loss_type") == "mnrl" and not params.get("loss_fn"):
        return None
    return len(rows)
