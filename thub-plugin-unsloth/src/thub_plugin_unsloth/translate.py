"""thub parameters -> unsloth loader, LoRA and TRL ``SFTConfig`` arguments. Pure Python: no unsloth import.

The runner calls ``FastLanguageModel.from_pretrained(**plan["load"])``,
``FastLanguageModel.get_peft_model(model, **plan["lora"])`` and ``trl.SFTConfig(**plan["config"])``
with exactly this output, so ``--dry-run`` shows what will really be used. Every honoured
parameter is mapped in the README.
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
)

BACKEND = "unsloth"

_HONOURED = frozenset({
    # training length, optimiser, saving
    "num_epochs", "max_steps", "effective_batch_size", "learning_rate", "max_seq_len", "seed", "save_steps",
    "checkpoint_at_epoch", "save_final_checkpoint", "save_total_limit", "trust_remote_code", "gradient_checkpointing",
    "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "beta1", "beta2", "eps", "weight_decay",
    "max_grad_norm", "logging_steps",
    # loggers
    "wandb_project", "wandb_entity", "wandb_run_name", "tensorboard_log_dir",
    "mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name",
    # data
    "unmask_messages", "validation_split", "validation_data_path", "validation_frequency",
    "is_pretraining", "block_size",
    # LoRA / QLoRA (bnb_4bit_* are not honoured: unsloth builds its own 4-bit config)
    "lora_r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "use_dora",
    "load_in_4bit", "load_in_8bit",
    # export
    "save_merged",
})

HONOURED: dict[str, frozenset[str]] = {"lora_sft": _HONOURED}

# Training Hub's lora_sft defaults where they are unsloth's recipe (warm-up, decay, clipping);
# num_epochs 1 like every thub backend (Training Hub: 3).
DEFAULTS: dict[str, dict[str, Any]] = {
    "lora_sft": {"num_epochs": 1, "learning_rate": 2e-4, "max_seq_len": 2048, "effective_batch_size": 8,
                 "warmup_steps": 10, "weight_decay": 0.01, "max_grad_norm": 0.3},
}

# The largest per-device batch thub chooses when splitting effective_batch_size (one process).
MAX_MICRO_BATCH = 8
# unsloth's own projections; used when target_modules is unset (unsloth's default too).
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def gradient_checkpointing(params: dict[str, Any]) -> str | bool:
    """unsloth's offloaded checkpointing ("unsloth") unless the user turned it off."""
    return False if params.get("gradient_checkpointing") is False else "unsloth"


def _config(params: dict[str, Any], gpu: bool) -> dict[str, Any]:
    micro, accumulation = split_batch(params["effective_batch_size"], 1, MAX_MICRO_BATCH)
    pretraining = params.get("is_pretraining", False)
    config: dict[str, Any] = {
        "output_dir": f"{params['ckpt_output_dir']}/checkpoints",
        "num_train_epochs": params["num_epochs"],
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "learning_rate": params["learning_rate"],
        "seed": params["seed"],
        "logging_steps": params["logging_steps"],
        # unsloth checkpoints the model itself (get_peft_model); TRL's own flag would wrap it twice
        "gradient_checkpointing": False,
        "max_length": params["block_size"] if pretraining else params["max_seq_len"],
        # unset max_steps / lr_scheduler: TRL's own defaults (-1: the epochs decide; linear)
        **({"max_steps": params["max_steps"]} if params.get("max_steps") else {}),
        **({"lr_scheduler_type": params["lr_scheduler"]} if params.get("lr_scheduler") is not None else {}),
        # not honoured: TRL packs inside its own dataset preparation, which thub's rows skip
        "packing": False,
        # thub hands over input_ids + labels; TRL must neither re-tokenize nor drop the labels column
        "dataset_kwargs": {"skip_prepare_dataset": True},
        "remove_unused_columns": False,
        "dataloader_pin_memory": False,
        "use_cpu": not gpu,
        # on a GPU without bf16 (T4, V100) the runner switches to fp16 and says so
        "bf16": gpu,
        "fp16": False,
        "disable_tqdm": True,  # thub shows progress from the metrics stream
        "save_strategy": "steps" if params.get("save_steps") else "epoch" if params.get("checkpoint_at_epoch")
        else "no",
    }
    config.update(optional_training_args(params))
    # eval_strategy/eval_steps, and the best checkpoint by eval_loss kept by TRL's rotation
    config.update(validation_training_args(params))
    report_to, _env, extra = report_settings(params)
    config["report_to"] = report_to
    config.update(extra)
    return config


def translate(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The unsloth loader / LoRA arguments, the TRL SFTConfig and the environment for ``params``."""
    if algorithm not in HONOURED:
        raise UsageError(f"backend {BACKEND} does not run {algorithm!r} (it runs lora_sft)")
    gpu = cuda_visible()
    pretraining = params.get("is_pretraining", False)
    max_seq_length = params["block_size"] if pretraining else params["max_seq_len"]
    checkpointing = gradient_checkpointing(params)
    load = {
        "model_name": params["model_path"],
        "max_seq_length": max_seq_length,
        "dtype": None,  # unsloth picks bf16 where supported, else fp16 (fp32/bf16 on CPU)
        "load_in_4bit": bool(params.get("load_in_4bit")),
        "load_in_8bit": bool(params.get("load_in_8bit")),
        "full_finetuning": False,
        "trust_remote_code": params["trust_remote_code"],
        "use_gradient_checkpointing": checkpointing,
    }
    lora: dict[str, Any] = {
        "r": params["lora_r"],
        "target_modules": list(params.get("target_modules") or DEFAULT_TARGET_MODULES),
        "lora_alpha": params["lora_alpha"],
        "lora_dropout": params["lora_dropout"],
        "bias": "none",
        "use_gradient_checkpointing": checkpointing,
        "random_state": params["seed"],
        "max_seq_length": max_seq_length,
        "use_rslora": params["use_rslora"],
    }
    if params.get("use_dora"):
        lora["use_dora"] = True  # a keyword unsloth passes on to peft.LoraConfig
    return {
        "loader": "unsloth.FastLanguageModel",
        "load": load,
        "lora": lora,
        "trainer": "SFTTrainer",
        "config_class": "SFTConfig",
        "config": _config(params, gpu),
        "device": "cuda" if gpu else "cpu (unsloth's CPU fallback: stock transformers + PEFT)",
        "data": {
            "mode": "pretraining" if pretraining else "chat",
            # Training Hub renders the chat to text and trains on the whole sequence, prompt included
            "loss_on": "all tokens" if pretraining or params.get("unmask_messages") else "assistant tokens",
            "validation_split": params.get("validation_split") or 0.0,
            # a separate held-out file, prepared as the training rows are (the runner's eval_dataset)
            "validation_data_path": params.get("validation_data_path"),
        },
        "environment": report_settings(params)[1],
        "save_final_checkpoint": params["save_final_checkpoint"],  # the runner saves final/ when true
        # after the adapter: model.save_pretrained_merged(dir, tokenizer, save_method="merged_16bit")
        "merged": {"dir": f"{params['ckpt_output_dir']}/merged", "save_method": "merged_16bit"}
        if params.get("save_merged") else None,
    }
