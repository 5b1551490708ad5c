"""thub parameters -> ``mini_trainer.TrainingArgs`` / ``TorchrunArgs``. Pure Python: no mini_trainer import.

The runner builds the real dataclasses from exactly this output (:mod:`thub_plugin_minitrainer.native`),
so ``--dry-run`` shows what will be used, including the torchrun command line that
``mini_trainer.run_training`` builds. Every honoured parameter is mapped in the README.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thub.backend import UsageError, thub_retention, torchrun_values

_COMMON = frozenset({
    "num_epochs", "max_steps", "effective_batch_size", "learning_rate", "max_seq_len", "max_tokens_per_gpu",
    "seed", "data_output_dir", "save_samples", "save_steps", "checkpoint_at_epoch", "save_final_checkpoint",
    "save_total_limit", "trust_remote_code", "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "logging_steps",
    "nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_addr", "master_port",
    "wandb_project", "wandb_entity", "wandb_run_name", "mlflow_tracking_uri", "mlflow_experiment_name",
    "mlflow_run_name", "unmask_messages", "use_liger", "validation_split", "validation_data_path",
    "validation_frequency", "is_pretraining", "block_size",
})
# Not honoured, on purpose (see README "Not honoured"): beta1, beta2, eps, weight_decay (mini-trainer 0.9.0's
# run_training does not forward them to train.py), max_grad_norm (fixed at 1.0), gradient_checkpointing,
# packing (always padding-free packed), accelerate_full_state_at_epoch. tensorboard_log_dir: mini-trainer has no
# TensorBoard logger, so thub logs the metrics stream to TensorBoard from the parent (thub.trackers).

HONOURED: dict[str, frozenset[str]] = {
    "sft": _COMMON,
    "osft": _COMMON | {"unfreeze_rank_ratio", "target_patterns"},
}

_DEFAULTS = {"num_epochs": 1, "learning_rate": 1e-5, "effective_batch_size": 32, "max_seq_len": 4096,
             "max_tokens_per_gpu": 16384, "lr_scheduler": "cosine", "warmup_steps": 0}
DEFAULTS: dict[str, dict[str, Any]] = {"sft": dict(_DEFAULTS), "osft": dict(_DEFAULTS)}

TRIGGER_DIR = "/dev/shm"  # mini_trainer.full_state_checkpoint: /dev/shm/$CHECKPOINT_TRIGGER_FILENAME


def output_dir(params: Mapping[str, Any]) -> str:
    """mini-trainer's ``output_dir``: inside thub's ``checkpoints/`` (cleared by ``--overwrite``)."""
    return f"{params['ckpt_output_dir']}/checkpoints"


def data_output_dir(params: Mapping[str, Any]) -> str:
    return params.get("data_output_dir") or f"{params['ckpt_output_dir']}/_internal_data_processing"


def trigger_filename(params: Mapping[str, Any]) -> str:
    """One on-demand checkpoint trigger file per run directory (the default name is machine-wide)."""
    digest = hashlib.sha1(str(Path(params["ckpt_output_dir"]).resolve()).encode()).hexdigest()[:12]
    return f"thub-checkpoint-requested-{digest}"


def torchrun_args(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``TorchrunArgs`` fields: explicit parameter > ``PET_*`` environment > mini-trainer's defaults."""
    values = torchrun_values(params, os.environ if environ is None else environ)
    values.pop("rdzv_backend", None)  # mini-trainer picks --standalone / static / c10d itself
    if values.get("rdzv_endpoint") and values.get("master_addr"):
        raise UsageError("rdzv_endpoint and master_addr cannot both be set (torchrun uses one rendezvous); "
                         "unset one of them (parameters or PET_RDZV_ENDPOINT / PET_MASTER_ADDR)")
    nproc = values["nproc_per_node"]
    if isinstance(nproc, str):
        nproc = nproc.strip().lower()
        if nproc in ("auto", "gpu"):
            nproc = "gpu"  # torchrun: one process per visible GPU
        elif nproc.isdigit():
            nproc = int(nproc)
        else:
            raise UsageError("nproc_per_node: expected an integer, 'gpu' or 'auto', "
                             f"found {values['nproc_per_node']!r}")
    out: dict[str, Any] = {"nnodes": int(values["nnodes"]), "nproc_per_node": nproc,
                           "node_rank": int(values.get("node_rank") or 0), "rdzv_id": values.get("rdzv_id") or 123}
    for name in ("rdzv_endpoint", "master_addr"):
        if values.get(name):
            out[name] = str(values[name])
    if values.get("master_port") is not None:
        out["master_port"] = int(values["master_port"])
    return out


def _checkpoint_samples(params: Mapping[str, Any]) -> int | None:
    if params.get("save_samples") is not None and params.get("save_steps") is not None:
        raise UsageError("save_samples and save_steps both set; mini-trainer saves every N samples, choose one")
    if params.get("save_samples"):
        return int(params["save_samples"])
    if params.get("save_steps"):
        # every optimizer step consumes exactly batch_size samples (the last step of an epoch may be short)
        return int(params["save_steps"]) * int(params["effective_batch_size"])
    return None


def training_args(algorithm: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``TrainingArgs`` keyword arguments (JSON: the enum and the nested dataclass as plain values)."""
    pretraining = bool(params.get("is_pretraining"))
    args: dict[str, Any] = {
        "model_name_or_path": params["model_path"],
        "data_path": f"{data_output_dir(params)}/data.jsonl",
        "batch_size": params["effective_batch_size"],
        "max_tokens_per_gpu": params["max_tokens_per_gpu"],
        "learning_rate": params["learning_rate"],
        "output_dir": output_dir(params),
        "num_warmup_steps": params["warmup_steps"],
        "lr_scheduler": params["lr_scheduler"],
        "lr_scheduler_kwargs": dict(params.get("lr_scheduler_kwargs") or {}),
        "seed": params["seed"],
        "use_liger_kernels": bool(params.get("use_liger")),
        "osft": algorithm == "osft",
        "min_samples_per_checkpoint": _checkpoint_samples(params),
        "training_mode": "step" if params.get("max_steps") else "epoch",
        "max_epochs": params["num_epochs"],
        "max_steps": params.get("max_steps") or 0,
        "checkpoint_at_epoch": bool(params.get("checkpoint_at_epoch")),
        "save_final_checkpoint": bool(params.get("save_final_checkpoint", True)),
        "validation_split": params.get("validation_split") or 0.0,
        # thub's tokenized copy of the held-out file (prepared as data.jsonl is: runner.prepare_data)
        "validation_data_path": f"{data_output_dir(params)}/validation.jsonl"
        if params.get("validation_data_path") else None,
        "validation_frequency": params.get("validation_frequency"),
        "pretraining_config": {"block_size": params["block_size"]} if pretraining else None,
        "trust_remote_code": bool(params.get("trust_remote_code")),
        # thub's interrupt (SIGTERM/SIGINT) -> trigger file -> full-state checkpoint -> --resume
        "on_demand_checkpointing": True,
    }
    if algorithm == "osft":
        args["osft_unfreeze_rank_ratio"] = params["unfreeze_rank_ratio"]
        args["osft_target_patterns"] = list(params["target_patterns"]) if params.get("target_patterns") else None
    for name in ("wandb_project", "wandb_entity", "wandb_run_name", "mlflow_tracking_uri",
                 "mlflow_experiment_name", "mlflow_run_name"):
        if params.get(name):
            args[name] = params[name]
    from thub.backend import tracker_run_names

    args.update(tracker_run_names(params))  # an unnamed tracker run is named after the run directory
    return args


def _train_script() -> str:
    try:
        spec = importlib.util.find_spec("mini_trainer")  # locates without importing (no torch)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "<site-packages>/mini_trainer/train.py"
    return str(Path(spec.origin).parent / "train.py")


def command(torch: Mapping[str, Any], train: Mapping[str, Any], train_script: str | None = None) -> list[str]:
    """The command ``mini_trainer.run_training`` 0.9.0 runs for these arguments (shown by --dry-run).

    A test builds the real dataclasses and checks this against the command run_training really starts.
    """
    cmd = ["torchrun", f"--nnodes={torch['nnodes']}", f"--node-rank={torch['node_rank']}",
           f"--nproc-per-node={torch['nproc_per_node']}", f"--rdzv-id={torch['rdzv_id']}"]
    if torch.get("master_addr"):
        cmd += [f"--master-addr={torch['master_addr']}", "--rdzv-backend=static"]
        if torch.get("master_port"):
            cmd.append(f"--master-port={torch['master_port']}")
    elif torch.get("rdzv_endpoint"):
        cmd.append(f"--rdzv-endpoint={torch['rdzv_endpoint']}")
    else:
        cmd.append("--standalone")
    t = train
    kwargs = json.dumps(t["lr_scheduler_kwargs"]) if t.get("lr_scheduler_kwargs") else "{}"
    cmd += [train_script or _train_script(), f"--model-name-or-path={t['model_name_or_path']}",
            f"--data-path={t['data_path']}", f"--batch-size={t['batch_size']}",
            f"--max-tokens-per-gpu={t['max_tokens_per_gpu']}", f"--learning-rate={t['learning_rate']}",
            f"--num-warmup-steps={t['num_warmup_steps']}", f"--lr-scheduler={t['lr_scheduler']}",
            f"--lr-scheduler-kwargs={kwargs}", f"--seed={t['seed']}", f"--output-dir={t['output_dir']}",
            f"--training-mode={t['training_mode']}", f"--max-epochs={t['max_epochs']}",
            f"--max-steps={t['max_steps']}", "--max-tokens=0", "--train-dtype=float32"]
    if t.get("wandb_project"):
        cmd.append(f"--wandb-project={t['wandb_project']}")
        cmd += [f"--wandb-{k.replace('_', '-')}={t[f'wandb_{k}']}" for k in ("run_name", "entity")
                if t.get(f"wandb_{k}")]
    if t.get("mlflow_tracking_uri"):
        cmd.append(f"--mlflow-tracking-uri={t['mlflow_tracking_uri']}")
        cmd += [f"--mlflow-{k.replace('_', '-')}={t[f'mlflow_{k}']}" for k in ("experiment_name", "run_name")
                if t.get(f"mlflow_{k}")]
    # in run_training's order (mini_trainer/api_train.py)
    if t.get("validation_data_path") is not None:
        cmd.append(f"--validation-data-path={t['validation_data_path']}")
    if t["validation_split"] > 0.0:
        cmd.append(f"--validation-split={t['validation_split']}")
    if (t["validation_split"] > 0.0 or t.get("validation_data_path") is not None) \
            and t.get("validation_frequency") is not None:
        cmd.append(f"--validation-frequency={t['validation_frequency']}")
    if t.get("pretraining_config"):
        cmd.append(f"--block-size={t['pretraining_config']['block_size']}")
    if t.get("min_samples_per_checkpoint") is not None:
        cmd.append(f"--min-samples-per-checkpoint={t['min_samples_per_checkpoint']}")
    if t["use_liger_kernels"]:
        cmd.append("--use-liger-kernels")
    if t["osft"]:
        cmd += ["--osft", f"--osft-unfreeze-rank-ratio={t['osft_unfreeze_rank_ratio']}"]
        if t.get("osft_target_patterns"):
            cmd.append(f"--osft-target-patterns={','.join(t['osft_target_patterns'])}")
        cmd.append("--osft-upcast-dtype=float32")
    if t["checkpoint_at_epoch"]:
        cmd.append("--checkpoint-at-epoch")
    if t["save_final_checkpoint"]:
        cmd.append("--save-final-checkpoint")
    if t["trust_remote_code"]:
        cmd.append("--trust-remote-code")
    if t["on_demand_checkpointing"]:
        cmd.append("--on-demand-checkpointing")
    if t.get("resume_from_full_state_checkpoint"):
        cmd.append(f"--resume-from-full-state-checkpoint={t['resume_from_full_state_checkpoint']}")
    return cmd


def _check(params: Mapping[str, Any]) -> None:
    limit = params["max_tokens_per_gpu"]
    if params.get("is_pretraining"):
        if params["block_size"] > limit:
            raise UsageError(f"block_size {params['block_size']} > max_tokens_per_gpu {limit}: mini-trainer's "
                             "collator would drop every block; raise max_tokens_per_gpu or lower block_size")
    elif params["max_seq_len"] > limit:
        raise UsageError(f"max_seq_len {params['max_seq_len']} > max_tokens_per_gpu {limit}: mini-trainer's "
                         "collator drops samples longer than max_tokens_per_gpu; raise max_tokens_per_gpu "
                         f"to at least {params['max_seq_len']} or lower max_seq_len")


def translate(algorithm: str, params: Mapping[str, Any], environ: Mapping[str, str] | None = None,
              resume_from: str | None = None) -> dict[str, Any]:
    """The mini-trainer arguments, the torchrun command and thub's data preparation for ``params``.

    ``resume_from``: the full-state checkpoint thub resumes from (the runner's decision, see
    :func:`thub_plugin_minitrainer.metrics.resume_point`), passed as
    ``resume_from_full_state_checkpoint``: given a path, mini-trainer does not pick one itself.
    """
    if algorithm not in HONOURED:
        raise UsageError(f"backend mini-trainer does not run {algorithm!r}")
    _check(params)
    torch = torchrun_args(params, environ)
    train = training_args(algorithm, params)
    train["resume_from_full_state_checkpoint"] = resume_from
    pretraining = bool(params.get("is_pretraining"))
    return {
        "function": "mini_trainer.run_training",
        "torchrun_args": torch,
        "training_args": train,
        "command": command(torch, train),
        "data": {
            "mode": "pretraining" if pretraining else "chat",
            "output": train["data_path"],
            # validation_data_path's rows, tokenized into training_args.validation_data_path
            **({"validation_data_path": params["validation_data_path"]} if params.get("validation_data_path")
               else {}),
            "max_seq_len": None if pretraining else params["max_seq_len"],
            "overlong": "keep (blocks of block_size)" if pretraining else "drop",
            "loss_on": "all tokens" if pretraining or params.get("unmask_messages") else "assistant tokens",
        },
        "environment": {"CHECKPOINT_TRIGGER_FILENAME": trigger_filename(params)},
        "logging_steps": params["logging_steps"],
        # mini-trainer 0.9.0 keeps every hf_format/samples_N (TrainingArgs has no limit): thub prunes them
        # as each is reported; the full_state_checkpoints/ a resume uses are never pruned
        "retention": thub_retention(params),
    }
