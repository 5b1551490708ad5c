"""thub's examples, tokenized by thub, as the saved dataset LLaMA-Factory loads (``tokenized_path``).

LLaMA-Factory's own data path would re-read the rows with its sharegpt converter (which drops
consecutive same-role turns, a late system turn and parallel tool results), render them with a
template parsed from the chat template (tool calls as ``Action:`` text, tool results as user
turns), mask by its own rules, and overwrite each pretraining block's first token with BOS. Its
``get_dataset`` instead loads a dataset saved at ``tokenized_path`` as it is and skips all of
that (``llamafactory/data/loader.py``), so thub hands it exactly the tokens it validated:

* chat rows: :func:`thub.backend.tokenize_chat` (the model's chat template, thub's assistant
  mask, ``unmask_messages`` and per-row ``unmask``: every token, the ``overlong`` policy);
* pre-tokenized rows: as given, under the ``overlong`` policy (``processed_samples``);
* documents: :func:`thub.backend.pretraining_blocks` (joined with EOS, cut into ``block_size``
  blocks);
* ``packing``: LLaMA-Factory's own ``greedy_knapsack`` over thub's examples, laid out as its
  ``PackedSupervisedDatasetProcessor`` does (position ids restart per example);
* ``validation_split``: split as LLaMA-Factory's ``split_dataset`` does
  (``train_test_split(test_size, seed)``), saved as its ``train``/``validation`` splits.

Written with this environment's ``datasets`` (the one LLaMA-Factory reads with). Imports
datasets, transformers and llamafactory: the training child and the preview only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from thub.backend import TrainingData, UsageError

IGNORE = -100
DIGEST_FILE = "thub_tokenized.json"


def load_backend_tokenizer(params: dict[str, Any]) -> Any:
    """The model's tokenizer as LLaMA-Factory loads it (transformers' AutoTokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(params["model_path"], trust_remote_code=bool(params.get("trust_remote_code")))


def thub_examples(data: TrainingData, tokenizer: Any, params: dict[str, Any], pretraining: bool,
                  ) -> tuple[list[dict[str, list[int]]], list[str]]:
    """``{"input_ids", "labels"}`` per example as thub builds them, and thub's report lines."""
    from thub.backend import pretraining_blocks, processed_samples, tokenize_chat

    rows = data.rows
    if pretraining:
        try:
            blocks = pretraining_blocks(rows, tokenizer, params["block_size"])
        except ValueError as exc:
            raise UsageError(f"block_size: {exc}") from None
        return blocks, [f"thub: {len(blocks)} blocks of {params['block_size']} tokens from {len(rows)} documents"]
    if rows and "input_ids" in rows[0]:  # already tokenized rows under the run's overlong policy
        samples, _origin = processed_samples(rows, params["max_seq_len"], params["overlong"], data.locations)
        return samples, [f"thub: {len(samples)} of {len(rows)} pre-tokenized samples kept"]
    samples, stats = tokenize_chat(rows, tokenizer, params["max_seq_len"], unmask=bool(params.get("unmask_messages")),
                                   overlong=params["overlong"], locations=data.locations)
    lines = [f"thub: tokenized {len(samples)} of {len(rows)} samples with the model's chat template"]
    return samples, lines + [f"thub: WARNING: {warning}" for warning in stats.warnings()]


def pack(examples: list[dict[str, list[int]]], capacity: int, pad_id: int) -> list[dict[str, list[int]]]:
    """Examples packed into ``capacity``-token rows by LLaMA-Factory's own ``greedy_knapsack``."""
    from collections import defaultdict

    from llamafactory.data.processor.processor_utils import greedy_knapsack

    by_length: dict[int, list[int]] = defaultdict(list)
    for i, example in enumerate(examples):
        by_length[len(example["input_ids"])].append(i)
    packed = []
    for knapsack in greedy_knapsack([len(e["input_ids"]) for e in examples], capacity):
        row: dict[str, list[int]] = {"input_ids": [], "attention_mask": [], "position_ids": [], "labels": []}
        for length in knapsack:
            example = examples[by_length[length].pop()]
            row["input_ids"] += example["input_ids"]
            row["labels"] += example["labels"]
            row["position_ids"] += list(range(length))
        pad = capacity - len(row["input_ids"])
        row["input_ids"] += [pad_id] * pad
        row["labels"] += [IGNORE] * pad
        row["position_ids"] += [0] * pad
        row["attention_mask"] = [1] * capacity  # as LLaMA-Factory packs without neat_packing
        packed.append(row)
    return packed


def _columns(examples: list[dict[str, list[int]]]) -> dict[str, list[list[int]]]:
    columns: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    if examples and "position_ids" in examples[0]:
        columns["position_ids"] = []
    for example in examples:
        for name in columns:
            value = example.get(name)
            columns[name].append(value if value is not None else [1] * len(example["input_ids"]))
    return columns


def save_tokenized(path: str | Path, examples: list[dict[str, list[int]]], validation_split: float | None,
                   seed: int) -> None:
    """Save ``examples`` where LLaMA-Factory's ``tokenized_path`` points, once per content.

    Every rank builds the same examples; under a file lock the first writes them (to a
    temporary folder renamed into place) and the others find the same digest and reuse them.
    """
    from datasets import Dataset, DatasetDict

    target = Path(path)
    digest = hashlib.sha256(json.dumps([examples, validation_split, seed]).encode()).hexdigest()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".tokenized.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if json.loads((target / DIGEST_FILE).read_text()).get("digest") == digest:
                return
        except (OSError, ValueError, AttributeError):
            pass
        dataset = Dataset.from_dict(_columns(examples))
        if validation_split:
            split = dataset.train_test_split(test_size=validation_split, seed=seed)
            saved: Any = DatasetDict({"train": split["train"], "validation": split["test"]})
        else:
            saved = dataset
        temporary = target.parent / f".{target.name}.tmp"
        shutil.rmtree(temporary, ignore_errors=True)
        saved.save_to_disk(str(temporary))
        (temporary / DIGEST_FILE).write_text(json.dumps({"digest": digest, "examples": len(examples)}))
        shutil.rmtree(target, ignore_errors=True)
        temporary.rename(target)


def write_dataset(data: TrainingData, params: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """Tokenize ``data`` as thub does and save it at the plan's ``tokenized_path``; report lines."""
    tokenizer = load_backend_tokenizer(params)
    pretraining = plan["data"]["mode"] == "pretraining"
    examples, lines = thub_examples(data, tokenizer, params, pretraining)
    if not examples:
        raise UsageError("no example left to train on after tokenizing (see the warnings above)")
    if not pretraining and params.get("packing"):
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        examples = pack(examples, params["max_seq_len"], pad)
        lines.append(f"thub: packed into {len(examples)} sequences of {params['max_seq_len']} tokens")
    save_tokenized(plan["data"]["tokenized_path"], examples, plan["data"]["validation_split"], params["seed"])
    return lines
