"""thub's own data formats: how each is recognised in a file and normalised to its kind's rows.

Named by import string from :mod:`thub_builtins.data_kinds`, imported when data is read.
Canonical rows:

* chat (``messages``, ``sharegpt``, ``alpaca``, tool traces):
  ``{"messages": [{"role", "content", "tool_calls"?, "name"?, "reasoning_content"?}, ...], "unmask"?: bool}``
  with roles ``system|user|assistant|tool``;
* ``document``: ``{"document": str}``;
* ``grpo``: ``{"prompt": [messages...], "ground_truth": str}``;
* ``processed``: rows with ``input_ids`` and ``labels`` (equal-length int lists), passed through.

Every problem is reported as ``file:line: field: expected X, found Y`` (:class:`thub.data.RowCheck`).
"""

from __future__ import annotations

from typing import Any

from thub.data import DatasetSource, RowCheck, check_messages, describe, sharegpt_tags
from thub.data.formats import MESSAGE_ROLE_ALIASES, SHAREGPT_ROLES

# -- recognising a row (run on every row of an `auto` file: keep them cheap) -------------------


def is_processed(row: dict[str, Any]) -> bool:
    return "input_ids" in row


def is_grpo(row: dict[str, Any]) -> bool:
    # before `messages`: a conversation with a reference answer is a GRPO prompt, not a chat
    return ("ground_truth" in row or "answer" in row) and ("prompt" in row or "question" in row or "messages" in row)


def is_messages(row: dict[str, Any]) -> bool:
    return "messages" in row


def is_sharegpt(row: dict[str, Any]) -> bool:
    return "conversations" in row


def is_alpaca(row: dict[str, Any]) -> bool:
    return "instruction" in row and "output" in row


def is_document(row: dict[str, Any]) -> bool:
    return "document" in row or "text" in row


# -- validating and normalising one row -------------------------------------------------------


def _unmask(row: dict[str, Any], out: dict[str, Any], ctx: RowCheck) -> None:
    if "unmask" in row and row["unmask"] is not None:
        if not isinstance(row["unmask"], bool):
            ctx.error("unmask", "true or false", describe(row["unmask"]), "unmask")
        else:
            out["unmask"] = row["unmask"]


def normalise_messages(row: dict[str, Any], ctx: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    key = source.messages_key or "messages"
    if key not in row:
        ctx.error(key, f"a {key!r} list", describe(row), "messages")
        return None
    role_map = {**MESSAGE_ROLE_ALIASES, **source.role_map}
    messages = check_messages(row[key], ctx, key, role_tag=source.role_tag or "role",
                              content_tag=source.content_tag or "content", role_map=role_map)
    if messages is None:
        return None
    out: dict[str, Any] = {"messages": messages}
    _unmask(row, out, ctx)
    return out


def normalise_sharegpt(row: dict[str, Any], ctx: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    key, role_tag, content_tag = sharegpt_tags(row, source)
    if key not in row:
        ctx.error(key, f"a {key!r} list (set messages_key for this dataset)", describe(row), "messages")
        return None
    messages = check_messages(row[key], ctx, key, role_tag=role_tag, content_tag=content_tag,
                              role_map={**SHAREGPT_ROLES, **source.role_map})
    if messages is None:
        return None
    if isinstance(row.get("system"), str) and row["system"].strip() and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": row["system"]})
    out: dict[str, Any] = {"messages": messages}
    _unmask(row, out, ctx)
    return out


def normalise_alpaca(row: dict[str, Any], ctx: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    for key in ("instruction", "output"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            ctx.error(key, "non-empty text", describe(row.get(key)), "empty" if isinstance(row.get(key), str) else key)
            return None
    extra = row.get("input")
    if extra is not None and not isinstance(extra, str):
        ctx.error("input", "text or null", describe(extra), "input")
        return None
    user = row["instruction"] + ("\n\n" + extra if extra and extra.strip() else "")
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]
    if isinstance(row.get("system"), str) and row["system"].strip():
        messages.insert(0, {"role": "system", "content": row["system"]})
    out: dict[str, Any] = {"messages": messages}
    _unmask(row, out, ctx)
    return out


def normalise_document(row: dict[str, Any], ctx: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    column = source.document_column or "document"
    if column not in row and column == "document" and "text" in row:
        column = "text"  # the usual pretraining column name
    value = row.get(column)
    if not isinstance(value, str) or not value.strip():
        ctx.error(column, "non-empty text", describe(value) if column in row else "no such field",
                  "empty" if isinstance(value, str) else column)
        return None
    return {"document": value}


def normalise_grpo(row: dict[str, Any], ctx: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    key = next((k for k in ("prompt", "question", "messages") if k in row), None)
    if key is None:
        ctx.error("prompt", "a prompt under 'prompt', 'question' or 'messages'", describe(row), "prompt")
        return None
    value = row[key]
    if isinstance(value, str):
        if not value.strip():
            ctx.error(key, "non-empty text", "empty string", "empty")
            return None
        prompt: list[dict[str, Any]] = [{"role": "user", "content": value}]
        if isinstance(row.get("system"), str) and row["system"].strip():
            prompt.insert(0, {"role": "system", "content": row["system"]})
    else:
        checked = check_messages(value, ctx, key, role_map=MESSAGE_ROLE_ALIASES, prompt_only=True)
        if checked is None:
            return None
        prompt = checked
    truth_key = "ground_truth" if "ground_truth" in row else "answer"
    truth = row.get(truth_key)
    if isinstance(truth, bool) or not isinstance(truth, (str, int, float)) or not str(truth).strip():
        ctx.error(truth_key, "a non-empty reference answer (text or number)", describe(truth), "ground_truth")
        return None
    return {"prompt": prompt, "ground_truth": str(truth)}


def normalise_processed(row: dict[str, Any], ctx: RowCheck, source: DatasetSource) -> dict[str, Any] | None:
    ids: Any = row.get("input_ids")  # JSON values until checked below
    labels: Any = row.get("labels")
    for key, value in (("input_ids", ids), ("labels", labels)):
        if not isinstance(value, list) or not value or not all(type(x) is int for x in value):
            ctx.error(key, "a non-empty list of integers", describe(value) if key in row else "no such field", key)
            return None
    if len(ids) != len(labels):
        ctx.error("labels", f"{len(ids)} labels (one per input id)", f"{len(labels)}", "labels")
        return None
    if all(x == -100 for x in labels):
        ctx.error("labels", "at least one trained label (not -100)", "all -100", "labels")
        return None
    return row


