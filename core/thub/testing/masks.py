"""The reference a backend's trained-token masks are tested against (every backend's mask test).

The reference is transformers' own ``apply_chat_template(..., return_assistant_tokens_mask=True)``
on a template with ``{% generation %}`` markers (the tiny test model's): the tokens the model's
template marks as the assistant's, every token for a row with ``"unmask": true`` or under
``unmask_messages``, cut to ``max_seq_len`` as thub's default ``overlong: truncate`` cuts. A
backend whose own data preparation trains anything else fails its mask test on the row that
differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def reference_sample(row: dict[str, Any], tokenizer: Any, max_seq_len: int | None = None, *,
                     unmask: bool = False) -> dict[str, list[int]]:
    """``{"input_ids", "labels"}`` of one canonical chat row as transformers renders and marks it."""
    done = tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
    ids = list(done["input_ids"])
    trained = [True] * len(ids) if unmask or row.get("unmask") else [bool(m) for m in done["assistant_masks"]]
    labels = [token if keep else -100 for token, keep in zip(ids, trained, strict=True)]
    return {"input_ids": ids[:max_seq_len], "labels": labels[:max_seq_len]}


def mask_differences(rows: Sequence[dict[str, Any]], samples: Sequence[dict[str, Any]], tokenizer: Any,
                     max_seq_len: int | None = None, *, unmask: bool = False,
                     overlong: str = "truncate", locations: Sequence[str] | None = None) -> list[str]:
    """One line per row whose backend sample (``input_ids``/``labels``) differs from the reference;
    empty when every row matches. ``samples`` holds one sample per row, in order, less the rows
    longer than ``max_seq_len`` when ``overlong`` is ``"drop"``."""
    expected_samples, kept = [], []
    for i, row in enumerate(rows):
        full = reference_sample(row, tokenizer, unmask=unmask)
        if overlong == "drop" and max_seq_len is not None and len(full["input_ids"]) > max_seq_len:
            continue
        expected_samples.append({k: v[:max_seq_len] for k, v in full.items()})
        kept.append(locations[i] if locations else f"row {i + 1}")
    if len(samples) != len(expected_samples):
        return [f"{len(rows)} rows became {len(samples)} samples, expected {len(expected_samples)}"]
    problems = []
    for where, sample, expected in zip(kept, samples, expected_samples, strict=True):
        if list(sample["input_ids"]) != expected["input_ids"]:
            problems.append(f"{where}: input_ids differ from the chat template's")
        elif list(sample["labels"]) != expected["labels"]:
            ours = sum(label != -100 for label in sample["labels"])
            theirs = sum(label != -100 for label in expected["labels"])
            problems.append(f"{where}: labels differ ({ours} trained, the template marks {theirs})")
    return problems
