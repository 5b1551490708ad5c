"""What the model will be trained on: one example as trained/masked text segments.

Used by ``thub data preview`` (coloured on a terminal, spans in ``--json``) and by anyone who
wants to eyeball the first rendered example of each source before a long run - the check that
catches a template from another model family or wrong role tags in seconds.
"""

from __future__ import annotations

from typing import Any

from thub.data.templates import ChatTemplate, Span
from thub.data.tokenize import IGNORE, rust_tokenizer, span_labels


def segments(text: str, offsets: list[tuple[int, int]], labels: list[int]) -> list[dict[str, Any]]:
    """Merge consecutive tokens with the same trained flag into text segments."""
    out: list[dict[str, Any]] = []
    n = len(labels)
    i = 0
    while i < n:
        trained = labels[i] != IGNORE
        j = i
        while j + 1 < n and (labels[j + 1] != IGNORE) == trained:
            j += 1
        start = offsets[i][0] if i else 0
        end = offsets[j + 1][0] if j + 1 < n else len(text)
        out.append({"text": text[start:end], "trained": trained, "tokens": j - i + 1, "first_token": i})
        i = j + 1
    return out


def _pieces(backend: Any, ids: list[int]) -> list[str]:
    """Each token's text (the Rust backend decodes for transformers' fast tokenizers and thub's
    light one). A character split over several byte-level tokens (``°``, an emoji) is given to
    the last of them, the others get ``""``: decoded alone each would be U+FFFD."""
    pieces: list[str] = []
    pending: list[int] = []
    for token in ids:
        pending.append(token)
        piece = backend.decode(pending, skip_special_tokens=False)
        if piece.endswith("\ufffd") and len(pending) < 4:  # UTF-8 holds at most 4 bytes a character
            pieces.append("")
            continue
        pieces.append(piece)
        pending = []
    if pending:  # ends inside a character: the bytes as the tokenizer decodes them
        pieces[-1] = backend.decode(pending, skip_special_tokens=False)
    return pieces


def explain(row: dict[str, Any], tokenizer: Any, template: ChatTemplate | None = None, *,
            unmask: bool = False, max_seq_len: int | None = None) -> dict[str, Any]:
    """One canonical row rendered and tokenized: text, segments, token and trained counts.

    Chat rows use the chat template and assistant-only labels, GRPO prompts are rendered with
    the generation prompt (nothing trained: the model writes the answer), documents are fully
    trained, processed rows are decoded.
    """
    backend = rust_tokenizer(tokenizer)
    if "input_ids" in row:
        ids, labels = list(row["input_ids"]), list(row["labels"])
        pieces = _pieces(backend, ids)
        offsets, pos = [], 0
        for piece in pieces:
            offsets.append((pos, pos + len(piece)))
            pos += len(piece)
        text = "".join(pieces)
    else:
        spans: list[Span] | None
        if "document" in row:
            text, spans = row["document"], None
        elif "prompt" in row:
            template = template or ChatTemplate(tokenizer)
            text, _ = template.render(row["prompt"], add_generation_prompt=True)
            spans = []
        else:
            template = template or ChatTemplate(tokenizer)
            text, spans = template.spans(row["messages"])
            if unmask or row.get("unmask"):
                spans = None
        enc = backend.encode(text, add_special_tokens=False)
        ids = enc.ids
        labels = list(ids) if spans is None else span_labels(enc, ids, spans)
        offsets = enc.offsets
    truncated = max_seq_len is not None and len(ids) > max_seq_len
    if truncated and max_seq_len is not None:
        cut = offsets[max_seq_len][0]
        text, ids, labels, offsets = text[:cut], ids[:max_seq_len], labels[:max_seq_len], offsets[:max_seq_len]
    return {
        "tokens": len(ids),
        "trained_tokens": len(labels) - labels.count(IGNORE),
        "truncated": truncated,
        "segments": segments(text, offsets, labels),
    }
