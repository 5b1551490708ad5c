"""Measured, not assumed: what the library actually built, compared before step 1.

A runner reports the examples its library built (each one's labels as the library will train
them) with :meth:`thub.runner.context.RunContext.report_built`; for libraries built on
``transformers.Trainer`` thub's metrics callback does it at ``on_train_begin`` from the Trainer's
own dataset and data collator (:func:`collated_labels`). thub compares them with what it
validated (:mod:`thub.data.expected`): other examples, or other trained tokens in one (their
mask hashes differ), stop the run (:class:`DataMismatch`, exit 2) naming the first affected
``file:line``, unless the run sets ``allow_data_mismatch``. Either way ``RUN_DIR/built.json`` keeps the measurement (its
summary goes into ``result.json`` as ``built``, the per-example mask hashes feed ``thub compare``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from thub.data.expected import mask_hash, trained_count
from thub.errors import UsageError

if TYPE_CHECKING:
    from thub.runner.context import RunContext

BUILT_FILE = "built.json"
CHUNK = 64  # examples collated at once while measuring (each split back by its attention mask)
SUMMARY_FIELDS = ("by", "examples", "tokens", "trained_tokens", "samples_per_step", "expected", "matches",
                  "masks_equal", "difference", "first_location", "reason", "allowed")


class DataMismatch(UsageError):
    """The library built other examples or trained tokens than thub validated (exit 2)."""


def _flat(value: Any) -> list[int]:
    """A tensor, array or list of one example (batch of one) as a flat list of ints."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    while isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    return [int(v) for v in value]


def _rows(value: Any) -> int:
    """How many rows a collated ``labels`` of one example has (1 for a flat list or one row)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) == 2 else 1
    return len(value) if isinstance(value, list) and value and isinstance(value[0], list) else 1


def collated_labels(dataset: Iterable[Any], collate_fn: Any) -> Iterator[list[int]] | None:
    """Each example of ``dataset`` put through the library's own ``collate_fn``: its labels,
    padding removed (where the batch has an ``attention_mask``), exactly as the library trains them.
    Examples are collated :data:`CHUNK` at a time and split back by the attention mask (the same
    labels as one at a time, at a fraction of the cost); a collator without an attention mask, or
    one that joins the examples into one row (padding-free), gets one example at a time.

    None when the collator yields no ``labels`` (GRPO's prompts: nothing is masked before
    generation), or more than one row of them per example (LLaMA-Factory's pairwise DPO
    collator: a chosen and a rejected row); then only the examples are counted.
    """
    iterator = iter(dataset)
    try:
        first = next(iterator)
    except StopIteration:
        return iter(())
    probe = collate_fn([first])
    if not isinstance(probe, Mapping) or probe.get("labels") is None:
        return None
    if _rows(probe["labels"]) > 1:  # a pairwise collator (chosen and rejected rows per example): counted only
        return None

    def labels_of(batch: Mapping[str, Any]) -> list[int]:
        labels = _flat(batch["labels"])
        mask = batch.get("attention_mask")
        if mask is None:
            return labels
        return [label for label, keep in zip(labels, _flat(mask), strict=False) if keep]

    def rows_of(batch: Any, size: int) -> list[list[int]] | None:
        """A batch of ``size`` examples split back into each one's labels, where it can be: one
        row per example and an attention mask telling padding from masked tokens."""
        if not isinstance(batch, Mapping) or batch.get("attention_mask") is None or batch.get("labels") is None:
            return None
        labels, mask = batch["labels"], batch["attention_mask"]
        if len(labels) != size or len(mask) != size:
            return None  # a padding-free collator joins the examples: one at a time
        if hasattr(labels, "shape") and hasattr(mask, "bool"):  # tensors: select on the tensor, convert once
            keep = mask.bool()
            return [labels[i][keep[i]].tolist() for i in range(size)]
        return [[int(x) for x, kept in zip(row, keep_row, strict=False) if kept]
                for row, keep_row in zip(labels, mask, strict=True)]

    def each() -> Iterator[list[int]]:
        yield labels_of(probe)
        batched = probe.get("attention_mask") is not None  # else one example at a time
        while True:
            chunk = list(itertools.islice(iterator, CHUNK if batched else 1))
            if not chunk:
                return
            rows = rows_of(collate_fn(chunk), len(chunk)) if batched else None
            if rows is None:
                batched = False
                rows = [labels_of(collate_fn([example])) for example in chunk]
            yield from rows

    return each()


def held_out(params: Mapping[str, Any], examples: int) -> int:
    """How many examples ``validation_split`` holds out of ``examples`` (as ``train_test_split`` does);
    0 with ``validation_data_path`` (the held-out rows are another file: every training row is trained)."""
    split = params.get("validation_split") or 0
    if not split:
        return 0
    return int(split) if split >= 1 else math.ceil(split * examples)


def _where(expected: Mapping[str, Any], index: int, locations: Sequence[str]) -> str:
    rows = expected["per_example"]["rows"]
    row = rows[index] if index < len(rows) else -1
    return locations[row] if 0 <= row < len(locations) else f"example {index + 1} (a pretraining block)"


def compare_built(measured: Mapping[str, Any], expected: Mapping[str, Any] | None, params: Mapping[str, Any],
                  locations: Sequence[str]) -> dict[str, Any]:
    """``matches`` (None: nothing to compare against), ``masks_equal``, ``difference`` (one
    sentence) and ``first_location`` (the first validated example the library does not train as
    thub does) of a measurement against thub's expected counts."""
    if expected is None:
        return {"matches": None, "masks_equal": None, "difference": None, "first_location": None}
    exp_n, got_n = int(expected["examples"]), int(measured["examples"])
    out_n = held_out(params, exp_n)
    ours, theirs = expected.get("per_example"), measured.get("per_example")
    if params.get("packing") and ours and theirs:
        # packed sequences are not the validated examples: the totals must agree
        same = measured["trained_tokens"] == expected["trained_tokens"] or out_n > 0
        return {"matches": same, "masks_equal": None, "first_location": None,
                "difference": None if same else (f"trains {measured['trained_tokens']} tokens in {got_n} packed "
                                                 f"sequences; thub validated {expected['trained_tokens']}")}
    if not ours or not theirs:
        same = got_n == exp_n - out_n
        return {"matches": same, "masks_equal": None, "first_location": None,
                "difference": None if same else f"builds {got_n} examples; thub validated {exp_n - out_n}"}
    left = Counter(theirs["hashes"])
    unmatched = []
    for i, digest in enumerate(ours["hashes"]):
        if left[digest]:
            left[digest] -= 1
        else:
            unmatched.append(i)
    extra = sum(left.values())
    masks_equal = extra == 0 and len(unmatched) == out_n
    count_left = Counter(theirs["trained"])
    for trained in ours["trained"]:
        if count_left[trained]:
            count_left[trained] -= 1
    same = sum(count_left.values()) == 0 and got_n == exp_n - out_n
    # other tokens trained with the same counts is a difference too: the masks must agree
    result: dict[str, Any] = {"matches": masks_equal, "masks_equal": masks_equal, "difference": None,
                              "first_location": None}
    if masks_equal:
        return result
    first = unmatched[0] if unmatched else None
    if first is not None:
        result["first_location"] = _where(expected, first, locations)
    if got_n != exp_n - out_n:
        text = f"builds {got_n} examples; thub validated {exp_n - out_n}"
    elif not same:
        text = f"trains {measured['trained_tokens']} tokens; thub validated {expected['trained_tokens']}"
    else:
        text = "trains the same number of tokens per example, but other tokens (the masks differ)"
    if first is not None:
        text += f"; first affected: {result['first_location']} ({ours['trained'][first]} trained tokens in thub's mask)"
    elif extra:  # every validated example is there, and more: name the library's first extra one
        wanted, index = Counter(ours["hashes"]), 0
        for position, digest in enumerate(theirs["hashes"]):
            if not wanted[digest]:
                index = position
                break
            wanted[digest] -= 1
        text += (f"; the library's example {index + 1} ({theirs['trained'][index]} trained tokens) is none of the "
                 "validated ones")
    result["difference"] = text
    return result


def report_built(context: RunContext, labels: Iterable[Sequence[int]] | None = None, *, examples: int | None = None,
                 by: str, reason: str | None = None, samples_per_step: int | None = None) -> dict[str, Any]:
    """Record what the library built and compare it with what thub validated (see the module doc).

    ``labels``: one entry per example the library will train on, its labels as the library
    built them (the token id where trained, -100 where not, no padding). Without labels (a
    library that masks nothing before training, GRPO), give ``examples``. ``by`` names what was
    measured (``"trl 1.16.0 SFTTrainer collator"``); ``reason`` is the library's own word on a
    difference, when known (``"LLaMA-Factory's converter skips consecutive user turns"``);
    ``samples_per_step`` the examples per optimizer step the library itself uses (for
    ``thub compare``).

    Writes ``RUN_DIR/built.json`` and returns its summary; raises :class:`DataMismatch` on a
    mismatch unless the run sets ``allow_data_mismatch``. Call it on the main process, before
    the first optimizer step.
    """
    from thub.data.expected import expected_key, load_expected
    from thub.data.training import DATA_DIR
    from thub.fileio import write_text_atomic

    measured: dict[str, Any] = {"by": by, "samples_per_step": samples_per_step}
    if labels is not None:
        trained, tokens, hashes = [], [], []
        for example in labels:
            example = list(example)
            trained.append(trained_count(example))
            tokens.append(len(example))
            hashes.append(mask_hash(example))
        measured.update(examples=len(hashes), tokens=sum(tokens), trained_tokens=sum(trained),
                        per_example={"tokens": tokens, "trained": trained, "hashes": hashes})
    else:
        if examples is None:
            raise TypeError("report_built needs labels or examples")
        measured.update(examples=int(examples), tokens=None, trained_tokens=None, per_example=None)
    data = context.data()
    directory = context.run_dir.path / DATA_DIR
    expected = load_expected(directory, expected_key(context.params, data.key))
    if expected is None:  # the parent kept none for this data (changed since, or no tokenizer there)
        from thub.data.expected import save_expected

        expected = save_expected(context.params, data, directory)
    comparison = compare_built(measured, expected, context.params, data.locations)
    allowed = bool(context.params.get("allow_data_mismatch"))
    report = {
        **measured,
        "expected": None if expected is None else {k: expected.get(k) for k in ("examples", "tokens",
                                                                              "trained_tokens")},
        **comparison,
        "reason": reason,
        "allowed": allowed,
        "refused": comparison["matches"] is False and not allowed,
    }
    if report["refused"]:
        report["message"] = mismatch_message(context.backend, report)
    write_text_atomic(context.run_dir.path / BUILT_FILE, json.dumps(report))
    line = summary_line(report)
    print(f"thub: {line}", flush=True)
    if report["refused"]:
        raise DataMismatch(report["message"])
    return {k: report.get(k) for k in SUMMARY_FIELDS}


def mismatch_message(backend: str, report: Mapping[str, Any]) -> str:
    """The error of a run stopped for a data mismatch: backend, what differs, the library's reason."""
    text = f"backend {backend} {report['difference']}"
    if report.get("reason"):
        text += f" (the library: {report['reason']})"
    return (text + ". Stopped before step 1 (`thub data preview` shows what thub trains of each row); set "
            "allow_data_mismatch: true to train anyway")


def summary_line(report: Mapping[str, Any]) -> str:
    """``built by trl ...: 5 examples, 812 tokens, 240 trained (as validated)`` for logs and the summary."""
    counts = f"{report['examples']} examples"
    if report.get("tokens") is not None:
        counts += f", {report['tokens']} tokens, {report['trained_tokens']} trained"
    verdict = {None: "not compared", True: "as validated"}.get(report.get("matches"), "DIFFERENT from validated")
    return f"built by {report['by']}: {counts} ({verdict})"


def read_built(run_path: Any) -> dict[str, Any] | None:
    """The measurement a run recorded (``built.json``), or None."""
    from pathlib import Path

    try:
        report = json.loads((Path(run_path) / BUILT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None
