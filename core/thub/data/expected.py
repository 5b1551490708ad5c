"""What thub validated a run to train, per example: tokens, trained tokens and a hash of its mask.

The parent computes it once per run, with the model's tokenizer and thub's own masks (the ones
``thub data preview`` shows), under the run's ``overlong`` policy, and keeps it beside the
validated rows (``RUN_DIR/thub_data/expected.json``, keyed like them). The training child
compares what the library actually built (:mod:`thub.runner.built`) with it before step 1.

A mask hash is computed the same way on both sides (:func:`mask_hash`) from an example's labels
(the token id where trained, -100 where not, padding removed), so it says which tokens are
trained at which position: two libraries that train the same tokens of the same text agree.
Trained tokens are those that get a loss: the first label of an example never does (a causal LM
predicts each token from the ones before it), so it is not counted on either side.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thub.data.tokenize import IGNORE
from thub.errors import UsageError

EXPECTED_FILE = "expected.json"
VERSION = 1
# the parameters that decide which tokens thub trains (with the rows' own key and the tokenizer)
_SETTINGS = ("model_path", "max_seq_len", "overlong", "unmask_messages", "is_pretraining", "block_size")


def _with_loss(labels: Sequence[int]) -> list[int]:
    """``labels`` as a causal LM uses them: the first is never predicted (nothing comes before it),
    so it counts as masked whatever the library wrote there (a padding-free collator masks it)."""
    return [IGNORE, *labels[1:]] if len(labels) else []


def mask_hash(labels: Sequence[int]) -> str:
    """A short hash of one example's labels (token ids where trained, -100 elsewhere; unshifted,
    as Hugging Face models take them: ``labels[i]`` is the token at position ``i``)."""
    return hashlib.blake2b(array("q", _with_loss(labels)).tobytes(), digest_size=8).hexdigest()


def trained_count(labels: Sequence[int]) -> int:
    """How many tokens of an example get a loss: labels not -100, the first one left out."""
    return max(0, len(labels) - 1 - list(labels[1:]).count(IGNORE))


def expected_key(params: Mapping[str, Any], data_key: str) -> str:
    """The key of a run's expected counts: its rows' key, the masking settings and the tokenizer files."""
    digest = hashlib.sha256(f"thub-expected-{VERSION}\0{data_key}".encode())
    digest.update(json.dumps({name: params.get(name) for name in _SETTINGS}, sort_keys=True, default=str).encode())
    model = Path(str(params.get("model_path") or ""))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        try:
            stat = (model / name).stat()
            digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        except OSError:
            continue
    return digest.hexdigest()


def processed_samples(rows: Sequence[Mapping[str, Any]], max_seq_len: int | None, overlong: str,
                      locations: Sequence[str]) -> tuple[list[dict[str, list[int]]], list[int]]:
    """Already tokenized ``{"input_ids", "labels"}`` rows under the ``overlong`` policy, as thub
    trains them: cut (``truncate``), left out (``drop``) or refused (``error``) past ``max_seq_len``;
    a row left without a trained token is left out. Returns the samples and their row indices."""
    samples: list[dict[str, list[int]]] = []
    origin: list[int] = []
    too_long: list[str] = []
    for i, row in enumerate(rows):
        ids, labels = list(row["input_ids"]), list(row["labels"])
        if max_seq_len is not None and len(ids) > max_seq_len:
            if overlong == "error":
                too_long.append(f"{locations[i]} ({len(ids)} tokens)")
                continue
            if overlong == "drop":
                continue
            ids, labels = ids[:max_seq_len], labels[:max_seq_len]
        if trained_count(labels):
            samples.append({"input_ids": ids, "labels": labels})
            origin.append(i)
    if too_long:
        raise UsageError(f"{len(too_long)} sample(s) longer than max_seq_len={max_seq_len} tokens: "
                         f"{', '.join(too_long[:5])} (use overlong=truncate or drop, or raise max_seq_len)")
    return samples, origin


def expected_counts(params: Mapping[str, Any], rows: Sequence[dict[str, Any]], locations: Sequence[str],
                    kind: str, tokenizer: Any) -> dict[str, Any] | None:
    """Per example: the row it comes from, its tokens, trained tokens and mask hash, as thub
    trains ``rows``, from the data kind's ``expected`` function; None for data thub does not
    tokenize itself (that function's None, e.g. documents outside pretraining).

    A kind without an ``expected`` function (GRPO prompts: no mask) expects only the number of
    examples.
    """
    from thub.data.kinds import kind_spec, loaded

    spec = kind_spec(kind)
    if spec.expected is None:
        return {"examples": len(rows), "per_example": None}
    built = loaded(spec.expected)(params, rows, locations, tokenizer)
    if built is None:
        return None
    if isinstance(built, int):  # how many examples, no masks to compare (e.g. preference pairs)
        return {"examples": built, "per_example": None}
    samples, origin = built
    trained = [trained_count(labels) for _ids, labels in samples]
    tokens = [len(ids) for ids, _labels in samples]
    return {"examples": len(samples), "tokens": sum(tokens), "trained_tokens": sum(trained),
            "per_example": {"rows": list(origin), "tokens": tokens, "trained": trained,
                            "hashes": [mask_hash(labels) for _ids, labels in samples]}}


def save_expected(params: Mapping[str, Any], data: Any, directory: str | Path) -> dict[str, Any] | None:
    """Compute the expected counts of ``data`` (a :class:`thub.data.training.TrainingData`) and keep
    them in ``directory`` (atomically), unless counts with the same key are kept there already.

    A tokenizer that cannot be loaded here (no local files), or data thub cannot mask (a chat
    template it refuses, ``overlong: error`` with an overlong row), keeps nothing: the run then
    records what the library built without comparing it.
    """
    key = expected_key(params, data.key)
    kept = load_expected(directory, key)
    if kept is not None:
        return kept
    from thub.data.kinds import kind_spec

    if kind_spec(data.kind).expected is None:  # examples only: no tokenizer needed
        counts = expected_counts(params, data.rows, data.locations, data.kind, None)
    else:
        from thub.data.prepare import load_tokenizer

        try:
            tokenizer = load_tokenizer(str(params["model_path"]),
                                       trust_remote_code=bool(params.get("trust_remote_code")))
        except Exception:  # noqa: BLE001 - e.g. a hub id without network: nothing to compare against
            return None
        try:
            counts = expected_counts(params, data.rows, data.locations, data.kind, tokenizer)
        except UsageError:
            # thub cannot build its masks here (a template it cannot render, overlong=error): the
            # backend's own preparation reports that as it always did; nothing to compare against
            return None
    if counts is None:
        return None
    from thub.fileio import write_text_atomic

    counts = {"version": VERSION, "key": key, **counts}
    write_text_atomic(Path(directory) / EXPECTED_FILE, json.dumps(counts), parents=True)
    return counts


def load_expected(directory: str | Path, key: str | None = None) -> dict[str, Any] | None:
    """The expected counts kept in ``directory`` (with ``key``, when given), or None."""
    try:
        counts = json.loads((Path(directory) / EXPECTED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(counts, dict) or counts.get("version") != VERSION:
        return None
    if key is not None and counts.get("key") != key:
        return None
    return counts
