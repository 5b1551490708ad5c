"""The pieces every data format is built from: per-dataset settings, row checks, message lists.

Which data kinds and formats exist is not decided here: plugins register them
(``thub_register_data_kinds``, :class:`thub.specs.DataKindSpec`; thub's own in
``thub_builtins.data_kinds``) and :mod:`thub.data.kinds` dispatches to them. This module holds
what their validators share, so that every format reports problems alike:

* :class:`DatasetSource`: one dataset of a run with its own settings (format, tags, columns);
* :class:`RowCheck`: one row's location and problems; ``check.error(field, expected, found)``
  records ``file:line: field: expected X, found Y``;
* :func:`check_messages`: validate and normalise a message list (roles ``system|user|assistant|tool``,
  OpenAI content parts, tool calls, ShareGPT tags) - for any kind whose rows hold conversations;
* :func:`describe`: a found value, short, for those messages.

Validation is strict on purpose: each rule is a way real fine-tunes were silently ruined
(wrong ShareGPT tags giving zero assistant turns, trailing user turns, empty turns, files mixing
two schemas).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from thub.data.problems import Problems
from thub.errors import json_problem

ROLES = ("system", "user", "assistant", "tool")

#: Default ShareGPT role names (LLaMA-Factory/axolotl conventions, plus OpenAI names).
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
    "system": "system", "observation": "tool", "tool": "tool", "function": "tool",
    "function_call": "assistant",
}
#: Legacy OpenAI role names accepted in OpenAI-style message lists too.
MESSAGE_ROLE_ALIASES: dict[str, str] = {"function": "tool"}


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
    document_column: str | None = None  # a document format's text column; None: the format's default
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


class RowCheck:
    """One row's location and problems, handed to a format's normaliser so validators stay short.

    ``error(field, expected, found)`` records ``location: field: expected X, found Y`` (``kind``:
    the category similar problems are counted under; default: the field's name) and marks the
    row invalid (``ok`` False): the normaliser's row is then left out.
    """

    __slots__ = ("location", "problems", "ok")

    def __init__(self, location: str, problems: Problems) -> None:
        self.location, self.problems, self.ok = location, problems, True

    def error(self, field_name: str, expected: str, found: str, kind: str = "") -> None:
        """Record one problem of this row (``field_name`` as the user's file spells it)."""
        self.ok = False
        self.problems.error(self.location, field_name, f"expected {expected}, found {found}", kind)


_Ctx = RowCheck  # the validators' short name


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
                          f"invalid JSON ({json_problem(exc)}) in {describe(arguments)}", "tool_calls")
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
    """Validate and normalise a message list to ``[{"role", "content", "tool_calls"?, "name"?,
    "reasoning_content"?}, ...]``, or record the first problem on ``ctx`` and return None.

    ``where`` is the field's name in the row; ``role_tag``/``content_tag``/``role_map`` read
    ShareGPT-style lists. A list must hold an assistant turn and end with one (something to
    train on), or with ``prompt_only`` end with a user or tool turn (a prompt the model answers).
    """
    if not isinstance(messages, list) or not messages:
        ctx.error(where, "a non-empty list of messages", describe(messages))
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
            ctx.error(at, "an object", describe(message))
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


def sharegpt_tags(row: dict[str, Any], source: DatasetSource) -> tuple[str, str, str]:
    """(messages_key, role_tag, content_tag) for a ShareGPT row: explicit settings, else detected."""
    key = source.messages_key or "conversations"
    first = row.get(key)
    first = first[0] if isinstance(first, list) and first and isinstance(first[0], dict) else {}
    role_tag = source.role_tag or ("role" if "role" in first and "from" not in first else "from")
    content_tag = source.content_tag or ("content" if "content" in first and "value" not in first else "value")
    return key, role_tag, content_tag
