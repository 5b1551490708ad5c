"""thub parameters -> an axolotl config. Pure Python: no axolotl import.

The runner writes this config to ``{ckpt_output_dir}/axolotl/config.yaml`` and hands it to axolotl
(``load_cfg`` -> ``do_train``), so ``--dry-run`` shows what axolotl will read; the runner adds only
``resume_from_checkpoint`` (``--resume``) and a sub-folder of ``dataset_prepared_path`` named by the
tokenized data's hash (axolotl keys that cache by config, not content). The data is thub's own
tokenized examples (``data`` in the plan says how they are built), so no axolotl prompt strategy
decides what is trained. The tests
validate it with axolotl's own pydantic schema (``axolotl.utils.config.validate_config``), which
OpenThoughts' launcher never called. Every honoured parameter is mapped in the README.
"""

from __future__ import annotations

from typing import Any

from thub.backend import (
    UsageError,
    cuda_visible,
    optional_training_args,
    split_batch,
    validation_training_args,
    world_size,
)

BACKEND = "axolotl"
#: The axolotl plugin (``axolotl.integrations.base.BasePlugin``) that adds thub's Trainer callback.
THUB_PLUGIN = "thub_plugin_axolotl.hooks.ThubPlugin"
LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"

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

# Preference tuning: thub renders each row with the model's chat template into the prompt/answer
# strings axolotl's RL data path trains (runner.preference_texts); no thub masks, packing,
# pretraining blocks or validation split there. axolotl has no reference-model path (it loads
# base_model again): reference_model_path is not honoured.
_PREFERENCE = _SFT - {"unmask_messages", "packing", "is_pretraining", "block_size", "validation_split",
                      "validation_data_path", "validation_frequency", "use_liger"}
_DPO = _PREFERENCE | {"beta", "loss_type", "label_smoothing", "simpo_gamma"}
_KTO = _PREFERENCE | {"beta", "desirable_weight", "undesirable_weight"}

HONOURED: dict[str, frozenset[str]] = {"sft": _SFT, "lora_sft": _SFT | _LORA, "dpo": _DPO, "kto": _KTO}

DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"num_epochs": 1, "learning_rate": 2e-5, "max_seq_len": 1024, "effective_batch_size": 8},
    "lora_sft": {"num_epochs": 1, "learning_rate": 2e-4, "max_seq_len": 1024, "effective_batch_size": 8},
    # axolotl's own DPO/KTO examples (examples/*/dpo*.yaml, kto*.yaml) train at 5e-6 or below
    "dpo": {"num_epochs": 1, "learning_rate": 5e-6, "max_seq_len": 1024, "effective_batch_size": 8},
    "kto": {"num_epochs": 1, "learning_rate": 5e-6, "max_seq_len": 1024, "effective_batch_size": 8},
}

#: thub's dpo loss_type -> axolotl's ``rl`` and extra config: sigmoid/ipo/hinge are TRL's DPOTrainer
#: losses (``dpo_loss_type``, axolotl's recommended form for ipo), orpo and simpo their own trainers
DPO_LOSSES: dict[str, dict[str, Any]] = {
    "sigmoid": {"rl": "dpo", "dpo_loss_type": ["sigmoid"]},
    "ipo": {"rl": "dpo", "dpo_loss_type": ["ipo"]},
    "hinge": {"rl": "dpo", "dpo_loss_type": ["hinge"]},
    "orpo": {"rl": "orpo"},
    # SimPO as LLaMA-Factory and the paper define it: no behaviour-cloning term (CPOConfig's
    # cpo_alpha is 1.0 by default: CPO-SimPO)
    "simpo": {"rl": "simpo", "cpo_alpha": 0.0},
}
#: TRL CPOConfig's own simpo_gamma, written out: axolotl passes simpo_gamma: null through otherwise
SIMPO_GAMMA = 0.5

PREFERENCE_NOTE = ("thub renders each row with the model's chat template (the prompt with the generation prompt; "
                   "each answer as the text the template adds after it) into the prompt/chosen/rejected or "
                   "prompt/completion/label strings axolotl's RL data path takes as they are (no dataset type); "
                   "TRL's trainer under axolotl tokenizes them")

DATA_NOTE = ("thub tokenizes the rows itself (the model's chat template, thub's masks and overlong policy; "
             "documents joined with EOS into block_size blocks) and axolotl trains those input_ids/labels as "
             "they are: no axolotl prompt strategy runs")

#: The largest per-device batch (micro_batch_size) thub chooses when splitting effective_batch_size.
MAX_MICRO_BATCH = 8


def tokenized_dataset(path: str) -> dict[str, Any]:
    """axolotl's dataset entry for thub's tokenized examples: no ``type``, so axolotl's
    ``get_dataset_wrapper`` finds ``input_ids``/``attention_mask``/``labels`` and uses the rows as
    they are (``_is_dataset_already_tokenized``): no chat_template strategy, no completion chunking."""
    return {"path": path, "ds_type": "json"}


#: thub's overlong policy -> axolotl's excess_length_strategy (thub applies it first; see translate)
EXCESS_LENGTH = {"truncate": "truncate", "drop": "drop", "error": "raise"}


def _save_strategy(params: dict[str, Any]) -> str:
    if params.get("save_steps"):
        return "steps"
    return "epoch" if params.get("checkpoint_at_epoch") else "no"


def _loggers(params: dict[str, Any]) -> dict[str, Any]:
    from thub.backend import shared_run_name, tracker_run_names

    names = tracker_run_names(params)  # an unnamed run is named after the run directory
    if len(names) == 2:  # axolotl gives HF Trainer one run_name: wandb_name when W&B is on
        names = dict.fromkeys(names, shared_run_name(params, "axolotl run_name (HF Trainer's, for W&B and MLflow)"))
    out: dict[str, Any] = {}
    if params.get("wandb_project"):
        out.update({"wandb_project": params["wandb_project"], "wandb_entity": params.get("wandb_entity"),
                    "wandb_name": names["wandb_run_name"]})
    if params.get("tensorboard_log_dir"):
        out["use_tensorboard"] = True
    if params.get("mlflow_tracking_uri"):
        out.update({"use_mlflow": True, "mlflow_tracking_uri": params["mlflow_tracking_uri"],
                    "mlflow_experiment_name": params.get("mlflow_experiment_name"),
                    "mlflow_run_name": names["mlflow_run_name"]})
    return {k: v for k, v in out.items() if v is not None}


def _command(params: dict[str, Any], world: int, config_file: str) -> str:
    """The same run by hand; several processes: axolotl's torchrun launcher (on every node)."""
    if world == 1:
        return f"python -m axolotl.cli.train {config_file}"
    nodes = int(params.get("nnodes") or 1)
    extra = f" --nnodes {nodes} --nproc_per_node {world // nodes}"
    if nodes > 1:
        extra += " --node_rank $NODE_RANK --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT"
    return f"axolotl train {config_file} --launcher torchrun --{extra}"


def _preference(algorithm: str, params: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``config`` for axolotl's RL trainers (changed in place); returns the plan's data section."""
    config.update({"rl_beta": params["beta"], "remove_unused_columns": False})
    if algorithm == "dpo":
        config.update(DPO_LOSSES[params["loss_type"]])
        if params.get("label_smoothing") is not None:
            config["dpo_label_smoothing"] = params["label_smoothing"]
        if params["loss_type"] == "simpo":
            given = params.get("simpo_gamma")
            config["simpo_gamma"] = SIMPO_GAMMA if given is None else given
    else:
        config.update({"rl": "kto", "kto_desirable_weight": params["desirable_weight"],
                       "kto_undesirable_weight": params["undesirable_weight"]})
    for key in ("sample_packing", "min_sample_len"):  # SFT data settings axolotl's RL path does not read
        config.pop(key)
    reference_free = algorithm == "dpo" and params["loss_type"] in ("orpo", "simpo")
    return {
        "mode": algorithm,
        "rendered_by": "thub",
        "tokenized_by": "axolotl (TRL's trainer)",
        "note": PREFERENCE_NOTE,
        "file": config["datasets"][0]["path"],
        "max_seq_len": params["max_seq_len"],
        "overlong": str(params["overlong"]),
        "reference": "none (reference-free loss)" if reference_free else
        f"a frozen copy of the initial policy ({params['model_path']})",
    }


def translate(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The axolotl config, command and environment for ``params``."""
    if algorithm not in HONOURED:
        raise UsageError(f"backend {BACKEND} does not run {algorithm!r}")
    run_dir = params["ckpt_output_dir"]
    work = f"{run_dir}/axolotl"
    world = world_size(params)
    micro, accumulation = split_batch(params["effective_batch_size"], world, MAX_MICRO_BATCH)
    preference = algorithm in ("dpo", "kto")
    pretraining = not preference and bool(params.get("is_pretraining"))
    overlong = str(params["overlong"])
    gpu = cuda_visible()
    data_file = f"{work}/train.jsonl"
    config: dict[str, Any] = {
        "base_model": params["model_path"],
        "trust_remote_code": bool(params.get("trust_remote_code")),
        # the model's own chat template (the one thub validated and tokenized with) stays the
        # saved tokenizer's
        "chat_template": "tokenizer_default",
        # thub's examples, tokenized by thub (runner.write_inputs): axolotl trains these tokens
        "datasets": [tokenized_dataset(data_file)],
        "dataset_prepared_path": f"{work}/prepared",
        "val_set_size": 0.0 if preference else float(params.get("validation_split") or 0.0),
        "sequence_len": params["block_size"] if pretraining else params["max_seq_len"],
        "sample_packing": not preference and bool(params.get("packing")),
        # thub applied `overlong` to every example already, so none is longer than sequence_len and
        # axolotl leaves none out; its own strategy is still thub's policy, never its silent `drop` default
        "excess_length_strategy": EXCESS_LENGTH[overlong],
        "min_sample_len": 1,  # axolotl's default 2 would drop a 1-token example thub keeps
        # thub's order (mix_strategy decided it); the Trainer's sampler shuffles, as on every backend
        "shuffle_merged_datasets": False,
        "dataset_num_proc": 1,  # the examples are tokenized: axolotl only filters them, no process pool
        # thub decides whether a run resumes (--resume -> resume_from_checkpoint), never axolotl
        "auto_resume_from_checkpoints": False,
        "output_dir": f"{run_dir}/checkpoints",
        # micro_batch_size x gradient_accumulation_steps x world size = effective_batch_size
        # (axolotl's normalize_config multiplies by WORLD_SIZE itself)
        "micro_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "num_epochs": float(params["num_epochs"]),
        "learning_rate": params["learning_rate"],
        "optimizer": "adamw_torch",
        "seed": params["seed"],
        "logging_steps": params["logging_steps"],
        "gradient_checkpointing": bool(params.get("gradient_checkpointing")),
        "bf16": "auto" if gpu else False,
        "fp16": False,
        "tf32": False,
        "plugins": [THUB_PLUGIN],
        # thub's stop signal (SIGTERM/SIGINT) reaches the child's whole process group: a DataLoader
        # worker killed by it makes the Trainer raise instead of saving a checkpoint (measured), and
        # axolotl otherwise starts one worker per GPU. The data is tokenized ahead: workers only collate.
        "dataloader_num_workers": 0,
    }
    if params.get("max_steps"):
        config["max_steps"] = params["max_steps"]
    config["save_strategy"] = _save_strategy(params)
    # save_steps, warmup, optimizer and clipping under their TrainingArguments names, which axolotl's config takes
    config.update(optional_training_args(params))
    if params.get("lr_scheduler") is not None:  # unset: axolotl's own (its schema's cosine)
        config["lr_scheduler"] = params["lr_scheduler"]
    held_out = None if preference else params.get("validation_data_path")
    if not preference and (params.get("validation_split") or held_out):
        # eval_strategy/eval_steps, and metric_for_best_model/greater_is_better (axolotl's config keys,
        # passed to its TrainingArguments): the Trainer's rotation keeps the best checkpoint by eval_loss
        config.update(validation_training_args(params))
    if held_out:
        # the separate held-out file, tokenized by thub as the training rows are (runner.write_inputs):
        # axolotl's test_datasets (with val_set_size 0) becomes the Trainer's eval_dataset
        config["test_datasets"] = [tokenized_dataset(f"{work}/validation.jsonl")]
    if not preference and params.get("use_liger"):
        config["plugins"].append(LIGER_PLUGIN)
        config.update({"liger_rope": True, "liger_rms_norm": True, "liger_glu_activation": True,
                       "liger_fused_linear_cross_entropy": True})
    if algorithm == "lora_sft":
        config.update({"adapter": "lora", "lora_r": params["lora_r"], "lora_alpha": params["lora_alpha"],
                       "lora_dropout": params["lora_dropout"],
                       "peft_use_rslora": bool(params.get("use_rslora")),
                       "peft_use_dora": bool(params.get("use_dora"))})
        if params.get("target_modules"):
            config["lora_target_modules"] = list(params["target_modules"])
        else:
            config["lora_target_linear"] = True
        if not gpu:  # axolotl auto-enables its Triton LoRA kernels, which need a GPU
            config.update({"lora_mlp_kernel": False, "lora_qkv_kernel": False, "lora_o_kernel": False})
    config.update(_loggers(params))
    data = _preference(algorithm, params, config) if preference else None
    config_file = f"{work}/config.yaml"
    environment = {"AXOLOTL_DO_NOT_TRACK": "1"}
    if params.get("tensorboard_log_dir"):
        environment["TENSORBOARD_LOGGING_DIR"] = params["tensorboard_log_dir"]
    return {
        "config_file": config_file,
        "config": config,
        "data": data or {
            "mode": "pretraining" if pretraining else "chat",
            "tokenized_by": "thub",
            "note": DATA_NOTE,
            "file": data_file,
            **({"validation_file": f"{work}/validation.jsonl", "validation_data_path": held_out} if held_out else {}),
            "loss_on": "all tokens" if pretraining or params.get("unmask_messages") else
            "assistant tokens (thub's mask; rows with unmask: every token)",
            **({"block_size": params["block_size"]} if pretraining else
               {"max_seq_len": params["max_seq_len"], "overlong": overlong,
                "unmask_messages": bool(params.get("unmask_messages"))}),
        },
        "world_size": world,
        # thub's child runs axolotl.cli.config.load_cfg + axolotl.cli.train.do_train on this file;
        # the same run by hand:
        "command": _command(params, world, config_file),
        "environment": environment,
    }
