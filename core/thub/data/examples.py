"""The supervised examples thub trains from validated rows, for a backend that hands its library
token ids (``input_ids`` + ``labels``) instead of conversations: one function, so every such
backend builds them alike and reports the same lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thub.errors import UsageError


def supervised_examples(rows: Sequence[dict[str, Any]], locations: Sequence[str], tokenizer: Any, *,
                        max_seq_len: int | None, overlong: str = "truncate", unmask: bool = False,
                        block_size: int | None = None) -> tuple[list[dict[str, list[int]]], list[str]]:
    """``{"input_ids", "labels"}`` per example as thub trains ``rows``, and thub's report lines.

    * ``block_size`` given (continued pretraining): documents joined with EOS into full blocks
      (:func:`thub.data.blocks.pretraining_blocks`);
    * already tokenized rows: kept under the ``overlong`` policy
      (:func:`thub.data.expected.processed_samples`);
    * chat rows: the model's chat template and thub's masks, ``unmask`` training every token, each
      cut or dropped row counted (:func:`thub.data.tokenize.tokenize_chat`).

    The lines (``thub: prepared ...`` and one ``thub: WARNING: ...`` per problem counted) are for
    the run's log; a block size the documents cannot fill is a :class:`UsageError`.
    """
    from thub.data.blocks import pretraining_blocks
    from thub.data.expected import processed_samples
    from thub.data.tokenize import tokenize_chat

    if block_size is not None:
        try:
            blocks = pretraining_blocks(rows, tokenizer, block_size)
        except ValueError as exc:
            raise UsageError(f"block_size: {exc}") from None
        return blocks, [f"thub: prepared {len(blocks)} blocks of {block_size} tokens from {len(rows)} documents"]
    if rows and "input_ids" in rows[0]:
        samples, _origin = processed_samples(rows, max_seq_len, overlong, locations)
        return samples, [f"thub: prepared {len(samples)} of {len(rows)} pre-tokenized samples"]
    samples, stats = tokenize_chat(rows, tokenizer, max_seq_len, unmask=unmask, overlong=overlong,
                                   locations=locations)
    lines = [f"thub: prepared {len(samples)} of {len(rows)} samples (the model's chat template, thub's masks)"]
    return samples, lines + [f"thub: WARNING: {warning}" for warning in stats.warnings()]
