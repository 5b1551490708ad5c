"""Data for instructlab-training: thub validates and normalises, instructlab tokenizes.

thub reads any format ``thub data check`` accepts and writes canonical rows (``messages`` with
``unmask``, or the document column) to ``{data_output_dir}/thub_input.jsonl``. Then it runs
instructlab-training's own processing (its chat template handling and masks) into
``{data_output_dir}/data.jsonl`` -- the file its training step reads -- and counts the samples that
processing drops: those shorter than 20 tokens and those of ``max_seq_len`` tokens or more
(``filter_samples_by_length``, which drops them silently). Runs on CPU; imports instructlab.

``unmask`` means every token in thub (role headers, system turns, template text); instructlab's own
``unmask`` trains the contents of user, assistant and tool turns only. thub therefore sets the
labels of every unmasked sample to its input ids after instructlab's processing (the tokens are
the same; only the mask differs), so both mean what ``thub data preview`` shows.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thub.backend import RunContext
from thub_plugin_instructlab.translate import MIN_SAMPLE_TOKENS


@dataclass
class DataReport:
    mode: str
    input_samples: int
    kept_samples: int
    dropped_short: int = 0
    dropped_long: int = 0
    min_tokens: int = MIN_SAMPLE_TOKENS
    max_seq_len: int | None = None
    total_tokens: int = 0
    train_units: int = 0  # samples (chat) or blocks (pretraining) the loader will see per epoch
    processed_file: str = ""

    def warnings(self) -> list[str]:
        out = []
        if self.dropped_short:
            out.append(
                f"instructlab-training dropped {self.dropped_short} of {self.input_samples} samples shorter than "
                f"{self.min_tokens} tokens (its data processing filters them silently); lengthen or remove them"
            )
        if self.dropped_long:
            out.append(
                f"instructlab-training dropped {self.dropped_long} of {self.input_samples} samples of "
                f"{self.max_seq_len} tokens or more (max_seq_len); raise max_seq_len to keep them"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def unmask_fully(processed: Path, rows: list[dict[str, Any]], unmask: bool, model_path: str,
                 trust_remote_code: bool = False) -> int:
    """Train every token of the unmasked samples in instructlab's ``data.jsonl`` (thub's meaning of
    ``unmask``); returns how many samples changed. A sample is found by its input ids, which thub's
    rendering of the row gives (instructlab renders with the same chat template)."""
    unmasked = [row for row in rows if unmask or row.get("unmask")]
    if not unmasked:
        return 0
    from thub.backend import load_tokenizer, tokenize_chat

    tokenizer = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
    samples, _ = tokenize_chat(unmasked, tokenizer, None, unmask=True)
    wanted = Counter(tuple(sample["input_ids"]) for sample in samples)
    changed, lines = 0, []
    for raw in processed.read_text().splitlines():
        record = json.loads(raw)
        key = tuple(record["input_ids"])
        if wanted[key] > 0:
            wanted[key] -= 1
            if record["labels"] != record["input_ids"]:
                record["labels"] = list(record["input_ids"])
                changed += 1
        lines.append(json.dumps(record))
    temporary = processed.with_suffix(".tmp")
    temporary.write_text("".join(line + "\n" for line in lines))
    temporary.replace(processed)  # renamed into place: never half-written
    return changed


def write_input(rows: list[dict[str, Any]], path: Path, *, mode: str, unmask: bool, document_column: str) -> int:
    """Canonical thub rows as the JSONL instructlab-training's processing reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for row in rows:
            if mode == "pretraining":
                record: dict[str, Any] = {document_column: row["document"]}
            else:
                record = {"messages": row["messages"], "unmask": bool(row.get("unmask") or unmask)}
            handle.write(json.dumps(record) + "\n")
    return len(rows)


@contextlib.contextmanager
def counting_length_filter(counts: dict[str, int]) -> Iterator[None]:
    """Wrap instructlab's ``filter_samples_by_length`` to count what it drops, and why."""
    from instructlab.training import data_process

    original = data_process.filter_samples_by_length

    def counted(data: Any, max_seq_len: int, min_seq_len: int = MIN_SAMPLE_TOKENS, num_proc: int = 1) -> Any:
        lengths = data["len"]
        counts["short"] += sum(1 for n in lengths if n < min_seq_len)
        counts["long"] += sum(1 for n in lengths if n >= max_seq_len)
        counts["min_tokens"] = min_seq_len
        return original(data, max_seq_len, min_seq_len=min_seq_len, num_proc=num_proc)

    data_process.filter_samples_by_length = counted
    try:
        yield
    finally:
        data_process.filter_samples_by_length = original


def _read_lengths(path: Path) -> list[int]:
    lengths = []
    with path.open() as handle:
        for raw in handle:
            if raw.strip():
                row = json.loads(raw)
                lengths.append(int(row.get("len") or len(row["input_ids"])))
    return lengths


def prepare(plan: dict[str, Any], context: RunContext) -> DataReport:
    """Process the run's validated rows into ``data.jsonl``; count what is dropped."""
    args = plan["training_args"]
    mode = plan["data"]["mode"]
    document_column = context.params["document_column_name"]
    rows = context.rows()  # the rows thub validated and normalised before the run
    output_dir = Path(args["data_output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    processed = output_dir / "data.jsonl"

    if rows and "input_ids" in rows[0] and mode == "chat":
        # already tokenized (format "processed"): instructlab reads it as is
        with processed.open("w") as handle:
            for row in rows:
                labels = row.get("labels") or list(row["input_ids"])
                handle.write(json.dumps({"input_ids": row["input_ids"], "labels": labels,
                                         "len": len(row["input_ids"])}) + "\n")
        lengths = _read_lengths(processed)
        return DataReport(mode, len(rows), len(lengths), max_seq_len=args["max_seq_len"],
                          total_tokens=sum(lengths), train_units=len(lengths), processed_file=str(processed))

    from instructlab.training import data_process

    source = output_dir / "thub_input.jsonl"
    write_input(rows, source, mode=mode, unmask=plan["data"]["unmask"], document_column=document_column)
    counts = {"short": 0, "long": 0, "min_tokens": MIN_SAMPLE_TOKENS}
    if mode == "pretraining":
        data_process.process_documents_for_pretraining(
            data_path=str(source), data_output_path=str(output_dir), model_path=args["model_path"],
            num_cpu_procs=args["data_process_num_cpu_procs"],
            document_column_name=args["pretraining_config"]["document_column_name"],
        )
    else:
        with counting_length_filter(counts):
            data_process.process_data(
                data_path=str(source), data_output_path=str(output_dir), max_seq_len=args["max_seq_len"],
                model_path=args["model_path"], num_cpu_procs=args["data_process_num_cpu_procs"],
            )
        unmask_fully(processed, rows, plan["data"]["unmask"], args["model_path"],
                     bool(context.params.get("trust_remote_code")))
    lengths = _read_lengths(processed)
    units = len(lengths)
    if mode == "pretraining":
        units = math.ceil(sum(lengths) / args["pretraining_config"]["block_size"])
    return DataReport(mode, len(rows), len(lengths), dropped_short=counts["short"], dropped_long=counts["long"],
                      min_tokens=counts["min_tokens"], max_seq_len=args["max_seq_len"], total_tokens=sum(lengths),
                      train_units=units, processed_file=str(processed))
