"""The tokens axolotl itself trains on (``thub data preview --backend axolotl``).

Runs in axolotl's environment (``python -m thub.data.backend_masks``): the config a run would
get (``translate``) goes through axolotl's ``validate_config`` and ``normalize_config``, then its
dataset strategy loader (``axolotl.prompt_strategies.load`` with the ``chat_template`` dataset
entry thub generates) tokenizes each row: the same ``tokenize_prompt`` its dataset preparation
maps over the data. The tokenizer is the model's (``AutoTokenizer``, pad = EOS when unset, as
axolotl's loader does for Llama-family models; its loader itself also starts axolotl's
telemetry). Imports axolotl.
"""

from __future__ import annotations

from typing import Any

from thub_plugin_axolotl.runner import axolotl_rows
from thub_plugin_axolotl.translate import DEFAULTS, translate


def token_masks(model_path: str, rows: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any] | None]:
    """``{"input_ids", "labels"}`` per row as axolotl builds them (``None``: it dropped the row)."""
    from axolotl.prompt_strategies import load
    from axolotl.utils.config import normalize_config, validate_config
    from axolotl.utils.dict import DictDefault
    from transformers import AutoTokenizer

    unmask = bool(params.get("unmask_messages"))
    plan = translate("sft", {"model_path": model_path, "ckpt_output_dir": "/nonexistent", "effective_batch_size": 1,
                             "learning_rate": 1e-5, "seed": 42, "logging_steps": 1, "num_epochs": 1,
                             "max_seq_len": params["max_seq_len"] if params.get("max_seq_len") else
                             DEFAULTS["sft"]["max_seq_len"], "unmask_messages": unmask})
    config = {**plan["config"], "plugins": None}  # thub's callback plugin is for training runs
    cfg = validate_config(DictDefault(config))
    normalize_config(cfg)
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=bool(params.get("trust_remote_code")))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    strategy = load(cfg.datasets[0]["type"], tokenizer, cfg, cfg.datasets[0])
    out: list[dict[str, Any] | None] = []
    for row in axolotl_rows(rows, [], pretraining=False, unmask_all=unmask):
        encoded = strategy.tokenize_prompt(row)
        ids = list(encoded.get("input_ids") or [])
        out.append({"input_ids": ids, "labels": list(encoded["labels"])} if ids else None)
    return out
