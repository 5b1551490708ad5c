"""Data formats: detection, validation and normalisation to thub's canonical rows.

Canonical rows (what every backend gets, whatever the user's file looked like):

* chat (``messages``, ``sharegpt``, ``alpaca``, tool traces):
  ``{"messages": [{"role", "content", "tool_calls"?, "name"?, "reasoning_content"?}, ...], "unmask"?: bool}``
  with roles ``system|user|assistant|tool``;
* ``document``: ``{"document": str}``;
* ``grpo``: ``{"prompt": [messages...], "ground_truth": str}``;
* ``processed``: rows with ``input_ids`` and ``labels`` (equal-length int lists), passed through.

Validation is strict on purpose: each rule below is a way real fine-tunes were silently ruined
(wrong ShareGPT tags giving zero assistant turns, trailing user turns, empty turns, files mixing
two schemas). Every problem is reported as ``file:line: field: expected X, found Y``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from thub.data.problems import Problems

FORMATS = ("messages", "sharegpt", "alpaca", "document", "grpo", "processed")
CHAT_FORMATS = ("messages", "sharegpt", "alpaca")
ROLES = ("system", "user", "assistant", "tool")

#: Default ShareGPT role names (LLaMA-Factory/axolotl conventions, plus OpenAI names).
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
    "system": "system", "observation": "tool", "tool": "tool", "function": "tool",
    "function_call": "assistant",
}
# Legacy OpenAI names accepted in the messages format too.
_MESSAGE_ROLE_ALIASES = {"function": "tool"}


@dataclass
class DatasetSource:
    """One dataset of a mix, with its own format and ShareGPT tag settings.

    Tags left as ``None`` are detected from the first row (``from``/``value`` or ``role``/
    ``content``), so one global tag setting can never silently mis-read a mixed-schema mix.
    """

    path: str
    format: str = "auto"
    messages_key: str | None = None  # "conversations" for ShareGPT, "messages" otherwise
    role_tag: str | None = None  # ShareGPT: key holding the speaker ("from")
    content_tag: str | None = None  # ShareGPT: key holding the text ("value")
    role_map: dict[str, str] = field(default_factory=dict)  # extra speaker names -> canonical roles
    document_column: str = "document"
    probability: float | None = None  # interleave weight, when given per source
    name: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetSource:
        """From a YAML/CLI mapping; ``user_tag``/``assistant_tag``/``system_tag`` extend ``role_map``."""
        data = dict(data)
        role_map = dict(data.pop("role_map", None) or {})
        for tag, role in (("user_tag", "user"), ("assistant_tag", "assistant"), ("system_tag", "system"),
                          ("tool_tag", "tool")):
            if data.get(tag) is not None:
                role_map[str(data.pop(tag))] = role
            data.pop(tag, None)
        if "messages" in data:  # LLaMA-Factory's spelling of the list key
            data["messages_key"] = data.pop("messages")
        if "prob" in data:
            data["probability"] = data.pop("prob")
        if "probability" in data and data["probability"] is not None:
            data["probability"] = float(data["probability"])
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            from thub.errors import UsageError, did_you_mean

            raise UsageError(f"dataset {data.get('path', '?')}: unknown setting {unknown[0]!r}"
                             f"{did_you_mean(unknown[0], known | {'user_tag', 'assistant_tag', 'system_tag'})}")
        return cls(role_map=role_map, **data)

    @classmethod
    def parse(cls, spec: str, *, default_format: str = "auto") -> DatasetSource:
        """Parse a CLI spec ``PATH[:key=value,key=value]``, e.g. ``d.jsonl:role_tag=role,prob=0.3``."""
        path, options = spec, {}
        head, sep, tail = spec.rpartition(":")
        if sep and head and "=" in tail:
            path = head
            for item in tail.split(","):
                key, eq, value = item.partition("=")
                if not eq:
                    from thub.errors import UsageError

                    raise UsageError(f"--dataset {spec}: expected key=value after ':', found {item!r}")
                options[key.strip()] = value.strip()
        options.setdefault("format", default_format)
        return cls.from_dict({"path": path, **options})

    def label(self) -> str:
        """Short name for reports."""
        return self.name or self.path


def detect_format(row: dict[str, Any]) -> str:
    """The format of one row: one of :data:`FORMATS`, or ``"unknown"`` when no rule matches.

    Order matters: a row with ``messages`` *and* ``ground_truth`` is a GRPO prompt, not a chat.
    """
    if not isinstance(row, dict):
        return "unknown"
    if "input_ids" in row:
        return "processed"
    if ("ground_truth" in row or "answer" in row) and ("prompt" in row or "question" in row or "messages" in row):
        return "grpo"
    if "messages" in row:
        return "messages"
    if "conversations" in row:
        return "sharegpt"
    if "instruction" in row and "output" in row:
        return "alpaca"
    if "document" in row or "text" in row:
        return "document"
    return "unknown"


def describe(value: Any) -> str:
    """A short rendering of a found value for messages (type and a clipped repr)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "empty string" if not value.strip() else repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object with keys " + (", ".join(list(value)[:6]) or "(none)")
    return type(value).__name__


class _Ctx:
    """Location + problems for one row, so validators stay short."""

    __slots__ = ("location", "problems", "ok")

    def __init__(self, location: str, problems: Problems) -> None:
        self.location, self.problems, self.ok = location, problems, True

    def error(self, field_name: str, expected: str, found: str, kind: str = "") -> None:
        self.ok = False
        self.problems.error(self.location, field_name, f"expected {expected}, found {found}", kind)


def _text(value: Any, ctx: _Ctx, where: str) -> str | None:
    """Message content as text: a string, or OpenAI content parts of type text (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        texts = []
        for i, part in enumerate(value):
            if part.get("type", "text") != "text" or not isinstance(part.get("text"), str):
                ctx.error(f"{where}[{i}]", "a text content part", describe(part.get("type", part)), "content")
                return None
            texts.append(part["text"])
        return "".join(texts)
    ctx.error(where, "text", describe(value), "content")
    return None


def _tool_calls(value: Any, ctx: _Ctx, where: str) -> list[dict[str, Any]] | None:
    """Normalise tool calls to ``{"type": "function", "function": {"name", "arguments"}}``."""
    calls = value if isinstance(value, list) else [value]
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            ctx.error(f"{where}[{i}].function.name", "a tool name", describe(fn), "tool_calls")
            return None
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):
            # Templates format arguments with `tojson`; a JSON string would be double-encoded.
            # Text that is not a JSON object would break the chat template at training time.
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError as exc:
                ctx.error(f"{where}[{i}].function.arguments", "a JSON object (as text or an object)",
                          f"invalid JSON ({exc.msg} at column {exc.colno}) in {describe(arguments)}", "tool_calls")
                return None
            if not isinstance(parsed, dict):
                ctx.error(f"{where}[{i}].function.arguments", "a JSON object (as text or an object)",
                          f"JSON {describe(parsed)}", "tool_calls")
                return None
            arguments = parsed
        normalised: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": arguments}}
        if isinstance(call, dict) and call.get("id") is not None:
            normalised["id"] = call["id"]
        out.append(normalised)
    return out


def check_messages(messages: Any, ctx: _Ctx, where: str, *, role_tag: str = "role", content_tag: str = "content",
                   role_map: dict[str, str] | None = None, prompt_only: bool = False) -> list[dict[str, Any]] | None:
    """Validate and normalise a message list; ``prompt_only`` for GRPO prompts (no answer turn)."""
    if not isinstance(messages, list) or not messages:
        ctx.error(where, "a non-empty list of messages", describe(messages), "messages")
        return None
    out: list[dict[str, Any]] = []
    roles = role_map or {}
    for i, message in enumerate(messages):
        # Fast path for the common plain turn ({role, content} with text): `thub data check`
        # must stay well under 2 s on 100k rows, and this loop runs for every message.
        if type(message) is dict and len(message) == 2:
            content = message.get(content_tag)
            raw_role = message.get(role_tag)
            if type(content) is str and content and not content.isspace() and type(raw_role) is str:
                role = roles.get(raw_role, raw_role)
                if role in ROLES and raw_role != "function_call":
                    out.append({"role": role, "content": content})
                    continue
        at = f"{where}[{i}]"
        if not isinstance(message, dict):
            ctx.error(at, "an object", describe(message), "messages")
            return None
        if role_tag not in message:
            hint = ""
            if role_tag != "role" and "role" in message or role_tag != "from" and "from" in message:
                hint = " (set this dataset's role_tag/content_tag)"
            ctx.error(f"{at}.{role_tag}", f"a role under {role_tag!r}{hint}", describe(message), "role")
            return None
        raw_role = message[role_tag]
        role = (role_map or {}).get(raw_role, raw_role) if isinstance(raw_role, str) else raw_role
        if role not in ROLES:
            names = "|".join(sorted(set(role_map or {}) | set(ROLES)))
            ctx.error(f"{at}.{role_tag}", f"one of {names} (map other names with role_map)", describe(raw_role),
                      "role")
            return None
        calls = message.get("tool_calls") or message.get("function_call")
        if raw_role == "function_call":  # ShareGPT/LLaMA-Factory: the value is the JSON call
            try:
                calls = json.loads(message.get(content_tag) or "")
            except json.JSONDecodeError:
                ctx.error(f"{at}.{content_tag}", "a JSON tool call", describe(message.get(content_tag)), "tool_calls")
                return None
        normalised: dict[str, Any] = {"role": role}
        if calls:
            if role != "assistant":
                ctx.error(f"{at}.tool_calls", "tool calls only on assistant turns", f"role {role!r}", "tool_calls")
                return None
            normalised["tool_calls"] = _tool_calls(calls, ctx, f"{at}.tool_calls")
            if normalised["tool_calls"] is None:
                return None
        content = message.get(content_tag)
        if raw_role == "function_call" or (content is None and calls):
            content = ""
        text = _text(content, ctx, f"{at}.{content_tag}")
        if text is None:
            return None
        if not text.strip() and not calls:
            ctx.error(f"{at}.{content_tag}", f"non-empty text in a {role} turn", "empty string", "empty")
            return None
        normalised["content"] = text
        name = message.get("name")
        if isinstance(name, str) and name:
            normalised["name"] = name
        for key in ("reasoning_content", "thinking"):
            if isinstance(message.get(key), str):
                normalised["reasoning_content"] = message[key]
                break
        out.append(normalised)
    last = out[-1]["role"]
    if prompt_only:
        if last == "assistant":
            ctx.error(f"{where}[-1].role", "a prompt ending with a user or tool turn", "'assistant'", "last_turn")
            return None
        return out
    if not any(m["role"] == "assistant" for m in out):
        ctx.error(where, "at least one assistant turn (nothing to train on)",
                  "roles " + ",".join(m["role"] for m in out), "no_assistant")
        return None
    if last != "assistant":
        ctx.error(f"{where}[{len(out) - 1}].role", "the last turn to be trainable (assistant)", repr(last),
                  "last_turn")
        return None
    return out


def _unmask(row: dict[str, Any], out: dict[str, Any], ctx: _Ctx) -> None:
    if "unmask" in row and row["unmask"] is not None:
        if not isinstance(row["unmask"], bool):
            ctx.error("unmask", "true or false", describe(row["unmask"]), "unmask")
        else:
            out["unmask"] = row["unmask"]


def _norm_messages(row: dict[str, Any], ctx: _Ctx, source: DatasetSource) -> dict[str, Any] | None:
    key = source.messages_key or "messages"
    if key not in row:
        ctx.error(key, f"a {key!r} list", describe(row), "messages")
        return None
    role_map = {**_MESSAGE_ROLE_ALIASES, **source.role_map}
    messages = check_messages(row[key], ctx, key, role_tag=source.role_tag or "role",
                              content_tag=source.content_tag or "content", role_map=role_map)
    if messages is None:
        return None
    out: dict[str, Any] = {"messages": messages}
    _unmask(row, out, ctx)
    return out


def sharegpt_tags(row: dict[str, Any], source: DatasetSource) -> tuple[str, str, str]:
    """(messages_key, role_tag, content_tag) for a ShareGPT row: explicit settings, else detected."""
    key = source.messages_key or "conversations"
    first = row.get(key)
    first = first[0] if isinstance(first, list) and first and isinstance(first[0], dict) else {}
    role_tag = source.role_tag or ("role" if "role" in first and "from" not in first else "from")
    content_tag = source.content_tag or ("content" if "content" in first and "value" not in first else "value")
    return key, role_tag, content_tag


def _norm_sharegpt(row: dict[str, Any], ctx: _Ctx, source: DatasetSource) -> dict[str, Any] | None:
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


def _norm_alpaca(row: dict[str, Any], ctx: _Ctx, source: DatasetSource) -> dict[str, Any] | None:
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


def _norm_document(row: dict[str, Any], ctx: _Ctx, source: DatasetSource) -> dict[str, Any] | None:
    column = source.document_column
    if column not in row and column == "document" and "text" in row:
        column = "text"  # the usual pretraining column name
    value = row.get(column)
    if not isinstance(value, str) or not value.strip():
        ctx.error(column, "non-empty text", describe(value) if column in row else "no such field",
                  "empty" if isinstance(value, str) else column)
        return None
    return {"document": value}


def _norm_grpo(row: dict[str, Any], ctx: _Ctx, source: DatasetSource) -> dict[str, Any] | None:
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
        checked = check_messages(value, ctx, key, role_map=_MESSAGE_ROLE_ALIASES, prompt_only=True)
        if checked is None:
            return None
        prompt = checked
    truth_key = "ground_truth" if "ground_truth" in row else "answer"
    truth = row.get(truth_key)
    if isinstance(truth, bool) or not isinstance(truth, (str, int, float)) or not str(truth).strip():
        ctx.error(truth_key, "a non-empty reference answer (text or number)", describe(truth), "ground_truth")
        return None
    return {"prompt": prompt, "ground_truth": str(truth)}


def _norm_processed(row: dict[str, Any], ctx: _Ctx, source: DatasetSource) -> dict[str, Any] | None:
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


NORMALISERS: dict[str, Callable[[dict[str, Any], _Ctx, DatasetSource], dict[str, Any] | None]] = {
    "messages": _norm_messages,
    "sharegpt": _norm_sharegpt,
    "alpaca": _norm_alpaca,
    "document": _norm_document,
    "grpo": _norm_grpo,
    "processed": _norm_processed,
}


def kind_of(fmt: str) -> str:
    """The canonical kind a format yields: ``chat``, ``document``, ``grpo`` or ``processed``."""
    return "chat" if fmt in CHAT_FORMATS else fmt


def normalize_row(row: Any, fmt: str, location: str, problems: Problems,
                  source: DatasetSource) -> dict[str, Any] | None:
    """Validate one row in format ``fmt``; the canonical row, or ``None`` (problem recorded)."""
    ctx = _Ctx(location, problems)
    if not isinstance(row, dict):
        ctx.error("", "a JSON object per row", describe(row), "row")
        return None
    out = NORMALISERS[fmt](row, ctx, source)
    return out if ctx.ok else None
