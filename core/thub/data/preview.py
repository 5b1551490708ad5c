"""What the model will be trained on: one example as trained/masked text segments.

A row's data kind decides what is shown (its ``DataKindSpec.preview``: one or more titled
panels); the functions here are what those previews are built from. Used by ``thub data
preview`` (coloured on a terminal, spans in ``--json``) and by anyone who
wants to eyeball the first rendered example of each source before a long run - the check that
catches a template from another model family or wrong role tags in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass
class PreviewView:
    """What a data kind's preview renders with: the model's tokenizer, its chat template (built
    on first use), whether every token is trained (``--unmask``), where samples are cut."""

    tokenizer: Any
    template: ChatTemplate | None = None
    unmask: bool = False
    max_seq_len: int | None = None

    def chat_template(self) -> ChatTemplate:
        """The model's chat template (loaded once)."""
        if self.template is None:
            self.template = ChatTemplate(self.tokenizer)
        return self.template


def _cut(text: str, ids: list[int], labels: list[int], offsets: list[tuple[int, int]],
         max_seq_len: int | None) -> dict[str, Any]:
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


def explain_text(text: str, spans: list[Span] | None, view: PreviewView) -> dict[str, Any]:
    """``text`` tokenized, trained where ``spans`` say (None: every token, ``[]``: none): tokens,
    trained tokens, whether it was cut at ``max_seq_len`` and its trained/masked segments."""
    backend = rust_tokenizer(view.tokenizer)
    enc = backend.encode(text, add_special_tokens=False)
    ids = enc.ids
    labels = list(ids) if spans is None else span_labels(enc, ids, spans)
    return _cut(text, ids, labels, enc.offsets, view.max_seq_len)


def explain_ids(input_ids: list[int], labels: list[int], view: PreviewView) -> dict[str, Any]:
    """Already tokenized ids and labels, decoded: the same view as :func:`explain_text`."""
    ids, labels = list(input_ids), list(labels)
    pieces = _pieces(rust_tokenizer(view.tokenizer), ids)
    offsets, pos = [], 0
    for piece in pieces:
        offsets.append((pos, pos + len(piece)))
        pos += len(piece)
    return _cut("".join(pieces), ids, labels, offsets, view.max_seq_len)


def explain_messages(messages: list[dict[str, Any]], view: PreviewView, *, unmask: bool = False) -> dict[str, Any]:
    """A conversation rendered with the chat template, assistant turns trained (every token with
    ``unmask`` or the view's ``unmask``): what thub trains of it."""
    text, spans = view.chat_template().spans(messages)
    return explain_text(text, None if unmask or view.unmask else spans, view)


def explain_prompt(messages: list[dict[str, Any]], view: PreviewView) -> dict[str, Any]:
    """A prompt rendered with the chat template and the generation prompt, nothing trained (the
    model writes the answer)."""
    text, _ = view.chat_template().render(messages, add_generation_prompt=True)
    return {**explain_text(text, [], view), "trains": False}  # no trained token is what is meant


def panels(row: dict[str, Any], view: PreviewView, kind: str | None = None) -> list[dict[str, Any]]:
    """What ``thub data preview`` shows of one canonical row: its data kind's preview panels, each
    ``{"title", "tokens", "trained_tokens", "truncated", "segments"}`` (and ``"trains": False``
    where no trained token is meant, as for a prompt). ``kind``: the row's data
    kind (default: detected from the row, as a file's row would be)."""
    from thub.data.kinds import detect_format, formats, kind_spec, loaded
    from thub.errors import UsageError

    name = kind or formats().kind_of(detect_format(row))
    spec = kind_spec(name) if name else None
    if spec is None or spec.preview is None:
        raise UsageError(f"preview: rows of kind {name or 'unknown'!r} have no preview "
                         "(their data kind registers none)")
    shown = loaded(spec.preview)(row, view)
    return [{"title": None, **panel} for panel in shown]


def explain(row: dict[str, Any], tokenizer: Any, template: ChatTemplate | None = None, *,
            unmask: bool = False, max_seq_len: int | None = None, kind: str | None = None) -> dict[str, Any]:
    """One canonical row rendered and tokenized: text segments, token and trained counts (the
    first panel of its kind's preview, :func:`panels`)."""
    shown = panels(row, PreviewView(tokenizer, template, unmask, max_seq_len), kind)
    first = dict(shown[0])
    first.pop("title", None)
    return first
