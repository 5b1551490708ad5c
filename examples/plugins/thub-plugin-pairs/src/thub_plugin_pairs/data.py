"""The ``pairs`` data kind: detect, check and normalise a row; preview it as two panels."""

from __future__ import annotations

from typing import Any

from thub.backend import check_messages


def is_pairs(row: dict[str, Any]) -> bool:
    return "better" in row and "worse" in row


def _turns(value: Any, role: str) -> Any:
    return [{"role": role, "content": value}] if isinstance(value, str) else value


def normalise_pairs(row: dict[str, Any], check: Any, source: Any) -> dict[str, Any] | None:
    """``{"prompt": [...], "better": [...], "worse": [...]}``; each problem named by field."""
    prompt = check_messages(_turns(row.get("prompt"), "user"), check, "prompt", prompt_only=True)
    better = check_messages(_turns(row["better"], "assistant"), check, "better")
    worse = check_messages(_turns(row["worse"], "assistant"), check, "worse")
    if prompt is None or better is None or worse is None:
        return None
    if better == worse:
        check.error("worse", "an answer other than the better one", "the same answer")
        return None
    return {"prompt": prompt, "better": better, "worse": worse}


def preview_pairs(row: dict[str, Any], view: Any) -> list[dict[str, Any]]:
    from thub.backend import explain_messages

    return [{"title": side, **explain_messages(row["prompt"] + row[side], view)} for side in ("better", "worse")]
