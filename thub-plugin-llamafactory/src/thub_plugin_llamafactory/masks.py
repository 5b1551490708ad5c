"""The tokens LLaMA-Factory itself trains on (``thub data preview --backend llamafactory``).

Runs in LLaMA-Factory's environment (``python -m thub.data.backend_masks``): thub writes the rows
and the ``dataset_info`` entry exactly as a run does (``runner.lf_rows``, ``translate``), then
LLaMA-Factory's own pipeline reads them: ``get_train_args``, ``load_tokenizer``,
``get_template_and_fix_tokenizer`` (the template parsed from the model's chat template), and
``get_dataset`` (its dataset registry, sharegpt converter and supervised processor with its
masking). Imports llamafactory.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from thub_plugin_llamafactory.runner import lf_rows
from thub_plugin_llamafactory.translate import DEFAULTS, translate


def _encode(model_path: str, rows: list[dict[str, Any]], params: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    plan = translate("sft", {"model_path": model_path, "ckpt_output_dir": str(work), "effective_batch_size": 1,
                             "learning_rate": 1e-5, "seed": 42, "logging_steps": 1, "num_epochs": 1,
                             "max_seq_len": params["max_seq_len"] if params.get("max_seq_len") else
                             DEFAULTS["sft"]["max_seq_len"],
                             "unmask_messages": bool(params.get("unmask_messages"))})
    data = lf_rows(rows, [], pretraining=False, unmask_all=bool(params.get("unmask_messages")))
    Path(plan["data"]["file"]).parent.mkdir(parents=True, exist_ok=True)
    Path(plan["data"]["file"]).write_text("".join(json.dumps(r) + "\n" for r in data))
    (Path(plan["args"]["dataset_dir"]) / "dataset_info.json").write_text(json.dumps(plan["dataset_info"]))
    args = {**plan["args"], "report_to": "none", "use_cpu": True, "bf16": False}
    model_args, data_args, training_args, _finetuning, _generating = get_train_args(args)
    tokenizer_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
    module = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)
    dataset = module["train_dataset"]
    return [{"input_ids": list(r["input_ids"]), "labels": list(r["labels"])} for r in dataset]


def token_masks(model_path: str, rows: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any] | None]:
    """``{"input_ids", "labels"}`` per row as LLaMA-Factory builds them (``None``: it dropped the row)."""
    with tempfile.TemporaryDirectory() as tmp:
        encoded = _encode(model_path, rows, params, Path(tmp) / "all")
        if len(encoded) == len(rows):  # LLaMA-Factory keeps the order (no shuffle before the Trainer)
            return list(encoded)  # as list[dict | None] (list is invariant)
        out: list[dict[str, Any] | None] = []
        for i, row in enumerate(rows):  # it dropped some: find which, one row at a time
            try:
                one = _encode(model_path, [row], params, Path(tmp) / f"row{i}")
            except RuntimeError:  # "Cannot find valid samples"
                one = []
            out.append(one[0] if one else None)
        return out
