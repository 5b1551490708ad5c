"""thub parameters -> LLaMA-Factory's own training arguments. Pure Python: no llamafactory import.

The result is exactly what the runner hands to ``llamafactory.train.tuner.run_exp`` (and writes to
``{ckpt_output_dir}/llamafactory/train.yaml``), so ``--dry-run`` shows the YAML LLaMA-Factory
will parse, the ``dataset_info.json`` entry it reads and the command. Every honoured parameter is
mapped in the README; the tests parse this output with LLaMA-Factory's own ``get_train_args``.
"""

from __future__ import annotations

from typing import Any

from thub.backend import UsageError, cuda_visible, optional_training_args, report_settings, split_batch, world_size

BACKEND = "llamafactory"
#: The name of thub's prepared dataset in the generated dataset_info.json.
DATASET = "thub_train"

_SFT = frozenset({
    "datasets", "mix_strategy", "mix_probabilities",
    "num_epochs", "max_steps", "effective_batch_size", "learning_rate", "max_seq_len", "seed",
    "save_steps", "checkpoint_at_epoch", "trust_remote_code", "gradient_checkpointing",
    "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm",
    "nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_addr", "master_port",
    "logging_steps", "wandb_project", "wandb_entity", "wandb_run_name", "tensorboard_log_dir",
    "mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name",
    "unmask_messages", "packing", "use_liger", "validation_split", "validation_frequency",
    "is_pretraining", "block_size", "document_column_name",
})
_LORA = frozenset({"lora_r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "use_dora"})

HONOURED: dict[str, frozenset[str]] = {"sft": _SFT, "lora_sft": _SFT | _LORA}

DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"num_epochs": 1, "learning_rate": 2e-5, "max_seq_len": 1024, "effective_batch_size": 8},
    "lora_sft": {"num_epochs": 1, "learning_rate": 2e-4, "max_seq_len": 1024, "effective_batch_size": 8},
}

#: The largest per-device batch thub chooses when splitting effective_batch_size.
MAX_MICRO_BATCH = 8

#: LLaMA-Factory's sharegpt reading of thub's canonical chat rows (role/content messages).
CHAT_DATASET = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
             "observation_tag": "tool", "function_tag": "function_call", "system_tag": "system"},
}
#: Continued pretraining: one ``text`` column (LLaMA-Factory's pt stage reads the prompt column).
DOCUMENT_DATASET = {"columns": {"prompt": "text"}}


def _save_strategy(params: dict[str, Any]) -> str:
    if params.get("save_steps"):
        return "steps"
    return "epoch" if params.get("checkpoint_at_epoch") else "no"


def _command(params: dict[str, Any], world: int, config_file: str) -> str:
    """The same run by hand; several processes: llamafactory-cli's own torchrun variables (per node)."""
    if world == 1:
        return f"llamafactory-cli train {config_file}"
    nodes = int(params.get("nnodes") or 1)
    env = f"FORCE_TORCHRUN=1 NNODES={nodes} NPROC_PER_NODE={world // nodes}"
    if nodes > 1:
        env += " NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"
    return f"{env} llamafactory-cli train {config_file}"


def translate(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The LLaMA-Factory arguments, dataset definition, command and environment for ``params``."""
    if algorithm not in HONOURED:
        raise UsageError(f"backend {BACKEND} does not run {algorithm!r}")
    run_dir = params["ckpt_output_dir"]
    work = f"{run_dir}/llamafactory"
    world = world_size(params)
    micro, accumulation = split_batch(params["effective_batch_size"], world, MAX_MICRO_BATCH)
    pretraining = bool(params.get("is_pretraining"))
    gpu = cuda_visible()
    args: dict[str, Any] = {
        "model_name_or_path": params["model_path"],
        "trust_remote_code": bool(params.get("trust_remote_code")),
        "stage": "pt" if pretraining else "sft",
        "do_train": True,
        "finetuning_type": "lora" if algorithm == "lora_sft" else "full",
        # thub's prepared data, registered in {work}/dataset_info.json; no `template`: LLaMA-Factory
        # parses the model's own chat template (the one thub validated and previews)
        "dataset": DATASET,
        "dataset_dir": work,
        "overwrite_cache": True,
        "output_dir": f"{run_dir}/checkpoints",
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "learning_rate": params["learning_rate"],
        "num_train_epochs": float(params["num_epochs"]),
        "max_steps": params.get("max_steps") or -1,
        "seed": params["seed"],
        "logging_steps": params["logging_steps"],
        "save_strategy": _save_strategy(params),
        # LLaMA-Factory turns gradient checkpointing on unless told not to; thub's default is off
        "disable_gradient_checkpointing": not params.get("gradient_checkpointing"),
        "enable_liger_kernel": bool(params.get("use_liger")),
        "bf16": gpu,
        "use_cpu": not gpu,
        "disable_tqdm": True,  # thub shows progress from the metrics stream
        "plot_loss": False,
    }
    args.update(optional_training_args(params))
    if params.get("lr_scheduler") is not None:  # unset: LLaMA-Factory's own (TrainingArguments' linear)
        args["lr_scheduler_type"] = params["lr_scheduler"]
    report_to, environment, extra = report_settings(params)
    args["report_to"] = report_to
    args.update(extra)
    if pretraining:
        # LLaMA-Factory's pt stage joins documents (EOS after each) and cuts cutoff_len blocks
        args["packing"] = True
    else:
        args["packing"] = bool(params.get("packing"))
        args["train_on_prompt"] = bool(params.get("unmask_messages"))
    length = params["block_size"] if pretraining else params["max_seq_len"]
    # with packing, DataArguments.__post_init__ takes one off cutoff_len: add it back, so blocks
    # (and packed sequences) hold exactly block_size (max_seq_len) tokens
    args["cutoff_len"] = length + 1 if args["packing"] else length
    if params.get("validation_split"):
        args.update({"val_size": params["validation_split"], "eval_strategy": "steps",
                     "eval_steps": params["validation_frequency"], "per_device_eval_batch_size": micro})
    if algorithm == "lora_sft":
        args.update({
            "lora_rank": params["lora_r"],
            "lora_alpha": params["lora_alpha"],
            "lora_dropout": params["lora_dropout"],
            "lora_target": ",".join(params["target_modules"]) if params.get("target_modules") else "all",
            "use_rslora": bool(params.get("use_rslora")),
            "use_dora": bool(params.get("use_dora")),
        })
    entry = dict(DOCUMENT_DATASET if pretraining else CHAT_DATASET)
    entry["file_name"] = "train.jsonl"
    config_file = f"{work}/train.yaml"
    return {
        "config_file": config_file,
        "args": args,
        "dataset_info": {DATASET: entry},
        "data": {
            "mode": "pretraining" if pretraining else "chat",
            "file": f"{work}/train.jsonl",
            "loss_on": "all tokens" if pretraining or params.get("unmask_messages") else "assistant tokens",
        },
        "world_size": world,
        # thub's child calls llamafactory.train.tuner.run_exp(args, callbacks=[thub's]) with exactly
        # these arguments; the same run by hand is `llamafactory-cli train {config_file}`
        "command": _command(params, world, config_file),
        "environment": environment,
    }
