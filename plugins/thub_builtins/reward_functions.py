"""Built-in GRPO reward functions (pure Python, no heavy imports).

Each follows TRL's reward signature: ``f(prompts, completions, ground_truth, **columns)``
returning one float per completion. A completion is a string, or a list of chat messages
(conversational datasets), in which case the last message's content is scored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from thub.rewards import completion_text  # the one reading of a completion's text (re-exported)

_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:\.\d+)?(?:/\d+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def _normalise(text: str) -> str:
    return " ".join(text.strip().lower().split()).rstrip(".")


def binary(prompts: Sequence[Any], completions: Sequence[Any], ground_truth: Sequence[Any], **_: Any) -> list[float]:
    """1.0 when the completion equals the ground truth (case/space-insensitive), 0.5 when it
    contains it, else 0.0."""
    scores = []
    for completion, truth in zip(completions, ground_truth, strict=True):
        text, expected = _normalise(completion_text(completion)), _normalise(str(truth))
        scores.append(1.0 if text == expected else 0.5 if expected and expected in text else 0.0)
    return scores


def final_answer(text: str) -> str | None:
    """The final answer of a solution: ``\\boxed{}``, ``<answer>``, ``####``, else the last number."""
    for pattern in (_BOXED, _ANSWER_TAG):
        found = pattern.findall(text)
        if found:
            return found[-1].strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _as_number(text: str) -> float | None:
    cleaned = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        if "/" in cleaned:
            numerator, denominator = cleaned.split("/", 1)
            return float(numerator) / float(denominator)
        return float(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def math(prompts: Sequence[Any], completions: Sequence[Any], ground_truth: Sequence[Any], **_: Any) -> list[float]:
    """1.0 when the completion's final answer equals the ground truth's (numerically when both
    are numbers), else 0.0."""
    scores = []
    for completion, truth in zip(completions, ground_truth, strict=True):
        answer = final_answer(completion_text(completion))
        expected = final_answer(str(truth)) or str(truth).strip()
        if answer is None:
            scores.append(0.0)
            continue
        a, b = _as_number(answer), _as_number(expected)
        same = abs(a - b) < 1e-6 if a is not None and b is not None else _normalise(answer) == _normalise(expected)
        scores.append(1.0 if same else 0.0)
    return scores


def _parse_call(value: Any) -> tuple[str, Any] | None:
    """(name, arguments) from a tool call given as dict, JSON text or OpenAI ``tool_calls``."""
    if isinstance(value, str):
        match = re.search(r"\{.*\}", value, re.S)
        if not match:
            return None
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            return None
    if isinstance(value, list) and value:
        value = value[0]
    if not isinstance(value, dict):
        return None
    value = value.get("function", value)
    name = value.get("name")
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return (name, arguments) if name else None


def tool_call(prompts: Sequence[Any], completions: Sequence[Any], ground_truth: Sequence[Any], **_: Any) -> list[float]:
    """1.0 for the right tool name with the right arguments, 0.5 for the right name only."""
    scores = []
    for completion, truth in zip(completions, ground_truth, strict=True):
        got = _parse_call(completion if isinstance(completion, dict) else completion_text(completion))
        expected = _parse_call(truth)
        if got is None or expected is None or got[0] != expected[0]:
            scores.append(0.0)
        else:
            scores.append(1.0 if got[1] == expected[1] else 0.5)
    return scores
