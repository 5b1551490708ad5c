"""thub parameters -> LLaMA-Factory's own training arguments. Pure Python: no llamafactory import.

The result is exactly what the runner hands to ``llamafactory.train.tuner.run_exp`` (and writes to
``{ckpt_output_dir}/llamafactory/train.yaml``), so ``--dry-run`` shows the YAML LLaMA-Factory
will parse, where its data comes from (thub's tokenized examples, ``data``) and the command. Every honoured parameter is
mapped in the README; the tests parse this output with LLaMA-Factory's own ``get_train_args``.
"""

from __future__ import annotations

from typing import Any

from thub.backend import (
    UsageError,
    cuda_visible,
    optional_training_args,
    report_settings,
    split_batch,
    validation_training_args,
    world_size,
)

BACKEND = "llamafactory"
#: The dataset name LLaMA-Factory's get_train_args requires; unused (the data is at tokenized_path).
DATASET = "thub_train"
#: The eval dataset name its get_train_args requires for a separate held-out file (validation_data_path);
#: unused too: thub saves those rows as the ``validation`` split at tokenized_path, which its loader reads.
EVAL_DATASET = "thub_validation"
#: The file of preference rows LLaMA-Factory reads (dpo, kto), in ``{ckpt_output_dir}/llamafactory``.
PREFERENCE_FILE = "train.json"

_SFT = frozenset({
    "num_epochs", "max_steps", "effective_batch_size", "learning_rate", "max_seq_len", "seed",
    "save_steps", "checkpoint_at_epoch", "save_total_limit", "trust_remote_code", "gradient_checkpointing",
    "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm",
    "nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_addr", "master_port",
    "logging_steps", "wandb_project", "wandb_entity", "wandb_run_name", "tensorboard_log_dir",
    "mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name",
    "unmask_messages", "overlong", "packing", "use_liger", "validation_split", "validation_data_path",
    "validation_frequency", "is_pretraining", "block_size",
})
_LORA = frozenset({"lora_r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "use_dora"})
# Preference tuning trains LLaMA-Factory's own pairs (its ranking/KTO data path, dataset.py): no
# thub masks, packing, pretraining blocks or validation split apply there
_PREFERENCE = _SFT - {"unmask_messages", "packing", "is_pretraining", "block_size", "validation_split",
                      "validation_data_path", "validation_frequency", "use_liger"}
_DPO = _PREFERENCE | {"beta", "loss_type", "reference_model_path", "label_smoothing", "simpo_gamma"}
_KTO = _PREFERENCE | {"beta", "reference_model_path", "desirable_weight", "undesirable_weight"}

HONOURED: dict[str, frozenset[str]] = {"sft": _SFT, "lora_sft": _SFT | _LORA, "dpo": _DPO, "kto": _KTO}

DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"num_epochs": 1, "learning_rate": 2e-5, "max_seq_len": 1024, "effective_batch_size": 8},
    "lora_sft": {"num_epochs": 1, "learning_rate": 2e-4, "max_seq_len": 1024, "effective_batch_size": 8},
    # LLaMA-Factory's own DPO/KTO examples (examples/train_*/*_dpo.yaml, *_kto.yaml) train at 5e-6
    "dpo": {"num_epochs": 1, "learning_rate": 5e-6, "max_seq_len": 1024, "effective_batch_size": 8},
    "kto": {"num_epochs": 1, "learning_rate": 5e-6, "max_seq_len": 1024, "effective_batch_size": 8},
}

#: thub's preference algorithm -> LLaMA-Factory's stage
PREFERENCE_STAGES = {"dpo": "dpo", "kto": "kto"}

#: The largest per-device batch thub chooses when splitting effective_batch_size.
MAX_MICRO_BATCH = 8

#: How LLaMA-Factory gets its data: thub's own examples, already tokenized (see ``dataset.py``).
DATA_NOTE = ("LLaMA-Factory trains thub's tokens: thub tokenizes the validated rows with the model's chat "
             "template and its own loss masks (pretraining: documents joined with EOS into block_size blocks) "
             "and saves input_ids/attention_mask/labels with datasets.save_to_disk at tokenized_path; "
             "LLaMA-Factory loads that and skips its own converter, template and processors")


#: How LLaMA-Factory gets preference data: its own ranking (DPO) or kto_tag (KTO) data path.
PREFERENCE_NOTE = ("LLaMA-Factory builds the pairs: thub writes the validated rows in its sharegpt format "
                   "(DPO: ranking with chosen/rejected columns; KTO: a kto_tag column) with a dataset_info.json, "
                   "and LLaMA-Factory's own converter, template (parsed from the model's chat template) and "
                   "pairwise/feedback processor tokenize them, cut at cutoff_len by its infer_seqlen")


def _preference(algorithm: str, params: dict[str, Any], args: dict[str, Any], work: str) -> dict[str, Any]:
    """``args`` for LLaMA-Factory's dpo/kto stage (changed in place); returns the plan's data section."""
    # LLaMA-Factory reads thub's rows from dataset_dir (dataset.py writes them) and tokenizes them itself
    del args["tokenized_path"]
    args.update({"stage": PREFERENCE_STAGES[algorithm], "dataset_dir": work, "pref_beta": params["beta"]})
    reference_free = algorithm == "dpo" and params["loss_type"] in ("orpo", "simpo")
    if params.get("reference_model_path"):
        args["ref_model"] = params["reference_model_path"]
    if algorithm == "dpo":
        args["pref_loss"] = params["loss_type"]  # the same names: sigmoid, hinge, ipo, orpo, simpo
        if params.get("label_smoothing") is not None:
            args["dpo_label_smoothing"] = params["label_smoothing"]
        if params.get("simpo_gamma") is not None:
            args["simpo_gamma"] = params["simpo_gamma"]
    else:
        args.update({"kto_chosen_weight": params["desirable_weight"],
                     "kto_rejected_weight": params["undesirable_weight"]})
    return {
        "mode": algorithm,
        "written_by": "thub",
        "tokenized_by": "llamafactory",
        "note": PREFERENCE_NOTE,
        "format": "sharegpt, ranking: true (chosen/rejected)" if algorithm == "dpo" else "sharegpt, kto_tag",
        "file": f"{work}/{PREFERENCE_FILE}",
        "dataset_info": f"{work}/dataset_info.json",
        "max_seq_len": params["max_seq_len"],
        # truncate: LLaMA-Factory's infer_seqlen cuts (prompt and answer, the answer kept first);
        # drop/error: thub leaves out / refuses a row over max_seq_len before writing it (dataset.py)
        "overlong": params["overlong"],
        "reference": "none (reference-free loss)" if reference_free else
        params.get("reference_model_path") or f"a frozen copy of the initial policy ({params['model_path']})",
        "seed": params["seed"],
    }


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
    preference = algorithm in PREFERENCE_STAGES
    pretraining = not preference and bool(params.get("is_pretraining"))
    gpu = cuda_visible()
    args: dict[str, Any] = {
        "model_name_or_path": params["model_path"],
        "trust_remote_code": bool(params.get("trust_remote_code")),
        "stage": "pt" if pretraining else "sft",
        "do_train": True,
        "finetuning_type": "lora" if algorithm == "lora_sft" else "full",
        # thub's examples, tokenized by thub (DATA_NOTE): LLaMA-Factory loads them from tokenized_path
        # and ignores its other data arguments; get_train_args still requires a dataset name
        "dataset": DATASET,
        "tokenized_path": f"{work}/tokenized",
        # LLaMA-Factory's own packing (and its cutoff_len - 1) off: thub packs (dataset.py)
        "packing": False,
        "output_dir": f"{run_dir}/checkpoints",
        # an explicit resume decision: never LLaMA-Factory's get_last_checkpoint (which would pick a
        # half-written checkpoint thub skipped); the runner sets resume_from_checkpoint and turns
        # this off when thub resumes (so LLaMA-Factory keeps its trainer_log.jsonl)
        "overwrite_output_dir": True,
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
        "bf16": gpu,
        "use_cpu": not gpu,
        "disable_tqdm": True,  # thub shows progress from the metrics stream
        "plot_loss": False,
    }
    if not preference:  # dpo/kto have no use_liger (LLaMA-Factory's own default: off)
        args["enable_liger_kernel"] = bool(params.get("use_liger"))
    args.update(optional_training_args(params))
    if params.get("lr_scheduler") is not None:  # unset: LLaMA-Factory's own (TrainingArguments' linear)
        args["lr_scheduler_type"] = params["lr_scheduler"]
    report_to, environment, extra = report_settings(params)
    args["report_to"] = report_to
    args.update(extra)
    length = params["block_size"] if pretraining else params["max_seq_len"]
    # the longest sequence LLaMA-Factory sees (its model_max_length); thub cut the examples to it
    args["cutoff_len"] = length
    validation = None if preference else params.get("validation_split")
    held_out = None if preference else params.get("validation_data_path")
    if validation or held_out:
        # thub splits (dataset.py) or tokenizes the separate file, and saves the validation split;
        # LLaMA-Factory's loader ignores val_size/eval_dataset with tokenized_path, but its
        # get_train_args requires one of them for eval_strategy. The best checkpoint by eval_loss:
        # metric_for_best_model, which the Trainer's rotation keeps (validation_training_args)
        args.update({**({"val_size": validation} if validation else {"eval_dataset": EVAL_DATASET}),
                     **validation_training_args(params), "per_device_eval_batch_size": micro})
    if algorithm == "lora_sft":
        args.update({
            "lora_rank": params["lora_r"],
            "lora_alpha": params["lora_alpha"],
            "lora_dropout": params["lora_dropout"],
            "lora_target": ",".join(params["target_modules"]) if params.get("target_modules") else "all",
            "use_rslora": bool(params.get("use_rslora")),
            "use_dora": bool(params.get("use_dora")),
        })
    config_file = f"{work}/train.yaml"
    data = _preference(algorithm, params, args, work) if preference else None
    return {
        "config_file": config_file,
        "args": args,
        "data": data or {
            "mode": "pretraining" if pretraining else "chat",
            "tokenized_by": "thub",
            "note": DATA_NOTE,
            "tokenized_path": args["tokenized_path"],
            "loss_on": "all tokens" if pretraining or params.get("unmask_messages") else
            "assistant tokens (thub's mask; rows with unmask: every token)",
            **({"block_size": params["block_size"]} if pretraining else
               {"max_seq_len": params["max_seq_len"], "overlong": params["overlong"],
                "packing": bool(params.get("packing"))}),
            "validation_split": validation or None,
            "validation_data_path": held_out,
            "seed": params["seed"],
        },
        "world_size": world,
        # thub's child calls llamafactory.train.tuner.run_exp(args, callbacks=[thub's]) with exactly
        # these arguments; the same run by hand is `llamafactory-cli train {config_file}`
        "command": _command(params, world, config_file),
        "environment": environment,
    }
