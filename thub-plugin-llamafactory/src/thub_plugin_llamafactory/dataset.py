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
  (``train_test_split(test_size, seed)``), saved as its ``train``/``validation`` splits;
  ``validation_data_path``: that file's rows tokenized (and packed) as the training rows are, saved as
  the ``validation`` split (its ``get_dataset_module`` makes it the Trainer's ``eval_dataset``).

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

from thub.backend import TrainingData, UsageError, supervised_examples

IGNORE = -100
DIGEST_FILE = "thub_tokenized.json"


def load_backend_tokenizer(params: dict[str, Any]) -> Any:
    """The model's tokenizer as LLaMA-Factory loads it (transformers' AutoTokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(params["model_path"], trust_remote_code=bool(params.get("trust_remote_code")))


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
                   seed: int, held_out: list[dict[str, list[int]]] | None = None) -> None:
    """Save ``examples`` where LLaMA-Factory's ``tokenized_path`` points, once per content
    (``held_out``: the examples of ``validation_data_path``, saved as the ``validation`` split).

    Every rank builds the same examples; under a file lock the first writes them (to a
    temporary folder renamed into place) and the others find the same digest and reuse them.
    """
    from datasets import Dataset, DatasetDict

    target = Path(path)
    digest = hashlib.sha256(json.dumps([examples, validation_split, seed, held_out]).encode()).hexdigest()
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
        elif held_out is not None:
            saved = DatasetDict({"train": dataset, "validation": Dataset.from_dict(_columns(held_out))})
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
    examples, lines = _examples(data, params, plan, tokenizer)
    if not examples:
        raise UsageError("no example left to train on after tokenizing (see the warnings above)")
    held_out = None
    if plan["data"].get("validation_data_path"):
        from thub.backend import validation_data

        validation = validation_data(params)
        assert validation is not None  # validation_data_path is set
        held_out, more = _examples(validation, params, plan, tokenizer)
        lines += more
        if not held_out:
            raise UsageError(f"validation_data_path {params['validation_data_path']}: no example left to evaluate on "
                             "after tokenizing (see the warnings above)")
    save_tokenized(plan["data"]["tokenized_path"], examples, plan["data"]["validation_split"], params["seed"],
                   held_out)
    return lines


def _examples(data: TrainingData, params: dict[str, Any], plan: dict[str, Any],
              tokenizer: Any) -> tuple[list[dict[str, list[int]]], list[str]]:
    """``data``'s rows as thub's examples (packed with ``packing``) and the report lines."""
    pretraining = plan["data"]["mode"] == "pretraining"
    examples, lines = supervised_examples(
        data.rows, data.locations, tokenizer, max_seq_len=params["max_seq_len"], overlong=params["overlong"],
        unmask=bool(params.get("unmask_messages")), block_size=params["block_size"] if pretraining else None)
    if examples and not pretraining and params.get("packing"):
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        examples = pack(examples, params["max_seq_len"], pad)
        lines.append(f"thub: packed into {len(examples)} sequences of {params['max_seq_len']} tokens")
    return examples, lines


# -- preference tuning: LLaMA-Factory's own data path (the rows: thub_plugin_llamafactory.preference)


def _longest(tokenizer: Any, row: dict[str, Any], algorithm: str) -> int:
    """Tokens of the prompt with its longer answer, as the model's chat template renders them
    (what LLaMA-Factory's template builds: the same text, tests/test_preference_training.py)."""
    answers = ("chosen", "rejected") if algorithm == "dpo" else ("completion",)
    texts = [tokenizer.apply_chat_template(row["prompt"] + row[name], tokenize=False) for name in answers]
    return max(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)


def overlong_policy(algorithm: str, data: TrainingData, params: dict[str, Any],
                    rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """``rows`` under ``overlong``: ``truncate`` leaves the cut to LLaMA-Factory (``infer_seqlen``);
    ``drop`` leaves out a row whose prompt + longer answer is over ``max_seq_len``, ``error``
    refuses naming each (thub's data gate refused those before the run already)."""
    policy, limit = params["overlong"], int(params["max_seq_len"])
    if policy == "truncate":
        return rows, []
    tokenizer = load_backend_tokenizer(params)
    over = [i for i, row in enumerate(data.rows) if _longest(tokenizer, row, algorithm) > limit]
    where = [data.locations[i] for i in over]
    if over and policy == "error":
        raise UsageError(f"{len(over)} rows longer than max_seq_len={limit} tokens (prompt + answer): "
                         f"{', '.join(where[:5])} (use overlong=truncate or drop, or raise max_seq_len)")
    kept = [row for i, row in enumerate(rows) if i not in set(over)]
    lines = [f"thub: WARNING: dropped {len(over)} rows longer than max_seq_len={limit} tokens (overlong=drop): "
             f"{', '.join(where[:5])}"] if over else []
    return kept, lines


def write_preference_dataset(algorithm: str, data: TrainingData, params: dict[str, Any],
                             plan: dict[str, Any]) -> list[str]:
    """Write the rows (under the ``overlong`` policy) and their ``dataset_info.json`` where the
    plan's ``dataset_dir`` points; returns thub's report lines."""
    from thub.backend import write_text_atomic
    from thub_plugin_llamafactory.preference import PREFERENCE_FORMATS, preference_rows

    rows, lines = overlong_policy(algorithm, data, params, preference_rows(algorithm, data.rows, data.locations))
    if not rows:
        raise UsageError(f"no preference row left to train on (overlong={params['overlong']}, max_seq_len="
                         f"{params['max_seq_len']}); raise max_seq_len or use overlong=truncate")
    # every rank writes the same content, atomically: none reads a half-written file
    write_text_atomic(Path(plan["data"]["file"]), json.dumps(rows, ensure_ascii=False), parents=True)
    info = {plan["args"]["dataset"]: {"file_name": Path(plan["data"]["file"]).name, **PREFERENCE_FORMATS[algorithm]}}
    write_text_atomic(Path(plan["data"]["dataset_info"]), json.dumps(info, indent=2), parents=True)
    what = "pairs (ranking)" if algorithm == "dpo" else "answers (kto_tag)"
    return [f"thub: wrote {len(rows)} {what} for LLaMA-Factory's own preference data path", *lines]
