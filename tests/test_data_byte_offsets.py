"""Labels without character offsets (byte-level BPE): the same tokens as char_to_token, or the offsets path."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest

from thub.data import tokenize as tokenize_module
from thub.data import tokenize_chat
from thub.data.byte_offsets import ByteLocator, _build, byte_locator, offset_ranges
from thub.data.prepare import _write_jsonl
from thub.data.synthetic import CHATML, CHATML_GENERATION, conversations, make_tokenizer
from thub.data.tokenize import encode_chat, expand_labels

pytest.importorskip("transformers")
pytest.importorskip("numpy")

TRICKY = [
    "plain ascii text, numbers 42 and 3.14",
    "  leading and trailing spaces  \n\n",
    "café naïve résumé, déjà vu",
    "日本語のテキストと English mixed",
    "emoji 🤖👍🏽 and flags 🇫🇷 split into byte tokens",
    "combining e\u0301 (decomposed) and \u00e9 (composed)",
    "tabs\tand\r\nwindows line ends",
    "<|im_end|> inside content <|im_start|>",
]


@pytest.fixture(scope="module")
def tok() -> Any:
    return make_tokenizer(chat_template=CHATML_GENERATION)


def _random_spans(rng: random.Random, n: int) -> list[tuple[int, int]]:
    spans = []
    for _ in range(rng.randint(1, 3)):
        a = rng.randrange(n)
        spans.append((a, rng.randint(a, n)))  # empty spans included: they train nothing
    return spans


def test_locator_finds_the_tokens_offsets_find(tok: Any) -> None:
    # any span, starting or ending anywhere (inside multi-byte characters' tokens, on spaces)
    backend = tok.backend_tokenizer
    locator = _build(backend)
    assert locator is not None
    rng = random.Random(0)
    checked = 0
    for text in TRICKY + [json.dumps(row) for row in conversations(20, seed=3)]:
        fast = backend.encode_batch_fast([text], add_special_tokens=False)[0]
        slow = backend.encode_batch([text], add_special_tokens=False)[0]
        assert fast.ids == slow.ids
        for _ in range(50):
            spans = _random_spans(rng, len(text))
            assert locator.ranges(text, fast.ids, spans) == offset_ranges(slow, spans), (text, spans)
            checked += 1
    assert checked == 50 * (len(TRICKY) + 20)


def _tokenizer(**parts: Any) -> Any:
    """The test tokenizer with some components replaced."""
    tok = make_tokenizer(chat_template=CHATML_GENERATION)
    backend = tok.backend_tokenizer
    for name, value in parts.items():
        setattr(backend, name, value)
    return backend


def test_only_text_preserving_byte_level_tokenizers_skip_offsets() -> None:
    from tokenizers import AddedToken, normalizers, pre_tokenizers, processors

    assert _build(_tokenizer()) is not None
    assert _build(_tokenizer(normalizer=normalizers.NFC())).nfc
    # tokenizers that change the text or the offsets: located through offsets
    assert _build(_tokenizer(normalizer=normalizers.Lowercase())) is None
    assert _build(_tokenizer(pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=True))) is None
    assert _build(_tokenizer(pre_tokenizer=pre_tokenizers.Metaspace())) is None
    assert _build(_tokenizer(pre_tokenizer=pre_tokenizers.Whitespace())) is None
    assert _build(_tokenizer(post_processor=processors.ByteLevel(trim_offsets=True))) is None
    bytes_only = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    split = pre_tokenizers.Sequence([pre_tokenizers.Split(r"\d", behavior="isolated"), bytes_only])
    assert _build(_tokenizer(pre_tokenizer=split)) is not None  # Llama 3 / Qwen style
    dropping = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", behavior="removed"), bytes_only])
    assert _build(_tokenizer(pre_tokenizer=dropping)) is None
    stripping = _tokenizer()
    stripping.add_special_tokens([AddedToken("<|eot|>", rstrip=True)])
    assert _build(stripping) is None


def test_nfc_tokenizer_takes_offsets_for_text_it_would_change() -> None:
    from tokenizers import normalizers

    backend = _tokenizer(normalizer=normalizers.NFC())
    locator = _build(backend)
    composed, decomposed = "caf\u00e9 au lait", "cafe\u0301 au lait"
    ids = backend.encode_batch_fast([composed], add_special_tokens=False)[0].ids
    assert locator.ranges(composed, ids, [(0, 4)]) == offset_ranges(
        backend.encode_batch([composed], add_special_tokens=False)[0], [(0, 4)])
    ids = backend.encode_batch_fast([decomposed], add_special_tokens=False)[0].ids
    assert locator.ranges(decomposed, ids, [(0, 5)]) is None  # normalising changes it: offsets decide


class _Counting:
    """A tokenizers.Tokenizer stand-in that counts the rows each encode method received."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.rows = {"encode_batch": 0, "encode_batch_fast": 0}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if name in self.rows:
            def counted(texts: list[str], **kwargs: Any) -> Any:
                self.rows[name] += len(texts)
                return attr(texts, **kwargs)
            return counted
        return attr


class _Tok:
    def __init__(self, tok: Any) -> None:
        self.backend_tokenizer = _Counting(tok.backend_tokenizer)
        self.chat_template = tok.chat_template
        self.special_tokens_map = tok.special_tokens_map


def _rows() -> list[dict[str, Any]]:
    rows = conversations(300, seed=5)
    for k, text in enumerate(TRICKY):  # non-ASCII and odd whitespace in trained and untrained turns
        rows[k * 7]["messages"][-1]["content"] += " " + text
        rows[k * 7 + 1]["messages"][0]["content"] = text
    return rows


@pytest.mark.parametrize("template", [CHATML_GENERATION, CHATML])
def test_byte_level_tokenizer_is_encoded_without_offsets(template: str) -> None:
    # issue 18: character offsets cost ~16 % of the encode; only the first rows are cross-checked with them
    tok = make_tokenizer(chat_template=template)
    counting = _Tok(tok)
    rows = _rows()
    out, stats = tokenize_chat(rows, counting, None)
    rows_in = counting.backend_tokenizer.rows
    assert rows_in["encode_batch_fast"] == len(rows)
    assert rows_in["encode_batch"] <= ByteLocator.VERIFY_ROWS
    # the same samples as through offsets
    reference, reference_stats = _offsets_only(rows, tok)
    assert out == reference
    assert stats.trained_tokens == reference_stats.trained_tokens > 0


def _offsets_only(rows: list[dict[str, Any]], tok: Any, **kwargs: Any) -> Any:
    original = tokenize_module.byte_locator
    tokenize_module.byte_locator = lambda backend: None
    try:
        return tokenize_chat(rows, tok, **{"max_seq_len": None, **kwargs})
    finally:
        tokenize_module.byte_locator = original


@pytest.mark.parametrize("kwargs", [{"max_seq_len": 40}, {"max_seq_len": 40, "overlong": "drop"}, {"unmask": True}])
def test_policies_give_the_same_samples_without_offsets(tok: Any, kwargs: dict[str, Any]) -> None:
    rows = _rows()
    assert tokenize_chat(rows, tok, **{"max_seq_len": None, **kwargs}) == _offsets_only(rows, tok, **kwargs)


def test_a_locator_that_disagrees_with_offsets_is_dropped(tok: Any, monkeypatch: Any) -> None:
    # the safety net: a cross-check that fails switches the tokenizer to offsets for good
    reference = _offsets_only(_rows(), tok)
    locator = byte_locator(tok.backend_tokenizer)
    assert locator is not None and not locator.disabled
    monkeypatch.setattr(locator, "verified", False)
    monkeypatch.setattr(ByteLocator, "ranges", lambda self, text, ids, spans: [(0, 1)])  # wrong on purpose
    try:
        assert tokenize_chat(_rows(), tok, None) == reference
        assert locator.disabled and byte_locator(tok.backend_tokenizer) is None
    finally:
        locator.disabled = False


def test_compact_samples_are_written_as_labels_lists_would_be() -> None:
    rng = random.Random(1)
    samples = []
    for _ in range(300):
        n = rng.randint(1, 40)
        ids = [rng.randrange(1000) for _ in range(n)]
        cuts = sorted(rng.sample(range(n + 1), k=2 * rng.randint(0, min(3, (n + 1) // 2))))
        ranges = [(cuts[k], cuts[k + 1]) for k in range(0, len(cuts), 2) if cuts[k] < cuts[k + 1]]
        if not ranges and rng.random() < 0.5:
            ranges = None  # every token trained
        elif not ranges:
            ranges = [(0, n)]
        samples.append((ids, ranges))
    compact, lists = io.StringIO(), io.StringIO()
    _write_jsonl(compact, samples)
    _write_jsonl(lists, [{"input_ids": ids, "labels": expand_labels(ids, ranges)} for ids, ranges in samples])
    assert compact.getvalue() == lists.getvalue()
    first = json.loads(compact.getvalue().splitlines()[0])
    assert first["len"] == len(first["input_ids"]) == len(first["labels"])


def test_encode_chat_ranges_expand_to_tokenize_chat_labels(tok: Any) -> None:
    rows = _rows()[:50]
    compact, _ = encode_chat(rows, tok, None)
    full, _ = tokenize_chat(rows, tok, None)
    assert [{"input_ids": ids, "labels": expand_labels(ids, ranges)} for ids, ranges in compact] == full
