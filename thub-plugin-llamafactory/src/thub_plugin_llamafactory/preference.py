"""dpo and kto rows for LLaMA-Factory's own preference data path, and the row check of the plan.

For dpo and kto LLaMA-Factory builds the pairs itself (its sharegpt converter with ``ranking``
or ``kto_tag``, its template, its pairwise/feedback processor). Its converter skips a row it
cannot read ("Skipping this abnormal example") and its processor drops one without an odd
number of prompt turns, so every row is checked against what that format holds: a row it would
drop is an error naming the row, never a pair silently missing from the run. :func:`check_rows`
(``BackendSpec.check_rows``) refuses such a row in the parent, before any dry run or run starts;
the runner converts the rows with the same :func:`preference_rows`. Pure Python: imports
``thub.backend`` only (the check runs where the backend's translation runs).
"""

from __future__ import annotations

from typing import Any

from thub.backend import UsageError

_SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt"}
PREFERENCE_FORMATS: dict[str, dict[str, Any]] = {
    "dpo": {"formatting": "sharegpt", "ranking": True,
            "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}},
    "kto": {"formatting": "sharegpt", "columns": {"messages": "conversations", "kto_tag": "kto_tag"}},
}


def _turn(message: dict[str, Any], where: str) -> dict[str, str]:
    """One canonical message as a sharegpt turn, or an error naming what the format cannot hold."""
    role = message.get("role")
    if message.get("tool_calls") or role == "tool":
        raise UsageError(f"{where}: a tool call or tool result; backend llamafactory's preference data "
                         "(LLaMA-Factory's sharegpt ranking/kto_tag format, rendered by its template) holds text "
                         "turns only (use backend trl for tool-use preference data)")
    if not isinstance(message.get("content"), str) or role not in _SHAREGPT_ROLES:
        raise UsageError(f"{where}: expected a text turn of role system, user or assistant, found role {role!r}")
    return {"from": _SHAREGPT_ROLES[role], "value": message["content"]}


def _prompt_turns(prompt: list[dict[str, Any]], where: str) -> list[dict[str, str]]:
    """The prompt as sharegpt turns: an optional system turn, then user/assistant alternating, ending
    with a user turn (LLaMA-Factory's converter reads exactly that)."""
    turns = [_turn(message, f"{where}.prompt[{i}]") for i, message in enumerate(prompt)]
    body = turns[1:] if turns and turns[0]["from"] == "system" else turns
    for i, turn in enumerate(body):
        expected = "human" if i % 2 == 0 else "gpt"
        if turn["from"] != expected:
            raise UsageError(f"{where}.prompt: expected user and assistant turns alternating after an optional first "
                             f"system turn, found {turn['from']!r} at turn {i + 1}; backend llamafactory's converter "
                             "skips such a row")
    if not body or body[-1]["from"] != "human":
        raise UsageError(f"{where}.prompt: expected it to end with a user turn (backend llamafactory)")
    return turns


def _answer(messages: Any, where: str) -> dict[str, str]:
    """A chosen/rejected/completion answer: one assistant text turn (what LLaMA-Factory's format holds)."""
    if not isinstance(messages, list) or len(messages) != 1:
        found = len(messages) if isinstance(messages, list) else repr(messages)
        raise UsageError(f"{where}: expected one assistant turn, found {found}; backend llamafactory's preference "
                         "format holds a single answer turn")
    turn = _turn(messages[0], f"{where}[0]")
    if turn["from"] != "gpt":
        raise UsageError(f"{where}[0]: expected an assistant turn, found {messages[0].get('role')!r}")
    return turn


def preference_rows(algorithm: str, rows: list[dict[str, Any]], locations: list[str]) -> list[dict[str, Any]]:
    """thub's canonical dpo/kto rows in LLaMA-Factory's sharegpt ranking (dpo) or kto_tag (kto)
    format; an error names the first row it could not hold."""
    out: list[dict[str, Any]] = []
    for row, where in zip(rows, locations, strict=True):
        conversations = _prompt_turns(row["prompt"], where)
        if algorithm == "dpo":
            out.append({"conversations": conversations, "chosen": _answer(row["chosen"], f"{where}.chosen"),
                        "rejected": _answer(row["rejected"], f"{where}.rejected")})
        else:
            out.append({"conversations": [*conversations, _answer(row["completion"], f"{where}.completion")],
                        "kto_tag": bool(row["label"])})
    return out


def check_rows(algorithm: str, rows: list[dict[str, Any]], locations: list[str], params: dict[str, Any]) -> None:
    """``BackendSpec.check_rows``: a dpo/kto row LLaMA-Factory's preference format cannot hold (a
    tool call or result, a prompt not alternating user/assistant or not ending on a user turn, an
    answer of more than one turn) raises :class:`~thub.backend.UsageError` naming its ``file:line``.
    Other algorithms' rows are thub's own tokens (nothing to check here)."""
    if algorithm in PREFERENCE_FORMATS:
        preference_rows(algorithm, rows, locations)
