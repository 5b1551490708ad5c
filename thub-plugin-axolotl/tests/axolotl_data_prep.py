"""Run axolotl's own data preparation on configs thub wrote (in a subprocess, for the tests).

Usage: ``python axolotl_data_prep.py AXOLOTL_DIR CONFIG.yaml...``. ``AXOLOTL_DIR`` holds the axolotl
wheel unpacked without dependencies (plus the few it imports on this path: addict, colorama,
posthog, six, backoff). Each config goes through what ``axolotl train`` does with its data before
building the trainer: ``validate_config`` (with a CPU machine's capabilities), ``normalize_config``,
axolotl's ``load_tokenizer`` and ``axolotl.utils.data.prepare_datasets`` (loading, its dataset
strategy or pre-tokenized path, ``excess_length_strategy``, packing filters, the train split).
thub's callback plugin is left out (it acts on the trainer, not on the data). Prints one JSON
object per config: ``{"examples": [{"input_ids", "labels"}, ...]}`` (axolotl's train dataset, in
its order) or ``{"error": ...}``.
"""

from __future__ import annotations

import json
import sys


def prepared(path: str) -> dict:
    import yaml
    from axolotl.loaders import load_tokenizer
    from axolotl.utils.config import normalize_config, validate_config
    from axolotl.utils.data import prepare_datasets
    from axolotl.utils.dict import DictDefault

    cpu = {"bf16": False, "fp8": False, "tf32": False, "n_gpu": 0, "n_node": 1, "compute_capability": None}
    with open(path, encoding="utf-8") as handle:
        config = {**yaml.safe_load(handle), "plugins": None}
    try:
        cfg = validate_config(DictDefault(config), capabilities=cpu, env_capabilities={"torch_version": "2.13.0"})
        normalize_config(cfg)
        train, _eval, _steps, _prompters = prepare_datasets(cfg, load_tokenizer(cfg))
    except Exception as exc:  # reported to the test, which asserts on it
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"examples": [{"input_ids": list(r["input_ids"]), "labels": list(r["labels"])} for r in train]}


if __name__ == "__main__":  # datasets' worker processes re-import this module: only the parent runs
    sys.path.insert(0, sys.argv[1])
    for config_path in sys.argv[2:]:
        print(json.dumps(prepared(config_path)), flush=True)
