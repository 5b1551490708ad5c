"""thub parameters -> instructlab-training's ``TorchrunArgs`` and ``TrainingArgs``. Pure Python.

instructlab-training's pydantic models ignore unknown keys, so a misnamed key would be dropped
silently: the plugin's tests build the library's real models from this output and check that every
key is one of their fields. The runner builds them from exactly this output, so ``--dry-run``
shows what will really be used. Every honoured parameter is mapped in the README.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from thub.backend import UsageError, thub_retention

BACKEND = "instructlab-training"

# instructlab-training's data processing keeps only samples with 20 <= tokens < max_seq_len
# (data_process.filter_samples_by_length); thub counts what it drops and reports it.
MIN_SAMPLE_TOKENS = 20

# TrainingArgs defaults of instructlab-training 0.16.2, used to fill a missing beta.
ILAB_ADAMW_BETAS = (0.9, 0.95)
# Training Hub's fallback for max_batch_len when neither max_tokens_per_gpu nor max_seq_len is given.
FALLBACK_MAX_BATCH_LEN = 60000

TORCHRUN_PARAMS = ("nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_addr", "master_port")
_ENV = {name: f"PET_{name.upper()}" for name in TORCHRUN_PARAMS}

# thub parameter -> TrainingArgs field, copied when set.
_DIRECT = {
    "num_epochs": "num_epochs",
    "effective_batch_size": "effective_batch_size",
    "learning_rate": "learning_rate",
    "max_seq_len": "max_seq_len",
    "seed": "random_seed",
    "warmup_steps": "warmup_steps",
    "eps": "adamw_eps",
    "weight_decay": "adamw_weight_decay",
    "save_samples": "save_samples",
    "checkpoint_at_epoch": "checkpoint_at_epoch",
    "accelerate_full_state_at_epoch": "accelerate_full_state_at_epoch",
    "use_liger": "use_liger",
    "trust_remote_code": "trust_remote_code",
    "validation_split": "validation_split",
    "validation_frequency": "validation_frequency",
    "wandb_project": "wandb_project",
    "wandb_entity": "wandb_entity",
    "wandb_run_name": "wandb_run_name",
    "tensorboard_log_dir": "tensorboard_log_dir",
    "mlflow_tracking_uri": "mlflow_tracking_uri",
    "mlflow_experiment_name": "mlflow_experiment_name",
    "mlflow_run_name": "mlflow_run_name",
}

_SFT = frozenset({
    *_DIRECT, *TORCHRUN_PARAMS,
    "max_tokens_per_gpu", "beta1", "beta2", "data_output_dir", "unmask_messages",
    "is_pretraining", "block_size", "save_total_limit", "fsdp_sharding_strategy", "fsdp_cpu_offload",
})
# FSDPOptions' sharding_strategy default in instructlab-training 0.16 (config.py), for a run that sets
# only fsdp_cpu_offload
ILAB_SHARDING_STRATEGY = "HYBRID_SHARD"

HONOURED: dict[str, frozenset[str]] = {"sft": _SFT}

# instructlab-training requires these four; Training Hub leaves them to the user, thub gives
# defaults (shown as `backend instructlab-training` in --dry-run).
DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"num_epochs": 1, "learning_rate": 2e-5, "max_seq_len": 4096, "effective_batch_size": 32},
}


def flash_attn_installed() -> bool:
    """Whether ``flash_attn`` can be imported (found without importing it)."""
    return importlib.util.find_spec("flash_attn") is not None


def torchrun_params(params: Mapping[str, Any],
                    environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """``TorchrunArgs`` fields and where each came from: parameter > ``PET_*`` environment > default.

    Follows Training Hub's ``get_torchrun_params``: ``MASTER_ADDR``/``MASTER_PORT`` count as
    environment too; ``master_addr`` and ``rdzv_endpoint`` are exclusive at the same level, and
    at different levels the higher one wins; ``master_port`` only goes with ``master_addr``.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in TORCHRUN_PARAMS:
        if params.get(name) is not None:
            values[name], sources[name] = params[name], "parameter"
            continue
        for variable in (_ENV[name], name.upper() if name in ("master_addr", "master_port") else None):
            if variable and environ.get(variable):
                values[name], sources[name] = environ[variable], variable
                break
    for name, default in (("nproc_per_node", 1), ("nnodes", 1), ("node_rank", 0), ("rdzv_id", 0)):
        if name not in values:
            values[name], sources[name] = default, "default"
    nproc = values["nproc_per_node"]
    if isinstance(nproc, str):
        nproc = nproc.strip().lower()
        if nproc in ("auto", "gpu"):
            nproc = "gpu"  # torchrun starts one process per visible GPU
        elif nproc.isdigit():
            nproc = int(nproc)
        else:
            raise UsageError(f"nproc_per_node must be an integer, 'auto' or 'gpu'; got {values['nproc_per_node']!r}")
    values["nproc_per_node"] = nproc
    for name in ("nnodes", "node_rank", "master_port"):
        if name in values:
            try:
                values[name] = int(values[name])
            except (TypeError, ValueError):
                raise UsageError(f"{name} must be an integer; got {values[name]!r} from {sources[name]}") from None
    if isinstance(values["rdzv_id"], str) and values["rdzv_id"].strip().isdigit():
        values["rdzv_id"] = int(values["rdzv_id"])
    if "master_addr" in values and "rdzv_endpoint" in values:
        level = {"parameter": 0}
        a = level.get(sources["master_addr"], 1)
        b = level.get(sources["rdzv_endpoint"], 1)
        if a == b:
            raise UsageError(
                "master_addr and rdzv_endpoint are exclusive (static rendezvous or c10d rendezvous); "
                f"both come from the {'parameters' if a == 0 else 'environment'}: set only one"
            )
        drop = "rdzv_endpoint" if a < b else "master_addr"
        values.pop(drop)
        sources[drop] = f"dropped: {'master_addr' if drop == 'rdzv_endpoint' else 'rdzv_endpoint'} has precedence"
    if "master_port" in values and "master_addr" not in values:
        if sources["master_port"] == "parameter":  # the user's own setting would change nothing: refused
            raise UsageError(f"master_port {values['master_port']} is used only with master_addr (a static "
                             "rendezvous); set master_addr too, or leave master_port out with rdzv_endpoint")
        values.pop("master_port")
        sources["master_port"] = "dropped: only used with master_addr"
    return values, sources


def _adamw_betas(params: Mapping[str, Any], notes: list[str]) -> list[float] | None:
    beta1, beta2 = params.get("beta1"), params.get("beta2")
    if beta1 is None and beta2 is None:
        return None
    if beta1 is None or beta2 is None:
        missing = "beta1" if beta1 is None else "beta2"
        index = 0 if beta1 is None else 1
        notes.append(f"{missing} not set: filled with instructlab-training's default {ILAB_ADAMW_BETAS[index]} "
                     "(Training Hub drops both betas when one is missing)")
    return [ILAB_ADAMW_BETAS[0] if beta1 is None else beta1, ILAB_ADAMW_BETAS[1] if beta2 is None else beta2]


def translate(algorithm: str, params: Mapping[str, Any], environ: Mapping[str, str] | None = None,
              flash_attn: bool | None = None) -> dict[str, Any]:
    """The ``TorchrunArgs`` and ``TrainingArgs`` keyword arguments for ``params`` (JSON-compatible)."""
    if algorithm not in HONOURED:
        raise UsageError(f"backend {BACKEND} does not run {algorithm!r} (it runs sft, with is_pretraining)")
    notes: list[str] = []
    ckpt = params["ckpt_output_dir"]
    args: dict[str, Any] = {
        "model_path": params["model_path"],
        # the runner writes thub's validated, normalised rows here (any format `thub data check` accepts)
        "data_path": params["data_path"],
        "ckpt_output_dir": ckpt,
        "data_output_dir": params.get("data_output_dir") or f"{ckpt}/data",
    }
    args.update({target: params[name] for name, target in _DIRECT.items() if params.get(name) is not None})
    from thub.backend import tracker_run_names

    args.update(tracker_run_names(params))  # an unnamed tracker run is named after the run directory
    for required in ("num_epochs", "effective_batch_size", "learning_rate", "max_seq_len"):
        if required not in args:
            raise UsageError(f"instructlab-training needs {required}; set it (backend default missing)")

    pretraining = bool(params.get("is_pretraining"))
    if pretraining:
        args["pretraining_config"] = {
            "block_size": params["block_size"],
            "document_column_name": params["document_column_name"],
        }

    # max_tokens_per_gpu -> max_batch_len; Training Hub falls back to max_seq_len (then 60000)
    max_batch_len = params.get("max_tokens_per_gpu")
    if max_batch_len is None:
        max_batch_len = max(args.get("max_seq_len") or FALLBACK_MAX_BATCH_LEN, params.get("block_size") or 0) \
            if pretraining else (args.get("max_seq_len") or FALLBACK_MAX_BATCH_LEN)
        notes.append(f"max_tokens_per_gpu not set: max_batch_len = {max_batch_len}")
    if max_batch_len < args["max_seq_len"]:
        raise UsageError(
            f"max_tokens_per_gpu ({max_batch_len}) must be at least max_seq_len ({args['max_seq_len']}): "
            "instructlab-training packs whole samples into each GPU's token budget"
        )
    if pretraining and max_batch_len < params["block_size"]:
        raise UsageError(f"max_tokens_per_gpu ({max_batch_len}) must be at least block_size ({params['block_size']})")
    args["max_batch_len"] = max_batch_len

    if params.get("fsdp_sharding_strategy") is not None or params.get("fsdp_cpu_offload") is not None:
        # TrainingArgs.fsdp_options (FSDPOptions): main_ds passes --fsdp_sharding_strategy and
        # --cpu_offload_params_fsdp to the accelerator's FullyShardedDataParallelPlugin
        args["fsdp_options"] = {"sharding_strategy": params.get("fsdp_sharding_strategy") or ILAB_SHARDING_STRATEGY,
                                "cpu_offload_params": bool(params.get("fsdp_cpu_offload"))}

    betas = _adamw_betas(params, notes)
    if betas is not None:
        args["adamw_betas"] = betas

    has_flash = flash_attn_installed() if flash_attn is None else flash_attn
    if not has_flash:
        args["disable_flash_attn"] = True
        notes.append("flash-attn is not installed: disable_flash_attn=True (SDPA attention, padded batches)")

    # thub runs instructlab-training's own data processing itself, before the launch, to count and
    # report the samples it drops (< 20 tokens, >= max_seq_len); run_training then skips it.
    args["process_data"] = False
    args["data_process_num_cpu_procs"] = max(1, min(16, os.cpu_count() or 1))

    torchrun, sources = torchrun_params(params, environ)
    return {
        "torchrun_args": torchrun,
        "torchrun_sources": sources,
        "training_args": args,
        "data": {
            "mode": "pretraining" if pretraining else "chat",
            "loss_on": "all tokens" if pretraining else
                       "all tokens" if params.get("unmask_messages") else "assistant tokens",
            "unmask": bool(params.get("unmask_messages")),
            "min_tokens": MIN_SAMPLE_TOKENS,
            "processed_file": f"{args['data_output_dir']}/data.jsonl",
        },
        # instructlab-training has no limit (keep_last_checkpoint_only overwrites one last_epoch folder in
        # place: none is complete while it is written): thub prunes hf_format/samples_N as each is reported
        "retention": thub_retention(params),
        "notes": notes,
    }
