"""thub parameters -> TRL/PEFT configuration. Pure Python: no TRL import.

The runner builds ``SFTConfig``/``GRPOConfig``/``DPOConfig``/``KTOConfig``/``LoraConfig`` from
exactly this output, so the dry run shows what will really be used. Every honoured parameter is
mapped in the README.
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

_BASE = frozenset({
    "num_epochs", "max_steps", "learning_rate", "seed", "save_steps", "checkpoint_at_epoch", "save_total_limit",
    "save_final_checkpoint", "trust_remote_code", "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps",
    "beta1", "beta2", "eps", "weight_decay", "max_grad_norm", "logging_steps",
    "nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_addr", "master_port",
    "wandb_project", "wandb_entity", "wandb_run_name", "tensorboard_log_dir",
    "mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name",
})
_SFT = _BASE | {
    "effective_batch_size", "max_seq_len", "unmask_messages", "overlong", "packing", "gradient_checkpointing",
    "use_liger", "validation_split", "validation_data_path", "validation_frequency", "is_pretraining", "block_size",
}
_LORA = frozenset({
    "lora_r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "use_dora",
    "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_compute_dtype", "bnb_4bit_use_double_quant",
})
_GRPO = _BASE | {"reward", "group_size", "prompt_batch_size", "max_tokens", "temperature", "beta", "system_prompt",
                 "gradient_checkpointing"}

# Not here, so refused when set: label_smoothing (TRL 1.16's sigmoid loss has no conservative-DPO term: the value would
# change nothing), simpo_gamma (no simpo here, see DPO_LOSSES).
_PREFERENCE = _BASE | {"effective_batch_size", "max_seq_len", "overlong", "gradient_checkpointing", "beta",
                       "reference_model_path"}

HONOURED: dict[str, frozenset[str]] = {
    "sft": frozenset(_SFT),
    "lora_sft": frozenset(_SFT | _LORA | {"save_merged"}),
    "grpo": frozenset(_GRPO),
    "lora_grpo": frozenset(_GRPO | _LORA),
    "dpo": frozenset(_PREFERENCE | {"loss_type"}),
    "kto": frozenset(_PREFERENCE | {"desirable_weight", "undesirable_weight"}),
}

#: thub's dpo ``loss_type`` -> TRL 1.16 ``DPOTrainer`` loss. ORPO and SimPO are in TRL only as
#: ``trl.experimental`` trainers (ORPOTrainer, CPOTrainer) with their own data handling, which this
#: backend does not run: refused, never trained as another loss.
DPO_LOSSES = {"sigmoid": "sigmoid", "ipo": "ipo", "hinge": "hinge"}
#: where the refused losses are trained (their plugins' READMEs)
OTHER_LOSS_BACKENDS = "llamafactory (pref_loss) or axolotl (rl)"

DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"num_epochs": 1, "learning_rate": 2e-5, "max_seq_len": 1024, "effective_batch_size": 8},
    "lora_sft": {"num_epochs": 1, "learning_rate": 2e-4, "max_seq_len": 1024, "effective_batch_size": 8},
    "grpo": {"num_epochs": 1, "learning_rate": 1e-6, "prompt_batch_size": 2},
    "lora_grpo": {"num_epochs": 1, "learning_rate": 1e-5, "prompt_batch_size": 2},
    # DPOConfig/KTOConfig's own learning rate and max_length; TRL's per-device batch of 8
    "dpo": {"num_epochs": 1, "learning_rate": 1e-6, "max_seq_len": 1024, "effective_batch_size": 8},
    "kto": {"num_epochs": 1, "learning_rate": 1e-6, "max_seq_len": 1024, "effective_batch_size": 8},
}

# The largest per-device batch thub chooses when splitting effective_batch_size.
MAX_MICRO_BATCH = 8


def _common(params: dict[str, Any], output_dir: str) -> dict[str, Any]:
    gpu = cuda_visible()
    config: dict[str, Any] = {
        "output_dir": output_dir,
        "num_train_epochs": params["num_epochs"],
        "learning_rate": params["learning_rate"],
        "seed": params["seed"],
        "logging_steps": params["logging_steps"],
        "use_cpu": not gpu,
        "bf16": gpu,  # on a GPU without bf16 the runner switches to fp16 (runner.mixed_precision)
        "disable_tqdm": True,  # thub shows progress from the metrics stream
        "save_strategy": "steps" if params.get("save_steps") else "epoch" if params.get("checkpoint_at_epoch")
        else "no",
    }
    # unset: TRL's own defaults (max_steps -1: the epochs decide; lr_scheduler_type linear)
    if params.get("max_steps"):
        config["max_steps"] = params["max_steps"]
    if params.get("lr_scheduler") is not None:
        config["lr_scheduler_type"] = params["lr_scheduler"]
    if params.get("gradient_checkpointing") is not None:
        config["gradient_checkpointing"] = params["gradient_checkpointing"]  # unset: TRL's default (True)
    config.update(optional_training_args(params))
    report_to, _env, extra = report_settings(params)
    config["report_to"] = report_to
    config.update(extra)
    return config


def _peft(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "r": params["lora_r"],
        "lora_alpha": params["lora_alpha"],
        "lora_dropout": params["lora_dropout"],
        "target_modules": params.get("target_modules") or "all-linear",
        "use_rslora": params["use_rslora"],
        "use_dora": params["use_dora"],
        "task_type": "CAUSAL_LM",
    }


def _quantization(params: dict[str, Any]) -> dict[str, Any] | None:
    if params.get("load_in_4bit"):
        quant = {"load_in_4bit": True}
        for key in ("bnb_4bit_quant_type", "bnb_4bit_compute_dtype", "bnb_4bit_use_double_quant"):
            if params.get(key) is not None:
                quant[key] = params[key]
        return quant
    if params.get("load_in_8bit"):
        return {"load_in_8bit": True}
    return None


def _preference(algorithm: str, params: dict[str, Any], config: dict[str, Any], world: int) -> dict[str, Any]:
    """The DPOConfig/KTOConfig fields of ``dpo``/``kto`` (added to ``config``) and the plan's
    trainer, reference model and data entries."""
    micro, accumulation = split_batch(params["effective_batch_size"], world, MAX_MICRO_BATCH)
    config.update({
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "max_length": params["max_seq_len"],  # prompt + answer, as thub counts max_seq_len
        "beta": params["beta"],
    })
    if algorithm == "dpo":
        loss = params["loss_type"]
        if loss not in DPO_LOSSES:
            raise UsageError(
                f"backend trl does not run dpo with loss_type {loss}: TRL 1.16's DPOTrainer has "
                f"{', '.join(DPO_LOSSES)}; {loss} exists in TRL only as an experimental trainer thub does not run. "
                f"Choose loss_type {' / '.join(DPO_LOSSES)}, or --backend {OTHER_LOSS_BACKENDS}")
        config["loss_type"] = [DPO_LOSSES[loss]]
    else:
        if micro < 2:
            # TRL's KL estimate pairs each prompt with another answer of the same device batch
            raise UsageError(
                f"kto on trl needs at least 2 answers per device batch (TRL estimates the KL term from the other "
                f"answers of the batch); effective_batch_size {params['effective_batch_size']} over {world} "
                f"process(es) gives {micro}: use an effective_batch_size that is an even multiple of {world}")
        config.update({"desirable_weight": params["desirable_weight"],
                       "undesirable_weight": params["undesirable_weight"]})
    reference = params.get("reference_model_path")
    return {
        "trainer": "DPOTrainer" if algorithm == "dpo" else "KTOTrainer",
        "config_class": "DPOConfig" if algorithm == "dpo" else "KTOConfig",
        # None: TRL loads its own frozen copy of the initial policy (model_path)
        "reference_model": ({"path": reference, "trust_remote_code": params["trust_remote_code"]}
                            if reference else None),
        "data": {"mode": "pairs" if algorithm == "dpo" else "unpaired", "overlong": params["overlong"],
                 "max_seq_len": params["max_seq_len"]},
    }


def translate(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The TRL trainer, its config, the PEFT config and the environment for ``params``."""
    if algorithm not in HONOURED:
        raise UsageError(f"backend trl does not run {algorithm!r}")
    world = world_size(params)
    output_dir = f"{params['ckpt_output_dir']}/checkpoints"
    config = _common(params, output_dir)
    lora = algorithm.startswith("lora_")
    plan: dict[str, Any] = {"trainer": None, "config_class": None, "config": config,
                            "peft": _peft(params) if lora else None,
                            "quantization": _quantization(params) if lora else None,
                            "world_size": world, "environment": report_settings(params)[1], "merged": None,
                            # read by the runner from here, so the plan shows what is used
                            "model": {"path": params["model_path"], "trust_remote_code": params["trust_remote_code"]},
                            "save_final_checkpoint": params["save_final_checkpoint"]}
    if algorithm in ("sft", "lora_sft"):
        micro, accumulation = split_batch(params["effective_batch_size"], world, MAX_MICRO_BATCH)
        pretraining = params.get("is_pretraining", False)
        config.update({
            "per_device_train_batch_size": micro,
            "gradient_accumulation_steps": accumulation,
            # pretraining blocks are already block_size long; chat is cut at max_seq_len
            "max_length": params["block_size"] if pretraining else params["max_seq_len"],
            "packing": bool(params.get("packing")),
            "use_liger_kernel": bool(params.get("use_liger")),
        })
        # eval_strategy/eval_steps, and the best checkpoint by eval_loss kept by TRL's rotation
        config.update(validation_training_args(params))
        if lora and params.get("save_merged"):
            # after final/: the base in 16 bits + the adapter, peft's merge_and_unload, save_pretrained
            plan["merged"] = {"dir": f"{params['ckpt_output_dir']}/merged", "from_adapter": "final",
                              "dtype": "bfloat16 (float16 if the checkpoint is float16)"}
        plan.update({"trainer": "SFTTrainer", "config_class": "SFTConfig", "data": {
            "mode": "pretraining" if pretraining else "chat",
            "loss_on": "all tokens" if pretraining or params.get("unmask_messages") else "assistant tokens",
            "overlong": params["overlong"],
            "validation_split": params.get("validation_split") or 0.0,
            # a separate held-out file, tokenized as the training rows are (the runner's eval_dataset)
            "validation_data_path": params.get("validation_data_path"),
        }})
    elif algorithm in ("dpo", "kto"):
        plan.update(_preference(algorithm, params, config, world))
    else:
        completions = params["prompt_batch_size"] * params["group_size"]
        if completions % world:
            raise UsageError(
                f"prompt_batch_size x group_size = {completions} completions per step cannot be split evenly "
                f"over {world} processes; choose prompt_batch_size so the product is a multiple of {world}"
            )
        config.update({
            "num_generations": params["group_size"],
            "per_device_train_batch_size": completions // world,
            "gradient_accumulation_steps": 1,
            "max_completion_length": params["max_tokens"],
            "temperature": params["temperature"],
            "use_vllm": False,
        })
        if params.get("beta") is not None:
            config["beta"] = params["beta"]
        plan.update({"trainer": "GRPOTrainer", "config_class": "GRPOConfig",
                     "rewards": list(params["reward"]), "system_prompt": params.get("system_prompt")})
    return plan
