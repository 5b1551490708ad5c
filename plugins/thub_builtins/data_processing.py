"""What thub does with rows of its own data kinds: tokenize them, count what it trains, preview them.

Named by import string from :mod:`thub_builtins.data_kinds` (the ``tokenize``, ``expected`` and
``preview`` of each :class:`thub.specs.DataKindSpec`), imported only by the command that needs
them. Each is a thin use of the data SDK (``thub.data``), which does the work for any kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from thub.data.preview import PreviewView, explain_ids, explain_messages, explain_prompt, explain_text
from thub.data.tokenize import IGNORE, Sample, TokenizeStats

#: rows tokenized at a time where a kind's rows are not streamed: bounds memory on big datasets
CHUNK = 8192
Samples = list[Sample | dict[str, list[int]]]
Sink = Callable[[Samples], None] | None


# -- thub data prepare / stats: (samples, stats); settings: max_seq_len, overlong, unmask -------


def tokenize_chat(rows: Sequence[dict[str, Any]], tokenizer: Any, settings: Mapping[str, Any],
                  locations: Sequence[str], template: Any, sink: Sink = None) -> tuple[Samples, TokenizeStats]:
    """Chat rows through the chat template, assistant turns trained; streamed to ``sink`` batch by batch."""
    from thub.data.tokenize import encode_chat

    samples, stats = encode_chat(rows, tokenizer, settings["max_seq_len"], unmask=bool(settings["unmask"]),
                                 overlong=settings["overlong"], locations=locations, template=template,
                                 sink=sink)  # type: ignore[arg-type]  # chat samples are (ids, ranges) pairs
    return list(samples), stats


def tokenize_documents(rows: Sequence[dict[str, Any]], tokenizer: Any, settings: Mapping[str, Any],
                       locations: Sequence[str], template: Any, sink: Sink = None) -> tuple[Samples, TokenizeStats]:
    """Documents, every token trained (EOS appended), ``CHUNK`` rows at a time."""
    from thub.data.tokenize import tokenize_documents as encode

    out: Samples = []
    total = TokenizeStats()
    for lo in range(0, len(rows), CHUNK):
        docs, stats = encode(rows[lo:lo + CHUNK], tokenizer, settings["max_seq_len"], overlong=settings["overlong"],
                             locations=locations[lo:lo + CHUNK])
        batch: Samples = [(sample["input_ids"], None) for sample in docs]
        total.merge(stats)
        if sink is not None:
            sink(batch)
        else:
            out.extend(batch)
    return out, total


def tokenize_processed(rows: Sequence[dict[str, Any]], tokenizer: Any, settings: Mapping[str, Any],
                       locations: Sequence[str], template: Any, sink: Sink = None) -> tuple[Samples, TokenizeStats]:
    """Already tokenized rows passed through under the length policy (cut or left out past max_seq_len)."""
    stats = TokenizeStats(samples_in=len(rows))
    out: Samples = []
    limit, overlong = settings["max_seq_len"], settings["overlong"]
    for row, where in zip(rows, locations, strict=True):
        ids, labels = row["input_ids"], row["labels"]
        if limit is not None and len(ids) > limit:
            if overlong == "drop":
                stats.dropped_overlong += 1
                stats.note("dropped_overlong", where)
                continue
            ids, labels = ids[:limit], labels[:limit]
            stats.truncated += 1
            stats.note("truncated", where)
        stats.samples_out += 1
        stats.tokens += len(ids)
        stats.trained_tokens += len(labels) - labels.count(IGNORE)
        stats.lengths.append(len(ids))
        out.append({"input_ids": ids, "labels": labels})
    return out, stats


# -- expected counts: ((input_ids, labels) per example, row index of each) | None -------------

Expected = tuple[list[tuple[list[int], list[int]]], list[int]] | None


def expected_chat(params: Mapping[str, Any], rows: Sequence[dict[str, Any]], locations: Sequence[str],
                  tokenizer: Any) -> Expected:
    """Chat rows as thub masks them (the masks ``thub data preview`` shows), under the run's overlong policy."""
    from thub.data.tokenize import encode_chat, expand_labels

    origin: list[int] = []
    encoded, _stats = encode_chat(rows, tokenizer, params.get("max_seq_len"),
                                  unmask=bool(params.get("unmask_messages")),
                                  overlong=str(params.get("overlong") or "truncate"), locations=locations,
                                  origin=origin)
    return [(ids, expand_labels(ids, ranges)) for ids, ranges in encoded], origin


def expected_documents(params: Mapping[str, Any], rows: Sequence[dict[str, Any]], locations: Sequence[str],
                       tokenizer: Any) -> Expected:
    """Pretraining blocks (``is_pretraining``); documents trained otherwise are the library's own affair."""
    if not params.get("is_pretraining"):
        return None
    from thub.data.blocks import pretraining_blocks

    blocks = pretraining_blocks(rows, tokenizer, int(params["block_size"]))
    return [(b["input_ids"], b["labels"]) for b in blocks], [-1] * len(blocks)  # a block joins documents


def expected_processed(params: Mapping[str, Any], rows: Sequence[dict[str, Any]], locations: Sequence[str],
                       tokenizer: Any) -> Expected:
    """Processed rows under the overlong policy, as thub trains them."""
    from thub.data.expected import processed_samples

    built, origin = processed_samples(rows, params.get("max_seq_len"), str(params.get("overlong") or "truncate"),
                                      locations)
    return [(s["input_ids"], s["labels"]) for s in built], origin


# -- thub data preview: titled panels ----------------------------------------------------------


def preview_chat(row: dict[str, Any], view: PreviewView) -> list[dict[str, Any]]:
    """The conversation through the chat template, assistant turns trained."""
    return [explain_messages(row["messages"], view, unmask=bool(row.get("unmask")))]


def preview_prompt(row: dict[str, Any], view: PreviewView) -> list[dict[str, Any]]:
    """The prompt with the generation prompt; nothing trained (the model writes the answer)."""
    return [explain_prompt(row["prompt"], view)]


def preview_documents(row: dict[str, Any], view: PreviewView) -> list[dict[str, Any]]:
    """The document, every token trained."""
    return [explain_text(row["document"], None, view)]


def preview_processed(row: dict[str, Any], view: PreviewView) -> list[dict[str, Any]]:
    """The ids decoded, trained where the labels say."""
    return [explain_ids(row["input_ids"], row["labels"], view)]
