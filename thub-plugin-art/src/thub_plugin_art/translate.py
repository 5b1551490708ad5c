"""thub parameters -> openpipe-art (ART) model, internal config, backend and loop settings.

Pure Python: no ART import. The runner builds ``art.TrainableModel(**plan["model"],
_internal_config=plan["internal_config"])`` and ``art.local.LocalBackend(**plan["backend"])`` and
calls ``backend.train(model, groups, **plan["train"])`` with exactly this output, so ``--dry-run``
shows what will really be used. Every honoured parameter is mapped in the README.
"""

from __future__ import annotations

import os
import re
from typing import Any

from thub.backend import UsageError

BACKEND = "art"

_HONOURED = frozenset({
    # loop
    "reward", "rollout_function", "group_size", "prompt_batch_size", "num_iterations", "max_steps", "max_tokens",
    "temperature", "system_prompt", "concurrency", "seed", "learning_rate",
    # model / engine
    "max_seq_len", "trust_remote_code", "gpu_memory_utilization", "enforce_eager", "max_lora_rank",
    "gradient_checkpointing",
    # optimiser (ART's TrainerArgs)
    "max_grad_norm", "weight_decay", "beta1", "beta2", "eps",
    # LoRA (ART trains LoRA adapters through Unsloth; no DoRA, no bnb_4bit_* knobs)
    "lora_r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "load_in_4bit", "load_in_8bit",
    # W&B: ART's project / entity / run name (ART logs to W&B when WANDB_API_KEY is set)
    "wandb_project", "wandb_entity", "wandb_run_name",
})

# ART 0.5.18's LocalBackend trains LoRA adapters only (Unsloth + PEFT): no full-parameter grpo.
HONOURED: dict[str, frozenset[str]] = {"lora_grpo": _HONOURED}

# Iterations (= GRPO steps) when neither num_iterations nor max_steps is set (Training Hub's ART
# value). Not a DEFAULTS entry: a backend default for num_iterations would contradict a max_steps
# the user sets, and the two mean the same.
DEFAULT_ITERATIONS = 15

DEFAULTS: dict[str, dict[str, Any]] = {
    "lora_grpo": {"learning_rate": 1e-5, "prompt_batch_size": 16, "concurrency": 32,
                  # Training Hub's ART fallback; it must reach vLLM's engine args (seed notes)
                  "gpu_memory_utilization": 0.45,
                  "max_grad_norm": 0.1},
}

# vLLM accepts these LoRA ranks (max_lora_rank); its default, 16, refuses larger adapters.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_PROJECT = "thub-grpo"


def slug(text: str) -> str:
    """A model name ART accepts (it becomes a directory and a served model name)."""
    tail = text.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-").lower() or "model"


def vllm_lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts that holds an adapter of rank ``r``."""
    for rank in VLLM_LORA_RANKS:
        if rank >= r:
            return rank
    raise UsageError(f"lora_r {r} is larger than vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}")


def lora_rank_limit(lora_r: int, max_lora_rank: int | None) -> int | None:
    """vLLM's ``max_lora_rank``: the user's (a rank vLLM accepts, at least ``lora_r``), else the
    smallest one that holds ``lora_r`` when it exceeds vLLM's default 16, else unset."""
    if max_lora_rank is None:
        return vllm_lora_rank(lora_r) if lora_r > 16 else None
    if max_lora_rank not in VLLM_LORA_RANKS or max_lora_rank < lora_r:
        below = [r for r in VLLM_LORA_RANKS if lora_r <= r < max_lora_rank]
        above = [r for r in VLLM_LORA_RANKS if r > max_lora_rank and r >= lora_r]
        nearest = ", ".join(str(r) for r in below[-1:] + above[:1]) or "none"
        raise UsageError(f"max_lora_rank {max_lora_rank} is not a LoRA rank vLLM accepts for lora_r {lora_r} "
                         f"({', '.join(map(str, VLLM_LORA_RANKS))}); nearest valid values: {nearest}")
    return max_lora_rank


def iterations(params: dict[str, Any]) -> int:
    """ART iterations = GRPO steps: ``num_iterations`` or ``max_steps`` (the same; they may not differ)."""
    given = {name: params[name] for name in ("num_iterations", "max_steps") if params.get(name)}
    if len(set(given.values())) > 1:
        raise UsageError(f"max_steps {given['max_steps']} and num_iterations {given['num_iterations']} disagree; "
                         "on art both mean iterations (GRPO steps): set one")
    return int(next(iter(given.values()), DEFAULT_ITERATIONS))


def single_gpu(environ: dict[str, str] | None = None) -> str:
    """The one GPU ART may use: the first of CUDA_VISIBLE_DEVICES, else 0."""
    visible = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
    first = visible.split(",")[0].strip()
    return first if first not in ("", "-1") else "0"


def translate(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """ART's model, internal config (init/engine/peft/trainer args), backend and loop for ``params``."""
    if algorithm not in HONOURED:
        raise UsageError(
            f"backend {BACKEND} does not run {algorithm!r}: ART trains LoRA adapters only (use lora_grpo, "
            "or --backend verl / trl for full-parameter grpo)"
        )
    ckpt = params["ckpt_output_dir"]
    gradient_checkpointing: str | bool = False if params.get("gradient_checkpointing") is False else "unsloth"
    init_args: dict[str, Any] = {
        # explicit: ART's own default is 4-bit; thub's load_in_4bit defaults to false everywhere
        "load_in_4bit": bool(params.get("load_in_4bit")),
        "load_in_8bit": bool(params.get("load_in_8bit")),
        "trust_remote_code": params.get("trust_remote_code", False),
        "random_state": params["seed"],
        "use_gradient_checkpointing": gradient_checkpointing,
    }
    engine_args: dict[str, Any] = {
        # always here, never only in init_args: ART builds vLLM's engine from engine_args, and vLLM's
        # own default (0.9) runs out of memory next to the Unsloth trainer on the same GPU
        "gpu_memory_utilization": params["gpu_memory_utilization"],
        "trust_remote_code": params.get("trust_remote_code", False),
        "seed": params["seed"],
    }
    rank_limit = lora_rank_limit(params["lora_r"], params.get("max_lora_rank"))
    if rank_limit is not None:
        engine_args["max_lora_rank"] = rank_limit
    if params.get("enforce_eager") is not None:
        engine_args["enforce_eager"] = bool(params["enforce_eager"])  # unset: ART's/vLLM's default (CUDA graphs)
    if params.get("max_seq_len"):
        init_args["max_seq_length"] = params["max_seq_len"]
        engine_args["max_model_len"] = params["max_seq_len"]
    peft_args: dict[str, Any] = {
        "r": params["lora_r"],
        "lora_alpha": params["lora_alpha"],
        "lora_dropout": params["lora_dropout"],
        "use_rslora": params["use_rslora"],
        "random_state": params["seed"],
        "use_gradient_checkpointing": gradient_checkpointing,
    }
    if params.get("target_modules"):
        peft_args["target_modules"] = list(params["target_modules"])  # else ART's per-architecture default
    trainer_args: dict[str, Any] = {"seed": params["seed"]}
    if gradient_checkpointing is False:
        # ART's own trainer_args say gradient_checkpointing=True, and TRL's Trainer then enables it on
        # the model whatever Unsloth was told: a user's false must reach the trainer too
        trainer_args["gradient_checkpointing"] = False
    optional = {"max_grad_norm": "max_grad_norm", "weight_decay": "weight_decay", "beta1": "adam_beta1",
                "beta2": "adam_beta2", "eps": "adam_epsilon"}
    trainer_args.update({target: params[name] for name, target in optional.items() if params.get(name) is not None})
    environment = {
        "CUDA_VISIBLE_DEVICES": single_gpu(),  # ART is single-GPU; vLLM would otherwise take every GPU
        "IMPORT_UNSLOTH": "1",  # ART imports unsloth before transformers/peft/trl in this process
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm (an ART import) would fetch a price list at import
    }
    if params.get("wandb_project"):
        environment["WANDB_PROJECT"] = params["wandb_project"]
    if params.get("wandb_entity"):
        environment["WANDB_ENTITY"] = params["wandb_entity"]
    rollout_function = params.get("rollout_function")
    steps = iterations(params)
    return {
        "mode": "rollout_function" if rollout_function else "data+reward",
        "model": {
            "name": params.get("wandb_run_name") or f"{slug(params['model_path'])}-grpo",
            "project": params.get("wandb_project") or DEFAULT_PROJECT,
            "entity": params.get("wandb_entity"),
            "base_model": params["model_path"],
            "base_path": f"{ckpt}/.art",
        },
        "internal_config": {"init_args": init_args, "engine_args": engine_args, "peft_args": peft_args,
                            "trainer_args": trainer_args},
        "backend": {"in_process": True, "path": f"{ckpt}/.art"},
        "train": {"learning_rate": params["learning_rate"], "save_checkpoint": True},
        "loop": {
            "num_iterations": steps,
            "prompt_batch_size": params["prompt_batch_size"],
            "group_size": params["group_size"],
            "concurrency": params["concurrency"],
            "seed": params["seed"],
            "max_tokens": params["max_tokens"],
            "temperature": params["temperature"],
            "system_prompt": params.get("system_prompt"),
            "rewards": [] if rollout_function else list(params["reward"]),
            "rollout_function": rollout_function,
        },
        "environment": environment,
        "max_steps": steps,
    }
