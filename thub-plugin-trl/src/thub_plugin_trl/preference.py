"""Preference rows (``dpo`` pairs, ``kto`` answers) -> the token ids TRL's DPOTrainer/KTOTrainer train on.

thub tokenizes the rows, not TRL's dataset preparation: TRL 1.16 tokenizes them after putting them
in an Arrow dataset, whose schema unification gives every row's tool-call arguments the argument
names of every other row (``{"a": 2, "b": 2, "city": None}``), so the chat template renders text the row
does not hold. Here each plain row is tokenized with TRL's own helpers, as its trainers do
(``_tokenize``: the chat template, with the generation prompt for the prompt alone;
``common_prefix_length``: where the answer starts), the ``overlong`` policy is applied (every cut
or dropped row counted and reported, ``error`` refused with ``file:line`` before the model is
loaded), and TRL gets the ids; its dataset preparation passes them through (:func:`pretokenized`).

Heavy imports (trl, datasets) happen inside the functions: the module is imported in the
training child only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from thub.backend import UsageError

#: the answer columns of each data mode (the plan's ``data.mode``)
ANSWERS = {"pairs": ("chosen", "rejected"), "unpaired": ("completion",)}


@dataclass
class PreferenceStats:
    """What tokenizing the preference rows did: never silent about a cut or dropped row."""

    noun: str  # "pairs" or "answers"
    rows_in: int = 0
    rows_out: int = 0
    truncated: int = 0  # over max_seq_len, cut by TRL's collator at max_length (overlong=truncate)
    dropped_overlong: int = 0  # over max_seq_len, left out (overlong=drop)
    dropped_prompt_fills: int = 0  # the prompt alone fills max_seq_len: no answer token would be trained
    prompt_not_prefix: int = 0  # the template renders the prompt alone differently (TRL's warning)
    first: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, where: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        bucket = self.first.setdefault(kind, [])
        if len(bucket) < 3:
            bucket.append(where)

    def warnings(self) -> list[str]:
        """One line per non-zero count, with where it first happened."""
        lines = []
        for kind, text in (("truncated", "cut at max_seq_len (the answer's end is not trained)"),
                           ("dropped_overlong", "dropped: longer than max_seq_len"),
                           ("dropped_prompt_fills", "dropped: the prompt alone fills max_seq_len"),
                           ("prompt_not_prefix", "trained from where the prompt rendered alone and with its answer "
                                                 "diverge (the chat template renders them differently)")):
            count = getattr(self, kind)
            if count:
                lines.append(f"{count} of {self.rows_in} {self.noun} {text} (first: {', '.join(self.first[kind])})")
        return lines


def tokenize_preference(rows: Sequence[Mapping[str, Any]], locations: Sequence[str], tokenizer: Any, mode: str,
                        max_seq_len: int, overlong: str) -> tuple[list[dict[str, Any]], PreferenceStats]:
    """The canonical rows as TRL's tokenized columns (``prompt_ids`` and ``chosen_ids``/``rejected_ids``,
    or ``completion_ids`` + ``label``), under the ``overlong`` policy; a row is over ``max_seq_len``
    when its prompt + longest answer is."""
    from trl.data_utils import _tokenize, common_prefix_length

    answers = ANSWERS[mode]
    stats = PreferenceStats(noun="pairs" if mode == "pairs" else "answers", rows_in=len(rows))
    out: list[dict[str, Any]] = []
    too_long: list[str] = []
    for i, row in enumerate(rows):
        where = locations[i] if i < len(locations) else f"row {i + 1}"
        prompt = list(row["prompt"])
        prompt_ids = _tokenize(tokenizer, prompt, add_generation_prompt=True)["input_ids"]
        full = {name: _tokenize(tokenizer, prompt + list(row[name]))["input_ids"] for name in answers}
        start = min(common_prefix_length(prompt_ids, ids) for ids in full.values())
        longest = max(len(ids) for ids in full.values())
        if longest > max_seq_len:
            if overlong == "error":
                too_long.append(f"{where} ({longest} tokens)")
                continue
            if overlong == "drop":
                stats.note("dropped_overlong", where)
                continue
            if start >= max_seq_len:
                stats.note("dropped_prompt_fills", where)  # TRL's own preparation leaves these out too
                continue
            stats.note("truncated", where)
        if start < len(prompt_ids):
            stats.note("prompt_not_prefix", where)
        example: dict[str, Any] = {"prompt_ids": prompt_ids[:start]}
        example.update({f"{name}_ids": ids[start:] for name, ids in full.items()})
        if mode == "unpaired":
            example["label"] = bool(row["label"])
        out.append(example)
    if too_long:
        raise UsageError(f"{len(too_long)} {stats.noun} longer than max_seq_len={max_seq_len} tokens (prompt + "
                         f"answer): {', '.join(too_long[:5])}{' ...' if len(too_long) > 5 else ''} "
                         "(use overlong=truncate or drop, or raise max_seq_len)")
    stats.rows_out = len(out)
    return out, stats


def preference_dataset(context: Any, plan: Mapping[str, Any], tokenizer: Any) -> Any:
    """The run's validated rows (``context.data()``) as TRL's tokenized train dataset, with the
    counts said in the log (``thub: prepared N of M pairs`` and one warning line per event)."""
    from datasets import Dataset

    data = context.data()
    settings = plan["data"]
    examples, stats = tokenize_preference(data.rows, data.locations, tokenizer, settings["mode"],
                                          settings["max_seq_len"], settings["overlong"])
    balance = ""
    if settings["mode"] == "unpaired":  # what desirable_weight/undesirable_weight balance
        desirable = sum(1 for example in examples if example["label"])
        balance = f" ({desirable} desirable, {len(examples) - desirable} undesirable)"
    print(f"thub: prepared {stats.rows_out} of {stats.rows_in} {stats.noun}{balance}", flush=True)
    for warning in stats.warnings():
        print(f"thub: WARNING: {warning}", flush=True)
    if not examples:
        raise UsageError(f"no {stats.noun} left to train on after the overlong policy ({settings['overlong']}); "
                         "raise max_seq_len or use overlong=truncate")
    return Dataset.from_list(examples)


def pretokenized(trainer_class: type) -> type:
    """``trainer_class`` (``trl.DPOTrainer`` or ``trl.KTOTrainer``) taking the dataset thub
    tokenized as it is: TRL's preparation (tokenizing, its own drop of rows whose prompt fills
    ``max_length``) is skipped, the overlong policy has been applied already. For KTO the KL
    completions are added as TRL 1.16's ``KTOTrainer._prepare_dataset`` adds them: each device
    batch's answers rotated by one, so every prompt meets another answer of its batch."""

    class Pretokenized(trainer_class):  # type: ignore[misc, valid-type]
        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
            if "completion_ids" in dataset.column_names and getattr(self, "calculate_KL", False):
                def rotate(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
                    batch["KL_completion_ids"] = [batch["completion_ids"][-1]] + batch["completion_ids"][:-1]
                    return batch

                dataset = dataset.map(rotate, batched=True, batch_size=args.per_device_train_batch_size)
            return dataset

    Pretokenized.__name__ = Pretokenized.__qualname__ = trainer_class.__name__
    return Pretokenized
