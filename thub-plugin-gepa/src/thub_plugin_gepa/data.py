"""The ``gepa_example`` data kind: one task input and its expected answer a row (Training Hub's gepa data,
gepa's ``DefaultDataInst``).

    {"input": "What is the capital of France?", "answer": "Paris"}
    {"input": "2 + 2 = ?", "answer": "4", "additional_context": {"hint": "arithmetic"}}

``additional_context`` is optional (a mapping of strings, shown to the reflection LM); each problem is
reported as ``file:line: field: expected X, found Y`` by thub's row check.
"""

from __future__ import annotations

from typing import Any

from thub.backend import describe


def is_example(row: dict[str, Any]) -> bool:
    """A row with an ``input`` and an ``answer`` (and no chat, preference or alpaca fields)."""
    return "input" in row and "answer" in row and "instruction" not in row and "output" not in row


def normalise_example(row: dict[str, Any], check: Any, source: Any) -> dict[str, Any] | None:
    """``{"input": str, "answer": str, "additional_context": dict[str, str]}``; an empty input, a
    non-string answer or a non-mapping context is an error."""
    text, answer, context = row.get("input"), row.get("answer"), row.get("additional_context", {})
    ok = True
    if not isinstance(text, str) or not text.strip():
        check.error("input", "a non-empty string", describe(text))
        ok = False
    if not isinstance(answer, str):
        check.error("answer", "a string", describe(answer))
        ok = False
    if context is None:
        context = {}
    if not isinstance(context, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in context.items()):
        check.error("additional_context", "a mapping of strings to strings", describe(context))
        ok = False
    extra = sorted(set(row) - {"input", "answer", "additional_context"})
    if extra:
        check.error(extra[0], "only input, answer and additional_context", "another key")
        ok = False
    return {"input": text, "answer": answer, "additional_context": context} if ok else None


def preview_example(row: dict[str, Any], view: Any) -> list[dict[str, Any]]:
    """Two panels: the input and the expected answer as the tokenizer splits them."""
    from thub.backend import explain_text

    return [{"title": "input", **explain_text(row["input"], None, view)},
            {"title": "answer", **explain_text(row["answer"], None, view)}]
