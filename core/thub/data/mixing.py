"""Mixing several datasets: ``concat``, ``interleave_under``, ``interleave_over``.

Semantics follow LLaMA-Factory's ``mix_strategy`` (which wraps ``datasets.interleave_datasets``):

* ``concat``: every row of every source, in order (the trainer shuffles later); probabilities
  are an error here, as in LLaMA-Factory, rather than silently ignored;
* ``interleave_under``: draw a source per row by probability and stop as soon as one source is
  exhausted; without probabilities, whole round-robin rounds up to the smallest source. The mix
  undersamples the big sources;
* ``interleave_over``: keep drawing, restarting exhausted sources, until every source has been
  seen completely at least once; without probabilities, rounds up to the largest source. The mix
  oversamples the small sources.

The draw is a plain ``random.Random(seed)``, so a mix is reproducible from its seed, and no
``datasets`` import (seconds) is needed to build it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from thub.data.formats import DatasetSource
from thub.data.loading import LoadedSource, load_sources
from thub.errors import UsageError

STRATEGIES = ("concat", "interleave_under", "interleave_over")


def _weights(loaded: Sequence[LoadedSource], strategy: str,
             probabilities: Sequence[float] | None) -> list[float] | None:
    if probabilities is None and any(item.source.probability is not None for item in loaded):
        probabilities = [item.source.probability if item.source.probability is not None else 0.0 for item in loaded]
    if probabilities is None:
        return None
    if strategy == "concat":
        raise UsageError("probabilities: expected none with mix strategy 'concat' (they only weight "
                         f"interleave_under/interleave_over), found {list(probabilities)}")
    if len(probabilities) != len(loaded):
        raise UsageError(f"probabilities: expected {len(loaded)} values (one per dataset), found {len(probabilities)}")
    if any(p < 0 for p in probabilities) or sum(probabilities) <= 0:
        raise UsageError("probabilities: expected non-negative values with a positive sum, "
                         f"found {list(probabilities)}")
    total = float(sum(probabilities))
    return [p / total for p in probabilities]


def mix_loaded(loaded: Sequence[LoadedSource], strategy: str = "concat", probabilities: Sequence[float] | None = None,
               seed: int = 42) -> tuple[list[dict[str, Any]], list[str]]:
    """Mix already loaded sources; returns (rows, locations) so reports still point at files."""
    if strategy not in STRATEGIES:
        raise UsageError(f"mix strategy: expected one of {', '.join(STRATEGIES)}, found {strategy!r}")
    weights = _weights(loaded, strategy, probabilities)
    if strategy == "concat" or len(loaded) == 1:
        return [row for item in loaded for row in item.rows], [loc for item in loaded for loc in item.locations]
    sizes = [len(item.rows) for item in loaded]
    active = [i for i, size in enumerate(sizes) if size and (weights is None or weights[i] > 0)]
    if not active:
        return [], []
    rows: list[dict[str, Any]] = []
    locations: list[str] = []
    over = strategy == "interleave_over"
    if weights is None:
        # Round-robin in whole rounds, as datasets.interleave_datasets does: up to the smallest
        # source (under) or the largest one, cycling the others (over).
        rounds = max(sizes[i] for i in active) if over else min(sizes[i] for i in active)
        for k in range(rounds):
            for i in active:
                rows.append(loaded[i].rows[k % sizes[i]])
                locations.append(loaded[i].locations[k % sizes[i]])
        return rows, locations
    rng = random.Random(seed)
    pointer = [0] * len(loaded)
    exhausted: set[int] = set()
    active_weights = [weights[k] for k in active]
    while True:
        i = rng.choices(active, weights=active_weights)[0]
        if pointer[i] == sizes[i]:
            pointer[i] = 0  # oversample: start this source again
        rows.append(loaded[i].rows[pointer[i]])
        locations.append(loaded[i].locations[pointer[i]])
        pointer[i] += 1
        if pointer[i] == sizes[i]:
            exhausted.add(i)
            if not over or exhausted.issuperset(active):
                break  # under: the first exhausted source ends the mix; over: the last one does
    return rows, locations


def mix(sources: Sequence[DatasetSource], strategy: str = "concat", probabilities: Sequence[float] | None = None,
        seed: int = 42) -> list[dict[str, Any]]:
    """Load, validate and mix datasets; returns canonical rows (see :mod:`thub.data.formats`).

    Each :class:`DatasetSource` carries its own path, format and ShareGPT tags (``role_tag``,
    ``content_tag``, ``role_map``, ``messages_key``), so mixed-schema mixes read every source
    right. ``probabilities`` (or each source's ``probability``) weight the interleave strategies;
    the same ``seed`` gives the same mix. Sources must yield one kind of row (all chat, all
    documents, ...). Bad data raises :class:`thub.errors.UsageError` with file:line messages.
    """
    if not sources:
        raise UsageError("datasets: expected at least one dataset, found none")
    rows, _ = mix_loaded(load_sources(list(sources)), strategy, probabilities, seed)
    return rows
