"""Validate thub's axolotl configs with axolotl's own code (run in a subprocess by the tests).

Usage: ``python axolotl_own_checks.py AXOLOTL_DIR < configs.json``. ``AXOLOTL_DIR`` holds the
axolotl wheel unpacked without dependencies (plus addict and colorama, which its config module
imports). Each config goes through ``axolotl.utils.config.validate_config`` (the pydantic
``AxolotlConfigWCapabilities`` schema with its model validators, given a CPU machine's
capabilities) and then ``normalize_config`` (derived batch sizes, world size). Prints one JSON
object per config: the validated values the tests look at, or the error axolotl raised.
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, sys.argv[1])

from axolotl.utils.config import normalize_config, validate_config  # noqa: E402
from axolotl.utils.dict import DictDefault  # noqa: E402

FIELDS = ("base_model", "micro_batch_size", "gradient_accumulation_steps", "batch_size", "sequence_len",
          "sample_packing", "num_epochs", "max_steps", "learning_rate", "lr_scheduler", "adapter", "lora_r",
          "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_linear", "peft_use_rslora",
          "val_set_size", "save_strategy", "save_steps", "save_total_limit", "output_dir", "chat_template", "plugins",
          "bf16",
          "world_size", "eval_steps", "warmup_steps", "weight_decay", "adam_beta1", "seed", "excess_length_strategy",
          "min_sample_len", "shuffle_merged_datasets", "auto_resume_from_checkpoints", "dataset_num_proc",
          # preference tuning
          "rl", "rl_beta", "dpo_loss_type", "dpo_label_smoothing", "simpo_gamma", "cpo_alpha", "kto_desirable_weight",
          "kto_undesirable_weight", "remove_unused_columns", "metric_for_best_model", "greater_is_better")
CPU = {"bf16": False, "fp8": False, "tf32": False, "n_gpu": 0, "n_node": 1, "compute_capability": None}


def check(config: dict) -> dict:
    try:
        cfg = validate_config(DictDefault(config), capabilities=CPU, env_capabilities={"torch_version": "2.13.0"})
        normalize_config(cfg)
    except Exception as exc:  # reported to the test, which asserts on it
        return {"error": f"{type(exc).__name__}: {exc}"}
    out = {name: cfg.get(name) for name in FIELDS}
    dataset = cfg["datasets"][0]
    out["dataset"] = {k: dataset.get(k) for k in ("path", "ds_type", "type", "field", "field_messages",
                                                    "message_property_mappings", "roles_to_train", "train_on_eos")}
    if cfg.get("test_datasets"):
        test = cfg["test_datasets"][0]
        out["test_dataset"] = {k: test.get(k) for k in ("path", "ds_type", "type")}
    return json.loads(json.dumps(out, default=str))


for config in json.load(sys.stdin):
    print(json.dumps(check(config)))
