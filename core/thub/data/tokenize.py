"""Tokenization with loss masks: chat rows -> ``input_ids`` + ``labels`` (-100 = no loss).

Speed comes from three things (see docs/performance-anchors.md, data preparation):

1. rendering by skeleton concatenation instead of Jinja per conversation (see templates.py);
2. encoding whole batches of rendered text with the Rust tokenizer (``encode_batch`` runs on all
   cores and releases the GIL, so the next batch is rendered while this one encodes);
3. locating trained spans at a handful of points per row: for byte-level BPE tokenizers from
   the tokens' byte lengths, so the encode skips character offsets (``encode_batch_fast``,
   byte_offsets.py), otherwise with ``char_to_token``; samples are ``(ids, trained token
   ranges)`` until the labels list is needed (``thub data prepare`` writes without one).

Nothing is dropped or cut silently: :class:`TokenizeStats` counts truncated and dropped samples
and callers print it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from thub.data.byte_offsets import ByteLocator, Range, byte_locator, offset_ranges
from thub.data.problems import no_gc
from thub.data.templates import ChatTemplate, Span, TemplateRejected, check_template
from thub.errors import UsageError

IGNORE = -100
OVERLONG = ("truncate", "drop", "error")
BATCH = 1000
#: Tokens encoded beyond ``max_seq_len`` when a long row is encoded by a prefix (:func:`text_bound`).
MARGIN = 64
Sample = tuple[list[int], "list[Range] | None"]  # input_ids, trained token ranges (None: all)


@dataclass
class TokenizeStats:
    """What tokenization did, for reports: never silent about cut or dropped samples."""

    samples_in: int = 0
    samples_out: int = 0
    truncated: int = 0  # longer than max_seq_len, cut (overlong="truncate")
    dropped_overlong: int = 0  # longer than max_seq_len, dropped (overlong="drop")
    dropped_untrainable: int = 0  # no trained token left (template, truncation)
    rejected_by_template: int = 0  # the template raised for the conversation
    tokens: int = 0
    trained_tokens: int = 0
    exact_rows: int = 0  # rows rendered by the (slower) exact Jinja path
    history_rewrites: int = 0  # assistant turns left untrained: the template rewrites history
    lengths: list[int] = field(default_factory=list, repr=False)
    examples: dict[str, list[str]] = field(default_factory=dict, repr=False)  # kind -> first locations

    def note(self, kind: str, where: str) -> None:
        """Remember the first few locations of one kind of event for messages."""
        bucket = self.examples.setdefault(kind, [])
        if len(bucket) < 3:
            bucket.append(where)

    def merge(self, other: TokenizeStats) -> None:
        """Add another chunk's counts (parallel preparation)."""
        for name in ("samples_in", "samples_out", "truncated", "dropped_overlong", "dropped_untrainable",
                     "rejected_by_template", "tokens", "trained_tokens", "exact_rows", "history_rewrites"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.lengths.extend(other.lengths)
        for kind, where in other.examples.items():
            for item in where:
                self.note(kind, item)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready counts (lengths summarised as percentiles)."""
        data = asdict(self)
        data.pop("lengths")
        data["length_percentiles"] = percentiles(self.lengths)
        return data

    def warnings(self) -> list[str]:
        """One line per non-zero event count, with where it first happened."""
        lines = []
        for kind, text in (("truncated", "truncated to max_seq_len"), ("dropped_overlong", "dropped: longer than "
                           "max_seq_len"), ("dropped_untrainable", "dropped: no trained token"),
                           ("rejected_by_template", "dropped: rejected by the chat template")):
            count = getattr(self, kind)
            if count:
                first = ", ".join(self.examples.get(kind, []))
                lines.append(f"{count} of {self.samples_in} samples {text}" + (f" (first: {first})" if first else ""))
        if self.history_rewrites:
            lines.append(f"{self.history_rewrites} earlier assistant turns not trained: the chat template renders "
                         "history differently from the final turn")
        return lines


def percentiles(values: Sequence[int]) -> dict[str, int]:
    """p50/p90/p99/max of a list of lengths (nearest rank), empty dict for no values."""
    if not values:
        return {}
    ordered = sorted(values)
    n = len(ordered)
    return {f"p{p}": ordered[min(n - 1, (p * n) // 100)] for p in (50, 90, 99)} | {"max": ordered[-1],
                                                                                 "min": ordered[0]}


def rust_tokenizer(tokenizer: Any) -> Any:
    """The Rust ``tokenizers.Tokenizer`` behind a transformers fast tokenizer (a slow one is refused)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UsageError("tokenizer: expected a fast (Rust) tokenizer, found a slow Python one; "
                         "save the model with a tokenizer.json")
    return backend


def text_bound(backend: Any, max_seq_len: int | None) -> int | None:
    """How many characters of a rendered row are encoded at first when ``max_seq_len`` is set: a
    token covers at most as many characters as its longest vocabulary entry, so this many hold
    ``max_seq_len + MARGIN`` tokens at the least (what no overlong policy keeps more of). A 50 MB
    row is then not tokenised whole to keep 128 tokens of it (:func:`long_prefix`)."""
    if max_seq_len is None:
        return None
    longest = max((len(token) for token in backend.get_vocab(with_added_tokens=True)), default=1)
    return (max_seq_len + MARGIN) * max(longest, 1)


def long_prefix(backend: Any, text: str, max_seq_len: int, bound: int, *, special: bool = False) -> int | None:
    """The length of a prefix of ``text`` whose first ``max_seq_len`` tokens are those of ``text``
    itself, or None to encode it whole (it is not longer than ``bound``, or no shorter prefix
    could be shown to hold them).

    A cut can only change the tokens next to it; the prefix is accepted when it has at least
    ``max_seq_len + MARGIN`` tokens and the prefix twice as long starts with the same
    ``max_seq_len + MARGIN`` tokens, so the cut did not reach back into what is kept.
    """
    cut = bound
    while cut * 2 < len(text):
        space = text.rfind(" ", cut // 2, cut)  # a cut before a word: the pre-tokenizer splits there too
        at = space if space > 0 else cut
        keep = max_seq_len + MARGIN
        first = backend.encode(text[:at], add_special_tokens=special).ids
        if len(first) >= keep:
            longer = backend.encode(text[:at * 2], add_special_tokens=special).ids
            if first[:keep] == longer[:keep]:
                return at
        cut *= 4
    return None


def span_labels(enc: Any, ids: list[int], spans: list[Span]) -> list[int]:
    """Labels from char spans: tokens overlapping a span are trained (as transformers does)."""
    return expand_labels(ids, offset_ranges(enc, spans))


def expand_labels(ids: list[int], ranges: list[Range] | None) -> list[int]:
    """The labels list of a sample: ``ids`` inside the trained token ranges (all when None), -100 elsewhere."""
    if ranges is None:
        return list(ids)
    labels = [IGNORE] * len(ids)
    for a, b in ranges:
        labels[a:b] = ids[a:b]
    return labels


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def _batches(n: int) -> Iterator[range]:
    """Encode batches of BATCH rows, the last BATCH rows in quarters.

    The pipeline's tail is serial: once the last batch is encoded, only this thread works (its
    labels and writing). Smaller last batches keep that tail short.
    """
    tail = max(0, n - BATCH)
    yield from _chunks(tail, BATCH)
    for piece in _chunks(n - tail, max(1, BATCH // 4)):
        yield range(tail + piece.start, tail + piece.stop)


def chat_tokenizer(tokenizer: Any, template: ChatTemplate | None, overlong: str) -> tuple[Any, ChatTemplate]:
    """The Rust tokenizer and a checked chat template (:func:`check_template`) to tokenize
    conversations with under the ``overlong`` policy; a UsageError for an unknown policy or a
    template that would shred every example."""
    if overlong not in OVERLONG:
        raise UsageError(f"overlong: expected one of {', '.join(OVERLONG)}, found {overlong!r}")
    backend = rust_tokenizer(tokenizer)
    template = template or ChatTemplate(tokenizer)
    problems = check_template(tokenizer, template)
    if problems:
        raise UsageError("\n".join(problems))
    return backend, template


def tokenize_chat(rows: Sequence[dict[str, Any]], tokenizer: Any, max_seq_len: int | None, *,
                  unmask: bool = False, overlong: str = "truncate", locations: Sequence[str] | None = None,
                  template: ChatTemplate | None = None,
                  sink: Callable[[list[dict[str, list[int]]]], None] | None = None,
                  ) -> tuple[list[dict[str, list[int]]], TokenizeStats]:
    """Tokenize canonical chat rows with the tokenizer's chat template and assistant-only labels.

    Returns ``([{"input_ids", "labels"}, ...], stats)``. Labels are the token id on tokens of
    assistant turns (the text marked by ``{% generation %}``, or for templates without markers
    the assistant content plus its end-of-turn marker) and -100 elsewhere; ``unmask=True`` (or a
    row's ``"unmask": true``) trains on every token.

    ``overlong`` decides what happens to samples longer than ``max_seq_len``: ``truncate`` (cut;
    dropped if no trained token remains), ``drop``, or ``error`` (UsageError listing them). Every
    cut or dropped sample is counted in the returned :class:`TokenizeStats`. ``locations``
    (``file:line`` per row) make those reports point at the input.

    ``sink``, if given, receives each batch's samples as soon as they are built, while the next
    batch is still encoding (so writing them costs no extra wall time), and the returned list
    stays empty.
    """
    def expand(batch: list[Sample]) -> list[dict[str, list[int]]]:
        return [{"input_ids": ids, "labels": expand_labels(ids, ranges)} for ids, ranges in batch]

    compact_sink = None if sink is None else (lambda batch: sink(expand(batch)))
    out, stats = encode_chat(rows, tokenizer, max_seq_len, unmask=unmask, overlong=overlong, locations=locations,
                             template=template, sink=compact_sink)
    return expand(out), stats


def encode_chat(rows: Sequence[dict[str, Any]], tokenizer: Any, max_seq_len: int | None, *,
                unmask: bool = False, overlong: str = "truncate", locations: Sequence[str] | None = None,
                template: ChatTemplate | None = None, sink: Callable[[list[Sample]], None] | None = None,
                origin: list[int] | None = None) -> tuple[list[Sample], TokenizeStats]:
    """:func:`tokenize_chat` with samples as ``(input_ids, trained token ranges)``: no labels lists.

    ``origin``, if given, receives the row index of each sample kept, in order (so that a sample
    can be named by its row's ``file:line``).

    A sample's ranges are sorted, non-overlapping ``[start, end)`` token ranges whose labels are
    the ids (None: every token trained); :func:`expand_labels` turns them into labels. This is
    what ``thub data prepare`` writes from, without building and scanning a labels list per row.
    """
    backend, template = chat_tokenizer(tokenizer, template, overlong)
    stats = TokenizeStats(samples_in=len(rows))
    out: list[Sample] = []
    overlong_at: list[str] = []
    # Byte-level BPE: encode without offsets and locate spans by byte lengths (byte_offsets.py).
    locator = byte_locator(backend) if hasattr(backend, "encode_batch_fast") else None

    def where(i: int) -> str:
        return locations[i] if locations is not None else f"row {i + 1}"

    bound = text_bound(backend, max_seq_len)
    cut_rows: set[int] = set()  # rows encoded by a prefix: their full length is not known

    def render(indices: range) -> tuple[list[int], list[str], list[list[Span] | None]]:
        kept, texts, spans = [], [], []
        for i in indices:
            messages = rows[i]["messages"]
            try:
                text, trained = template.spans(messages)
            except TemplateRejected as exc:
                stats.rejected_by_template += 1
                stats.note("rejected_by_template", f"{where(i)}: {exc}")
                continue
            if bound is not None and max_seq_len is not None and len(text) > bound:
                at = long_prefix(backend, text, max_seq_len, bound)
                if at is not None:  # only what the overlong policy can keep is encoded
                    text, trained = text[:at], [(a, min(b, at)) for a, b in trained if a < at]
                    cut_rows.add(i)
            kept.append(i)
            texts.append(text)
            spans.append(None if unmask or rows[i].get("unmask") else trained)
        return kept, texts, spans

    # Pipeline: while the Rust tokenizer encodes batch k (GIL released), Python renders batch k+1.
    with ThreadPoolExecutor(max_workers=1) as pool, no_gc():
        pending: tuple[list[int], list[str], list[Any], ByteLocator | None, Future[Any]] | None = None
        for indices in [*_batches(len(rows)), None]:
            nxt = None
            if indices is not None:
                kept, texts, spans = render(indices)
                fast = locator if locator is not None and not locator.disabled else None
                encode = backend.encode_batch if fast is None else backend.encode_batch_fast
                nxt = (kept, texts, spans, fast, pool.submit(encode, texts, add_special_tokens=False))
            if pending is not None:
                kept_p, texts_p, spans_p, fast_p, future = pending
                located = _locate(backend, fast_p, texts_p, spans_p, future.result())
                _collect(kept_p, located, max_seq_len, overlong, stats, out, overlong_at, where, origin, cut_rows)
                if sink is not None and out:
                    sink(out)  # runs while the Rust tokenizer encodes the next batch
                    out = []
            pending = nxt
    if overlong == "error" and overlong_at:
        raise UsageError(f"{len(overlong_at)} sample(s) longer than max_seq_len={max_seq_len} tokens: "
                         f"{', '.join(overlong_at[:5])}{' ...' if len(overlong_at) > 5 else ''} "
                         "(use overlong=truncate or drop, or raise max_seq_len)")
    stats.exact_rows = template.exact_rows
    stats.history_rewrites = template.history_rewrites
    return out, stats


def _locate(backend: Any, locator: ByteLocator | None, texts: list[str], spans: list[list[Span] | None],
            encodings: list[Any]) -> list[Sample]:
    """(ids, trained token ranges) per row encoded without offsets (``locator``) or with them (None).

    Rows the locator cannot place are encoded again with offsets.
    """
    ids_list = [enc.ids for enc in encodings]
    if locator is None:  # encoded with offsets
        return [(ids, None if trained is None else offset_ranges(enc, trained))
                for ids, trained, enc in zip(ids_list, spans, encodings, strict=True)]
    ranges: list[list[Range] | None] = []
    redo = []
    usable = locator.ready()  # builds the byte table on the first batch, while the next one encodes
    for j, (text, trained, ids) in enumerate(zip(texts, spans, ids_list, strict=True)):
        found = None if trained is None or not usable or locator.disabled else locator.ranges(text, ids, trained)
        if trained is not None and found is None:
            redo.append(j)
        ranges.append(found)
    if not locator.verified and not locator.disabled:
        # trust, but verify: the first rows of every process are also located through offsets
        check = [j for j, trained in enumerate(spans) if trained is not None and j not in redo][:locator.VERIFY_ROWS]
        encs = _with_offsets(backend, [texts[j] for j in check])
        if any(enc.ids != ids_list[j] or offset_ranges(enc, spans[j]) != ranges[j]  # type: ignore[arg-type]
               for j, enc in zip(check, encs, strict=True)):
            locator.disabled = True  # this tokenizer is not what it looked like: offsets from now on
            redo = [j for j, trained in enumerate(spans) if trained is not None]
        locator.verified = True
    if redo:
        for j, enc in zip(redo, _with_offsets(backend, [texts[j] for j in redo]), strict=True):
            ids_list[j] = enc.ids
            ranges[j] = offset_ranges(enc, spans[j])  # type: ignore[arg-type]
    return list(zip(ids_list, ranges, strict=True))


def _with_offsets(backend: Any, texts: list[str]) -> list[Any]:
    """Encodings with offsets of a few rows, encoded here rather than in the shared thread pool.

    ``encode_batch`` would queue behind the next batch's encode (the Rust pool is busy with it)
    and stall this thread for that whole batch; a few rows encode faster one by one.
    """
    if len(texts) > 64:
        return backend.encode_batch(texts, add_special_tokens=False)
    return [backend.encode(text, add_special_tokens=False) for text in texts]


def _collect(kept: list[int], located: list[Sample], max_seq_len: int | None, overlong: str, stats: TokenizeStats,
             out: list[Sample], overlong_at: list[str], where: Any, origin: list[int] | None = None,
             cut_rows: set[int] | frozenset[int] = frozenset()) -> None:
    """Turn one encoded batch into samples, applying the overlong policy (``cut_rows``: rows
    encoded by a prefix, :func:`long_prefix`)."""
    for i, (ids, ranges) in zip(kept, located, strict=True):
        if max_seq_len is not None and len(ids) > max_seq_len:
            if overlong == "error":
                overlong_at.append(f"{where(i)} ({'over ' if i in cut_rows else ''}{len(ids)} tokens)")
                continue
            if overlong == "drop":
                stats.dropped_overlong += 1
                stats.note("dropped_overlong", where(i))
                continue
            ids = ids[:max_seq_len]
            if ranges is not None:
                ranges = [(a, min(b, max_seq_len)) for a, b in ranges if a < max_seq_len]
            cut = True
        else:
            cut = False
        trained_count = len(ids) if ranges is None else sum(b - a for a, b in ranges)
        if trained_count == 0:  # counted once, as dropped, even when truncation caused it
            stats.dropped_untrainable += 1
            stats.note("dropped_untrainable", where(i))
            continue
        if cut:
            stats.truncated += 1
            stats.note("truncated", where(i))
        stats.samples_out += 1
        stats.tokens += len(ids)
        stats.trained_tokens += trained_count
        stats.lengths.append(len(ids))
        out.append((ids, ranges))
        if origin is not None:
            origin.append(i)


def tokenize_documents(rows: Sequence[dict[str, Any]], tokenizer: Any, max_seq_len: int | None, *,
                       overlong: str = "truncate", locations: Sequence[str] | None = None,
                       ) -> tuple[list[dict[str, list[int]]], TokenizeStats]:
    """Tokenize ``{"document"}`` rows for continued pretraining: every token trained, EOS appended.

    The same overlong policy and counts as :func:`tokenize_chat`.
    """
    if overlong not in OVERLONG:
        raise UsageError(f"overlong: expected one of {', '.join(OVERLONG)}, found {overlong!r}")
    backend = rust_tokenizer(tokenizer)
    eos = getattr(tokenizer, "eos_token_id", None)
    stats = TokenizeStats(samples_in=len(rows))
    out: list[dict[str, list[int]]] = []
    overlong_at: list[str] = []

    def where(i: int) -> str:
        return locations[i] if locations is not None else f"row {i + 1}"

    with no_gc():
        _documents(rows, backend, eos, max_seq_len, overlong, stats, out, overlong_at, where)
    if overlong == "error" and overlong_at:
        raise UsageError(f"{len(overlong_at)} document(s) longer than max_seq_len={max_seq_len} tokens: "
                         f"{', '.join(overlong_at[:5])} (use overlong=truncate or drop)")
    return out, stats


def _documents(rows: Sequence[dict[str, Any]], backend: Any, eos: int | None, max_seq_len: int | None,
               overlong: str, stats: TokenizeStats, out: list[dict[str, list[int]]], overlong_at: list[str],
               where: Any) -> None:
    bound = text_bound(backend, max_seq_len)
    for indices in _chunks(len(rows), BATCH):
        texts, cut_rows = [], set()
        for i in indices:
            text = rows[i]["document"]
            if bound is not None and max_seq_len is not None and len(text) > bound:
                at = long_prefix(backend, text, max_seq_len, bound, special=True)
                if at is not None:  # only what the overlong policy can keep is encoded
                    text = text[:at]
                    cut_rows.add(i)
            texts.append(text)
        encs = backend.encode_batch(texts, add_special_tokens=True)
        for i, enc in zip(indices, encs, strict=True):
            ids = enc.ids
            if eos is not None and (not ids or ids[-1] != eos):
                ids.append(eos)  # the model must learn where a document ends
            if max_seq_len is not None and len(ids) > max_seq_len:
                if overlong == "error":
                    overlong_at.append(f"{where(i)} ({'over ' if i in cut_rows else ''}{len(ids)} tokens)")
                    continue
                if overlong == "drop":
                    stats.dropped_overlong += 1
                    stats.note("dropped_overlong", where(i))
                    continue
                ids = ids[:max_seq_len]
                stats.truncated += 1
                stats.note("truncated", where(i))
            stats.samples_out += 1
            stats.tokens += len(ids)
            stats.trained_tokens += len(ids)
            stats.lengths.append(len(ids))
            out.append({"input_ids": ids, "labels": list(ids)})
