"""The tokens axolotl itself trains on (``thub data preview --backend axolotl``).

Runs in axolotl's environment (``python -m thub.data.backend_masks``) and takes a run's path:
thub tokenizes the rows and writes them with the config a run gets (``runner.thub_examples``,
``runner.write_files``, ``translate``), then axolotl's own code reads that config and data:
``validate_config``, ``normalize_config``, its ``load_tokenizer`` and
``axolotl.utils.data.prepare_datasets`` (its pre-tokenized dataset path, ``excess_length_strategy``,
the short-sample filter), which is what ``axolotl train`` trains on. A row axolotl left out is
``None``. Imports axolotl.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from thub_plugin_axolotl.runner import thub_examples, write_files
from thub_plugin_axolotl.translate import DEFAULTS, translate


def _axolotl_dataset(config_file: str) -> list[dict[str, list[int]]]:
    """axolotl's train dataset from ``config_file``, in its order (thub's: no shuffle before the Trainer)."""
    import yaml
    from axolotl.loaders import load_tokenizer
    from axolotl.utils.config import normalize_config, validate_config
    from axolotl.utils.data import prepare_datasets
    from axolotl.utils.dict import DictDefault

    with open(config_file, encoding="utf-8") as handle:
        config = {**yaml.safe_load(handle), "plugins": None}  # thub's callback plugin acts on the trainer only
    cfg = validate_config(DictDefault(config))
    normalize_config(cfg)
    train, _eval, _steps, _prompters = prepare_datasets(cfg, load_tokenizer(cfg))
    return [{"input_ids": list(r["input_ids"]), "labels": list(r["labels"])} for r in train]


def _run_params(model_path: str, work: str, shown: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters for the preview's settings (``max_seq_len``: unset, the backend's
    default; ``unmask_messages``; the overlong row cut, as thub's preview shows it)."""
    return {"model_path": model_path, "ckpt_output_dir": work, "effective_batch_size": 1, "learning_rate": 1e-5,
            "seed": 42, "logging_steps": 1, "num_epochs": 1,
            "max_seq_len": shown["max_seq_len"] if shown.get("max_seq_len") else DEFAULTS["sft"]["max_seq_len"],
            "overlong": "truncate", "unmask_messages": bool(shown.get("unmask_messages")),
            "trust_remote_code": bool(shown.get("trust_remote_code"))}


def token_masks(model_path: str, rows: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any] | None]:
    """``{"input_ids", "labels"}`` per row as axolotl trains it (``None``: the row is not trained)."""
    from thub.backend import load_tokenizer

    os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
    with tempfile.TemporaryDirectory(prefix="thub-axolotl-masks-") as work:
        run = _run_params(model_path, work, params)
        plan = translate("sft", run)
        tokenizer = load_tokenizer(model_path, trust_remote_code=run["trust_remote_code"])
        ours: list[dict[str, list[int]] | None] = []
        for i, row in enumerate(rows):  # one row at a time: which row each example comes from
            built, _lines = thub_examples([row], [f"row {i + 1}"], tokenizer, plan["data"])
            ours.append(built[0] if built else None)
        kept = [e for e in ours if e is not None]
        if not kept:
            return [None] * len(rows)
        theirs = _axolotl_dataset(write_files(plan, kept, None))
    if len(theirs) == len(kept):  # axolotl kept every example: compare each one as it is
        each = iter(theirs)
        return [None if example is None else next(each) for example in ours]
    # axolotl left some out (it keeps thub's order): match the others up in order
    out: list[dict[str, Any] | None] = []
    remaining = iter(theirs)
    pending = next(remaining, None)
    for example in ours:
        if example is not None and pending is not None and pending["input_ids"] == example["input_ids"]:
            out.append(pending)
            pending = next(remaining, None)
        else:
            out.append(None)
    return out
