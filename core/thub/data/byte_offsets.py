"""Token positions without character offsets, for byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, ...).

Why: labels need the token index at a handful of trained-span boundaries per row, but
``encode_batch`` computes a character offset for every token; on the benchmark workload that
is ~16 % of the encode's CPU (docs/performance.md). For a byte-level BPE tokenizer whose
normaliser and pre-tokenizers never change the text, every token id stands for a fixed byte
string and the tokens' bytes concatenate to the text's UTF-8 bytes, so the running sum of byte
lengths gives every token's end offset. ``encode_batch_fast`` (no offsets) plus that sum locates
the same tokens as ``Encoding.char_to_token`` does.

Safety, in three layers: eligibility from the tokenizer's components (anything unknown: not
eligible, the offsets path is used); every row is checked (the byte lengths must add up to the
text's length, and an NFC normaliser must leave the text unchanged), a row that fails is encoded
again with offsets; the first rows of every process are cross-checked against offsets, and any
difference switches the tokenizer to the offsets path for good.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any

Span = tuple[int, int]  # characters [start, end) of rendered text
Range = tuple[int, int]  # tokens [start, end)

# Pre-tokenizers that only split the text (never drop or add characters) in these behaviours.
_SPLITTERS = {"Split", "Digits", "Punctuation", "UnicodeScripts"}
_KEEPING = {None, "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}
_NO_BYTES = -(1 << 40)  # a token whose bytes are unknown: any row containing it fails the length check

_LOCATORS: dict[int, tuple[Any, ByteLocator | None]] = {}  # id(backend) -> (backend, locator)


def merge(ranges: list[Range]) -> list[Range]:
    """Sorted, non-overlapping union of token ranges (labels trained once however spans overlap)."""
    if len(ranges) < 2:
        return ranges
    ranges = sorted(ranges)
    out = [ranges[0]]
    for a, b in ranges[1:]:
        last_a, last_b = out[-1]
        if a <= last_b:
            out[-1] = (last_a, max(last_b, b))
        else:
            out.append((a, b))
    return out


def offset_ranges(enc: Any, spans: Sequence[Span]) -> list[Range]:
    """Token ranges of ``spans`` through the encoding's offsets: tokens overlapping a span."""
    char_to_token = enc.char_to_token
    out = []
    for start, end in spans:
        a = None
        for char in range(start, end):  # a char may map to no token (stripped by normalisers)
            a = char_to_token(char)
            if a is not None:
                break
        if a is None:
            continue
        b = a  # the loop below finds a's token at the latest
        for char in range(end - 1, start - 1, -1):
            b = char_to_token(char)
            if b is not None:
                break
        out.append((a, b + 1))
    return merge(out)


class ByteLocator:
    """Token ranges from ids and byte lengths (see the module docstring)."""

    VERIFY_ROWS = 32  # rows cross-checked against offsets before the locator is trusted

    def __init__(self, backend: Any, nfc: bool) -> None:
        self.backend = backend
        self.nfc = nfc
        self.lengths: Any = None  # numpy int64 array: bytes per token id (built by ready())
        self.verified = False
        self.disabled = False  # the table could not be built or a cross-check failed: offsets for everything

    def ready(self) -> bool:
        """Build the byte-length table on first use; False when this locator cannot be used.

        Built here rather than with the locator, so that importing numpy and reading the
        vocabulary happen while the first batch is already encoding.
        """
        if self.lengths is None and not self.disabled:
            try:
                self.lengths = _lengths(self.backend)
            except Exception:  # noqa: BLE001 - numpy missing or an odd vocabulary: offsets always work
                self.disabled = True
        return not self.disabled

    def ranges(self, text: str, ids: list[int], spans: Sequence[Span]) -> list[Range] | None:
        """Token ranges of ``spans``, or None when this row must be located through offsets."""
        import numpy as np

        if self.lengths is None and not self.ready():
            return None
        n = len(ids)
        ascii_text = text.isascii()
        if not ascii_text and self.nfc and not unicodedata.is_normalized("NFC", text):
            return None
        nbytes = len(text) if ascii_text else len(text.encode("utf-8"))
        if n == 0:
            return [] if nbytes == 0 else None
        ends = np.cumsum(self.lengths[np.fromiter(ids, dtype=np.intp, count=n)])
        if int(ends[-1]) != nbytes:
            return None
        points: list[int] = []
        for start, end in spans:
            if end > start:
                points += (start, end - 1)  # the first and the last character of the span
        if not points:
            return []
        if not ascii_text:
            points = [len(text[:p].encode("utf-8")) for p in points]
        # the token holding byte p: the first whose end is past p
        found = np.searchsorted(ends, points, side="right").tolist()
        return merge([(found[k], found[k + 1] + 1) for k in range(0, len(found), 2)])


def _state(component: Any) -> Any:
    return None if component is None else json.loads(component.__getstate__())


def _keeps_text(pre: Any) -> tuple[bool, int]:
    """(only splits or maps bytes, number of ByteLevel steps) of a pre-tokenizer's state."""
    if pre is None:
        return True, 0
    kind = pre.get("type")
    if kind == "Sequence":
        results = [_keeps_text(item) for item in pre.get("pretokenizers", [])]
        return all(ok for ok, _ in results), sum(count for _, count in results)
    if kind == "ByteLevel":
        return not pre.get("add_prefix_space", False), 1
    if kind in _SPLITTERS:
        return pre.get("behavior") in _KEEPING, 0
    return False, 0


def _offsets_untrimmed(post: Any) -> bool:
    """Whether a post-processor leaves offsets as the tokens' bytes (no whitespace trimming)."""
    if post is None:
        return True
    kind = post.get("type")
    if kind == "Sequence":
        return all(_offsets_untrimmed(item) for item in post.get("processors", []))
    if kind in ("ByteLevel", "RobertaProcessing"):
        return not post.get("trim_offsets", False)
    return kind in ("TemplateProcessing", "BertProcessing")


def _build(backend: Any) -> ByteLocator | None:
    """A locator for a tokenizer whose components keep the text's bytes, else None (cheap: no numpy)."""
    model = backend.model
    if type(model).__name__ != "BPE" or backend.truncation or backend.padding:
        return None
    if model.continuing_subword_prefix or model.end_of_word_suffix:
        return None  # these markers are in the tokens' strings but not in the text
    normalizer = _state(backend.normalizer)
    if normalizer is not None and normalizer.get("type") != "NFC":
        return None
    keeps, byte_levels = _keeps_text(_state(backend.pre_tokenizer))
    if not keeps or byte_levels != 1 or not _offsets_untrimmed(_state(backend.post_processor)):
        return None
    if any(token.lstrip or token.rstrip or token.single_word for token in backend.get_added_tokens_decoder().values()):
        return None  # such tokens take whitespace or context around them: their bytes are not fixed
    return ByteLocator(backend, nfc=normalizer is not None)


def _lengths(backend: Any) -> Any:
    """Bytes per token id: one character of the byte alphabet per byte, added tokens as written."""
    import numpy as np
    from tokenizers import pre_tokenizers

    vocab = backend.get_vocab(with_added_tokens=True)
    lengths = np.full(max(vocab.values(), default=-1) + 1, _NO_BYTES, dtype=np.int64)
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    for token, index in vocab.items():
        if token and alphabet.issuperset(token):
            lengths[index] = len(token)
    for index, token in backend.get_added_tokens_decoder().items():
        if token.content:
            lengths[index] = len(token.content.encode("utf-8"))
    return lengths


def byte_locator(backend: Any) -> ByteLocator | None:
    """The locator of a tokenizer (built once per process), or None when offsets are needed."""
    key = id(backend)
    cached = _LOCATORS.get(key)
    if cached is None or cached[0] is not backend:
        try:
            locator = _build(backend)
        except Exception:  # noqa: BLE001 - an unusual tokenizer: the offsets path always works
            locator = None
        if len(_LOCATORS) >= 8:  # a few tokenizers per process at most; keep memory bounded
            _LOCATORS.pop(next(iter(_LOCATORS)))
        cached = _LOCATORS[key] = (backend, locator)
    locator = cached[1]
    return None if locator is None or locator.disabled else locator
