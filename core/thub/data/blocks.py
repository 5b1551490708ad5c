"""Pretraining blocks: documents tokenized, joined with EOS and cut into fixed-size blocks.

For backends whose library takes ``input_ids``/``labels`` rows (TRL, unsloth): one definition of
how thub turns ``{"document"}`` rows into causal-LM blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pretraining_blocks(rows: Sequence[dict[str, Any]], tokenizer: Any, block_size: int) -> list[dict[str, Any]]:
    """``{"input_ids", "labels"}`` blocks of ``block_size`` tokens from ``{"document"}`` rows.

    Each document is tokenized without special tokens and followed by the tokenizer's EOS; the
    stream is cut into blocks and the incomplete tail is dropped. Labels equal the inputs (every
    token is trained). Raises ValueError when the documents hold less than one block.
    """
    from thub.data.tokenize import rust_tokenizer

    # the Rust tokenizer: the same ids as transformers' tokenizer(...), and thub's light one has it too
    encoded = [e.ids for e in rust_tokenizer(tokenizer).encode_batch([row["document"] for row in rows],
                                                                     add_special_tokens=False)]
    stream: list[int] = []
    for ids in encoded:
        stream.extend(ids)
        stream.append(tokenizer.eos_token_id)
    blocks = [stream[i : i + block_size] for i in range(0, len(stream) - block_size + 1, block_size)]
    if not blocks:
        raise ValueError(f"the documents hold {len(stream)} tokens, fewer than one block of {block_size}")
    return [{"input_ids": block, "labels": list(block)} for block in blocks]
