"""A saved fast tokenizer without importing transformers: what data preparation uses of it.

``thub data prepare`` needs only the Rust tokenizer (``tokenizer.json``, read by the
``tokenizers`` library), the chat template and the special tokens. Importing transformers to get
them costs about a second of CPU per process (it indexes its whole package at import), which on
the benchmark workload is ~8 % of the work (docs/performance.md). For a tokenizer saved with a
generic class (``PreTrainedTokenizerFast``/``TokenizersBackend``: nothing is rewritten on load) this
loads exactly those three things the way transformers 5 does for a local directory: the chat
template and special tokens through :mod:`thub.data.saved_template` (the one reader of saved
templates), the vocabulary through ``tokenizers``. Anything unusual (remote code,
an ``auto_map``, a missing file) returns None and the caller falls back to transformers;
tests/test_data_tokenize.py checks both give the same prepared data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GENERIC_CLASSES = (None, "PreTrainedTokenizerFast", "TokenizersBackend")


class LightTokenizer:
    """The parts of a ``PreTrainedTokenizerFast`` that thub's data preparation reads."""

    def __init__(self, backend: Any, chat_template: str | dict[str, str] | None, special: dict[str, Any]) -> None:
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self.special_tokens_map = special
        eos = special.get("eos_token")
        self.eos_token_id = backend.token_to_id(eos) if isinstance(eos, str) else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load_light(model_dir: Path) -> LightTokenizer | None:
    """The tokenizer saved in ``model_dir``, or None when only transformers can load it faithfully."""
    tokenizer_json, config_json = model_dir / "tokenizer.json", model_dir / "tokenizer_config.json"
    if not tokenizer_json.is_file() or not config_json.is_file():
        return None
    try:
        config = _read_json(config_json)
        if not isinstance(config, dict) or "auto_map" in config:
            return None
        if config.get("tokenizer_class") not in GENERIC_CLASSES:
            return None  # a model-specific class may rewrite the post-processor (BOS/EOS) on load
        from tokenizers import Tokenizer

        from thub.data.saved_template import read_chat_template, read_special_tokens

        return LightTokenizer(Tokenizer.from_file(str(tokenizer_json)), read_chat_template(model_dir),
                              read_special_tokens(model_dir))
    except Exception:  # noqa: BLE001 - anything unexpected: transformers loads it (and explains)
        return None
