"""GRPO rows -> verl's RL parquet files. pyarrow is imported inside :func:`write_parquet` only.

verl's ``RLHFDataset`` reads ``prompt`` (chat messages), ``data_source`` (passed to the reward),
``reward_model`` (``{"style", "ground_truth"}``) and ``extra_info`` (passed to the reward).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA_SOURCE = "thub"
# rows copied into val.parquet (verl builds a validation loader; thub runs no validation: test_freq=-1)
VALIDATION_ROWS = 8


def verl_rows(rows: list[dict[str, Any]], system_prompt: str | None = None,
              split: str = "train") -> list[dict[str, Any]]:
    """thub GRPO rows ``{"prompt": [messages], "ground_truth"}`` as verl rows."""
    out = []
    for index, row in enumerate(rows):
        prompt = [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in row["prompt"]]
        if system_prompt and not (prompt and prompt[0]["role"] == "system"):
            prompt.insert(0, {"role": "system", "content": system_prompt})
        truth = row["ground_truth"]
        truth = truth if isinstance(truth, str) else json.dumps(truth)
        out.append({
            "data_source": DATA_SOURCE,
            "prompt": prompt,
            "ability": "thub",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"index": index, "split": split, "prompt_json": json.dumps(prompt)},
        })
    return out


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def prepare(rows: list[dict[str, Any]], files: dict[str, str], system_prompt: str | None) -> int:
    """Write ``train.parquet`` and ``val.parquet``; return the number of training prompts."""
    if not rows:
        raise ValueError("no GRPO rows in the data")
    write_parquet(verl_rows(rows, system_prompt, "train"), files["train"])
    write_parquet(verl_rows(rows[:VALIDATION_ROWS], system_prompt, "val"), files["val"])
    return len(rows)
