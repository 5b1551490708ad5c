"""The tokens LLaMA-Factory itself trains on (``thub data preview --backend llamafactory``).

Runs in LLaMA-Factory's environment (``python -m thub.data.backend_masks``): thub writes the
examples exactly as a run does (``translate``, ``dataset.write_dataset``: thub's tokenization
saved at ``tokenized_path``), then LLaMA-Factory's own pipeline reads them: ``get_train_args``,
``load_tokenizer``, ``get_template_and_fix_tokenizer`` and ``get_dataset``, whose loader takes
the saved dataset as the examples it trains. Imports llamafactory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from thub.backend import TrainingData, UsageError
from thub_plugin_llamafactory.dataset import write_dataset
from thub_plugin_llamafactory.translate import DEFAULTS, translate


def _encode(model_path: str, rows: list[dict[str, Any]], params: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    full = {"model_path": model_path, "ckpt_output_dir": str(work), "effective_batch_size": 1,
            "learning_rate": 1e-5, "seed": 42, "logging_steps": 1, "num_epochs": 1,
            "max_seq_len": params["max_seq_len"] if params.get("max_seq_len") else DEFAULTS["sft"]["max_seq_len"],
            # the preview cuts as thub's default policy does
            "overlong": "truncate", "unmask_messages": bool(params.get("unmask_messages"))}
    plan = translate("sft", full)
    write_dataset(TrainingData(rows, [f"row {i + 1}" for i in range(len(rows))], "chat", "preview"), full, plan)
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
        if len(encoded) == len(rows):  # the saved order (the Trainer shuffles later)
            return list(encoded)  # as list[dict | None] (list is invariant)
        out: list[dict[str, Any] | None] = []
        for i, row in enumerate(rows):  # it dropped some: find which, one row at a time
            try:
                one = _encode(model_path, [row], params, Path(tmp) / f"row{i}")
            except UsageError:  # thub left no trainable sample of it (the run reports the same)
                one = []
            out.append(one[0] if one else None)
        return out
