"""What reward functions share: thub's built-in rewards (``thub_builtins.reward_functions``), a
plugin's (through :mod:`thub.backend`) and Training Hub's per-completion scorers
(:mod:`thub_builtins.training_hub.reward`) read a completion's text the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def completion_text(completion: Any) -> str:
    """The text of one completion, plain (a string) or conversational (a list of messages: the last
    message's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    return str(completion)
