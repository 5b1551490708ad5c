"""thub parameters -> the sentence-transformers training plan. Pure Python: no library import.

The runner builds ``SentenceTransformerTrainingArguments`` and the loss from exactly this output,
so ``--dry-run`` shows what will really be used. Every honoured parameter is in the README.
"""

from __future__ import annotations

from typing import Any

from thub.backend import cuda_visible, optional_training_args

#: what ``embedding_sft`` on this backend reads (anything else a user sets is refused before the run)
HONOURED: dict[str, frozenset[str]] = {"embedding_sft": frozenset({
    "num_epochs", "max_steps", "effective_batch_size", "learning_rate", "seed", "max_seq_len",
    "save_steps", "checkpoint_at_epoch", "save_total_limit", "save_final_checkpoint", "trust_remote_code",
    "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio", "beta1", "beta2", "eps",
    "weight_decay", "max_grad_norm", "logging_steps",
    "loss_type", "loss_fn", "batch_sampler", "validation_split", "validation_data_path",
})}

#: Training Hub 0.11.2's embedding_sft defaults (num_epochs=20, batch_size=32, learning_rate=2e-5)
DEFAULTS: dict[str, dict[str, Any]] = {"embedding_sft": {"num_epochs": 20, "effective_batch_size": 32,
                                                         "learning_rate": 2e-5}}


#: Training Hub's sampler names -> sentence-transformers' ``BatchSamplers`` values
SAMPLERS = {"group_by_label": "group_by_label", "no_duplicates": "no_duplicates", "default": "batch_sampler"}


def batch_sampler(params: Any) -> str:
    """The sampler set, else Training Hub's choice by loss: ``no_duplicates`` for mnrl (no text twice
    in a batch of in-batch negatives), ``default`` for a custom loss, ``group_by_label`` for the
    triplet losses (every batch holds several texts of a label); as a ``BatchSamplers`` value."""
    if params["batch_sampler"] is not None:
        return SAMPLERS[params["batch_sampler"]]
    if params["loss_fn"]:
        return SAMPLERS["default"]
    return "no_duplicates" if params["loss_type"] == "mnrl" else "group_by_label"


def translate(algorithm: str, params: Any) -> dict[str, Any]:
    """The plan of one ``embedding_sft`` run (JSON-serialisable)."""
    out = params["ckpt_output_dir"]
    warmup = params["warmup_steps"] if params["warmup_steps"] is not None else params["warmup_ratio"]
    args: dict[str, Any] = {
        "output_dir": f"{out}/checkpoints",
        "num_train_epochs": params["num_epochs"],
        "per_device_train_batch_size": params["effective_batch_size"],
        "learning_rate": params["learning_rate"],
        # transformers 5 has one field: an int is steps, a float below 1 a fraction of the steps
        "warmup_steps": warmup,
        "seed": params["seed"],
        "data_seed": params["seed"],
        "batch_sampler": batch_sampler(params),
        "logging_steps": params["logging_steps"],
        "save_strategy": "steps" if params["save_steps"] else "epoch" if params["checkpoint_at_epoch"] else "no",
        "use_cpu": not cuda_visible(),
        "report_to": ["none"],
        "disable_tqdm": True,
    }
    args.update(optional_training_args(params))  # save_steps, betas, eps, weight decay, clipping, retention
    if params["max_steps"]:
        args["max_steps"] = params["max_steps"]
    if params["lr_scheduler"] is not None:
        args["lr_scheduler_type"] = params["lr_scheduler"]
    loss_fn = params["loss_fn"]
    return {
        "model": {"path": params["model_path"], "trust_remote_code": params["trust_remote_code"],
                  "max_seq_length": params["max_seq_len"]},
        "loss": {"custom": loss_fn} if loss_fn else {"type": params["loss_type"]},
        # mnrl trains on (anchor, positive) pairs of one label, built from the rows (Training Hub's way)
        "pairs": not loss_fn and params["loss_type"] == "mnrl",
        "args": args,
        "held_out": {"split": params["validation_split"], "path": params["validation_data_path"]},
        "save_final_checkpoint": params["save_final_checkpoint"],
    }
