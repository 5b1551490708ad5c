"""thub parameters -> the verl command line. Pure Python: no verl, torch or Ray import.

verl is started as ``python -m verl.trainer.main_ppo`` with Hydra overrides
(``key=value`` items of an argv list, never a shell string). The runner executes exactly the
``argv`` this module builds, so ``thub train grpo --backend verl --dry-run`` shows the real
command. Every honoured parameter is mapped in the README.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from thub.backend import UsageError, shared_run_name

BACKEND = "verl"
MODULE = "verl.trainer.main_ppo"
# Backend defaults of parameters (shown as ``backend verl`` in --dry-run):
# verl's FSDP->vLLM weight-sync bucket: 2048 MB cannot hold the embedding of large-vocabulary
# models (Qwen3: 152K x 4096 x 4 bytes = 2.36 GB), so thub's default is 3072 (see the README).
WEIGHT_SYNC_BUCKET_MB = 3072
# actor micro batch per GPU (Training Hub's value; a larger one OOMs on logits of 150K vocabularies)
MICRO_BATCH_SIZE_PER_GPU = 1
# vLLM allocates empty weights and receives the real ones at the first sync (verl's own default);
# safetensors (with layered_summon) is for LoRA on 9B+ models.
LOAD_FORMAT = "dummy"
# verl's ppo_mini_batch_size is at most this many prompts (Training Hub's cap)
MAX_PPO_MINI_BATCH = 256
# the log-prob micro batch per GPU is at most this (Training Hub's value; logits of 150K vocabularies)
LOG_PROB_MICRO_BATCH = 2

_BASE = frozenset({
    "num_epochs", "max_steps", "learning_rate", "seed", "save_steps", "save_final_checkpoint", "save_total_limit",
    "trust_remote_code", "gradient_checkpointing", "lr_scheduler", "warmup_steps", "beta1", "beta2",
    "weight_decay", "max_grad_norm", "nproc_per_node", "nnodes",
    "wandb_project", "wandb_entity", "wandb_run_name", "tensorboard_log_dir", "mlflow_tracking_uri",
    "mlflow_run_name",
})
_GRPO = _BASE | {
    "reward", "group_size", "prompt_batch_size", "num_iterations", "max_tokens", "max_prompt_length",
    "temperature", "beta", "system_prompt", "gpu_memory_utilization", "tensor_parallel_size", "enforce_eager",
    # scale (grpo-scale group)
    "micro_batch_size", "ppo_mini_batch_size", "load_format", "language_model_only",
    "update_weights_bucket_megabytes", "param_offload", "optimizer_offload", "saves_per_epoch", "use_dr_grpo",
    "use_fused_kernels",
}
# layered_summon gathers LoRA weights layer by layer: verl applies it to LoRA only
_LORA = frozenset({"lora_r", "lora_alpha", "target_modules", "layered_summon"})

HONOURED: dict[str, frozenset[str]] = {
    "grpo": frozenset(_GRPO),
    "lora_grpo": frozenset(_GRPO | _LORA),
}

_SHARED_DEFAULTS: dict[str, Any] = {
    "num_epochs": 1, "prompt_batch_size": 16, "max_prompt_length": 1024, "gpu_memory_utilization": 0.35,
    "tensor_parallel_size": 1, "micro_batch_size": MICRO_BATCH_SIZE_PER_GPU,
    "update_weights_bucket_megabytes": WEIGHT_SYNC_BUCKET_MB, "load_format": LOAD_FORMAT,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {**_SHARED_DEFAULTS, "learning_rate": 1e-6},
    "lora_grpo": {**_SHARED_DEFAULTS, "learning_rate": 1e-5},
}

_SCHEDULERS = {"constant": "constant", "cosine": "cosine"}
_SAFE = re.compile(r"^[A-Za-z0-9_./@:+\-]+$")


def hydra_value(value: Any) -> str:
    """One value in Hydra's override grammar: quoted when it is not a plain token."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _SAFE.match(text) and text.lower() not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def gpus_per_node(params: dict[str, Any], environ: dict[str, str] | None = None) -> int:
    """``nproc_per_node`` as a GPU count (``auto``/``gpu`` count ``CUDA_VISIBLE_DEVICES``)."""
    value = params.get("nproc_per_node")
    if value is None:
        return 1
    if isinstance(value, int):
        return value
    env: Mapping[str, str] = os.environ if environ is None else environ
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible:
        return len(visible)
    raise UsageError(
        f"backend verl needs the number of GPUs per node: set nproc_per_node to an integer "
        f"(got {value!r}, and CUDA_VISIBLE_DEVICES is not set to count them)"
    )


def _nearest(value: int, multiple: int) -> str:
    """The positive multiples of ``multiple`` just below and above ``value``."""
    lower = (value // multiple) * multiple
    return ", ".join(str(v) for v in (lower, lower + multiple) if v > 0 and v != value)


def _around(value: int, valid: list[int]) -> str:
    """The values of ``valid`` (ascending) just below and above ``value``."""
    below = [v for v in valid if v < value]
    above = [v for v in valid if v > value]
    return ", ".join(str(v) for v in ([below[-1]] if below else []) + ([above[0]] if above else [])) or "none"


def mini_batch_unit(group_size: int, world: int, micro_batch_size: int) -> int:
    """The fewest prompts a PPO mini batch can hold: its ``× group_size`` completions must split over
    ``world`` GPUs in whole micro batches (``mini × group_size`` a multiple of ``world × micro``)."""
    unit = world * micro_batch_size
    return unit // math.gcd(unit, group_size)


def valid_mini_batches(prompt_batch_size: int, group_size: int, world: int, micro_batch_size: int) -> list[int]:
    """Every ``ppo_mini_batch_size`` verl runs without padding for this layout, ascending."""
    unit = mini_batch_unit(group_size, world, micro_batch_size)
    return [m for m in range(unit, prompt_batch_size + 1, unit) if prompt_batch_size % m == 0]


def log_prob_micro_batch(completions_per_gpu: int) -> int:
    """The log-prob micro batch per GPU: the largest value up to ``LOG_PROB_MICRO_BATCH`` that divides
    the completions each GPU scores (verl's ``prepare_micro_batches`` asserts the division)."""
    return max(d for d in range(1, LOG_PROB_MICRO_BATCH + 1) if completions_per_gpu % d == 0)


def batch_layout(prompt_batch_size: int, group_size: int, n_gpus: int, nnodes: int,
                 micro_batch_size: int = MICRO_BATCH_SIZE_PER_GPU,
                 ppo_mini_batch_size: int | None = None) -> dict[str, int]:
    """Every verl batch value for this layout, such that verl's own checks hold (FSDP, fixed batch sizes).

    With ``W = n_gpus × nnodes`` data-parallel GPUs, ``P = prompt_batch_size``, ``n = group_size``,
    ``M = ppo_mini_batch_size`` and ``m = micro_batch_size``, verl 0.9.1 asserts:

    * ``P × n`` divisible by ``W`` (``validate_config``) and ``M ≤ P`` (``ActorConfig.validate``);
    * ``M × n`` divisible by ``W`` (``TrainingWorker.train_mini_batch``);
    * each GPU's ``P × n / W`` completions split into whole mini batches of ``M × n / W``
      (``tensordict_utils.make_iterator``), i.e. ``P`` divisible by ``M`` (otherwise verl's v1
      trainer pads the step with synthetic samples up to a whole mini batch);
    * ``M × n / W`` divisible by ``m``, and ``P × n / W`` by the log-prob micro batch
      (``engine.utils.prepare_micro_batches``, for the update and for the log-probs).

    ``M`` unset: the largest valid value up to 256 (Training Hub's cap); the log-prob micro batch is
    derived (:func:`log_prob_micro_batch`). Anything else is an error naming the nearest valid values.
    """
    world = n_gpus * nnodes
    where = f"n_gpus {n_gpus} × nnodes {nnodes}"
    completions = prompt_batch_size * group_size
    unit = mini_batch_unit(group_size, world, micro_batch_size)
    valid = valid_mini_batches(prompt_batch_size, group_size, world, micro_batch_size)
    if not valid:
        # no mini batch fits: prompt_batch_size must be a multiple of the unit
        micro_hint = ""
        if completions % world == 0:
            micros = [d for d in range(1, completions // world + 1)
                      if valid_mini_batches(prompt_batch_size, group_size, world, d)]
            micro_hint = f"; or micro_batch_size {_around(micro_batch_size, micros)}" if micros else ""
        raise UsageError(
            f"prompt_batch_size {prompt_batch_size} × group_size {group_size} = {completions} completions per step "
            f"cannot be split over {where} = {world} GPUs in whole micro batches of micro_batch_size "
            f"{micro_batch_size}: a PPO mini batch needs a multiple of {unit} prompts, and prompt_batch_size a whole "
            f"number of mini batches; nearest valid prompt_batch_size values: {_nearest(prompt_batch_size, unit)}"
            f"{micro_hint}"
        )
    if ppo_mini_batch_size is None:
        capped = [m for m in valid if m <= MAX_PPO_MINI_BATCH]
        if not capped:
            raise UsageError(
                f"no ppo_mini_batch_size of at most {MAX_PPO_MINI_BATCH} prompts divides prompt_batch_size "
                f"{prompt_batch_size} in whole micro batches on {where} = {world} GPUs; set ppo_mini_batch_size "
                f"(nearest valid ppo_mini_batch_size values: {_around(MAX_PPO_MINI_BATCH, valid)})"
            )
        mini = capped[-1]
    else:
        mini = ppo_mini_batch_size
        if mini not in valid:
            if mini > prompt_batch_size:
                problem = f"is larger than prompt_batch_size {prompt_batch_size}"
            elif (mini * group_size) % world:
                problem = (f"× group_size {group_size} = {mini * group_size} completions cannot be split over "
                           f"{where} = {world} GPUs")
            elif (mini * group_size // world) % micro_batch_size:
                problem = (f"gives {mini * group_size // world} completions per GPU (× group_size {group_size} / "
                           f"{world} GPUs), not a multiple of micro_batch_size {micro_batch_size}")
            else:
                problem = (f"does not divide prompt_batch_size {prompt_batch_size} (verl would pad each step "
                           f"with synthetic samples up to a whole number of mini batches)")
            raise UsageError(f"ppo_mini_batch_size {mini} {problem}; nearest valid ppo_mini_batch_size values: "
                             f"{_around(mini, valid)}")
    per_gpu = completions // world
    return {"world_size": world, "ppo_mini_batch_size": mini, "ppo_micro_batch_size_per_gpu": micro_batch_size,
            "log_prob_micro_batch_size_per_gpu": log_prob_micro_batch(per_gpu), "completions_per_step": completions,
            "completions_per_gpu": per_gpu}


def planned_steps(params: dict[str, Any], num_prompts: int | None) -> int | None:
    """GRPO steps verl will take: ``max_steps``/``num_iterations``, else whole prompt batches × epochs."""
    explicit = params.get("max_steps") or params.get("num_iterations")
    if explicit:
        return int(explicit)
    if num_prompts is None:
        return None
    return (num_prompts // params["prompt_batch_size"]) * params["num_epochs"]


def save_frequency(params: dict[str, Any], steps: int | None, num_prompts: int | None) -> int:
    """``trainer.save_freq``: ``save_steps``; else ``saves_per_epoch`` spread over a pass (Training Hub's
    ``max(1, batches per pass // saves_per_epoch)``); else only the last step; ``-1`` while unknown."""
    if params.get("save_steps"):
        return int(params["save_steps"])
    if params.get("saves_per_epoch"):
        if num_prompts is None:
            return -1
        batches = max(1, num_prompts // params["prompt_batch_size"])
        return max(1, batches // params["saves_per_epoch"])
    if params.get("save_final_checkpoint", True):
        # verl saves at the last step whenever save_freq > 0: the step count saves only there
        return steps if steps else -1
    return -1


def _loggers(params: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    loggers, env = ["console", "file"], {}
    if params.get("wandb_project"):
        loggers.append("wandb")
        if params.get("wandb_entity"):
            env["WANDB_ENTITY"] = params["wandb_entity"]
    if params.get("mlflow_tracking_uri"):
        loggers.append("mlflow")
        env["MLFLOW_TRACKING_URI"] = params["mlflow_tracking_uri"]
    if params.get("tensorboard_log_dir"):
        loggers.append("tensorboard")
        env["TENSORBOARD_DIR"] = params["tensorboard_log_dir"]
    return loggers, env


def paths(ckpt_output_dir: str) -> dict[str, str]:
    root = os.path.join(ckpt_output_dir, "verl")
    return {
        "root": root,
        "train": os.path.join(root, "data", "train.parquet"),
        "val": os.path.join(root, "data", "val.parquet"),
        "reward_module": os.path.join(root, "thub_reward.py"),
        "file_logger": os.path.join(root, "metrics.jsonl"),
        "checkpoints": os.path.join(ckpt_output_dir, "checkpoints"),
    }


def translate(algorithm: str, params: dict[str, Any], num_prompts: int | None = None,
              resume_from: str | None = None, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The verl argv, environment, files and batch layout for ``params``.

    ``num_prompts`` (known once the data is read) fixes the step count; ``resume_from`` is a
    ``global_step_N`` directory to continue from.
    """
    if algorithm not in HONOURED:
        raise UsageError(f"backend verl does not run {algorithm!r}")
    if params.get("max_steps") and params.get("num_iterations") and params["max_steps"] != params["num_iterations"]:
        raise UsageError(
            f"max_steps {params['max_steps']} and num_iterations {params['num_iterations']} disagree; on verl "
            "both mean GRPO steps (prompt batches): set one"
        )
    if params.get("save_steps") and params.get("saves_per_epoch"):
        raise UsageError("save_steps and saves_per_epoch both set the checkpoint frequency: set one")
    n_gpus, nnodes = gpus_per_node(params, environ), int(params.get("nnodes") or 1)
    layout = batch_layout(params["prompt_batch_size"], params["group_size"], n_gpus, nnodes,
                          micro_batch_size=params["micro_batch_size"],
                          ppo_mini_batch_size=params.get("ppo_mini_batch_size"))
    tp = params["tensor_parallel_size"]
    if n_gpus % tp:
        raise UsageError(f"tensor_parallel_size {tp} must divide the GPUs per node ({n_gpus})")
    scheduler = params.get("lr_scheduler")  # unset: verl's own (constant)
    if scheduler is not None and scheduler not in _SCHEDULERS:
        raise UsageError(f"verl's actor supports lr_scheduler constant or cosine, not {scheduler!r}")

    files = paths(params["ckpt_output_dir"])
    steps = planned_steps(params, num_prompts)
    lora = algorithm == "lora_grpo"
    beta = params.get("beta")
    loggers, env = _loggers(params)
    env.update({"VERL_FILE_LOGGER_PATH": files["file_logger"], "TOKENIZERS_PARALLELISM": "true",
                "NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "WARN"})
    if lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "true"

    save_freq = save_frequency(params, steps, num_prompts)

    model = "actor_rollout_ref.model"
    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    o: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "data.train_files": files["train"],
        "data.val_files": files["val"],
        "data.prompt_key": "prompt",
        "data.train_batch_size": params["prompt_batch_size"],
        "data.max_prompt_length": params["max_prompt_length"],
        "data.max_response_length": params["max_tokens"],
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": params["seed"],
        "data.trust_remote_code": params.get("trust_remote_code", False),
        f"{model}.path": params["model_path"],
        f"{model}.trust_remote_code": params.get("trust_remote_code", False),
        f"{model}.use_remove_padding": True,
        f"{model}.enable_gradient_checkpointing": params.get("gradient_checkpointing") is not False,
        f"{actor}.optim.lr": params["learning_rate"],
        f"{actor}.ppo_mini_batch_size": layout["ppo_mini_batch_size"],
        f"{actor}.ppo_micro_batch_size_per_gpu": layout["ppo_micro_batch_size_per_gpu"],
        f"{actor}.use_kl_loss": bool(beta),
        f"{actor}.entropy_coeff": 0,
        f"{rollout}.name": "vllm",
        f"{rollout}.n": params["group_size"],
        f"{rollout}.temperature": params["temperature"],
        f"{rollout}.tensor_model_parallel_size": tp,
        f"{rollout}.gpu_memory_utilization": params["gpu_memory_utilization"],
        f"{rollout}.max_model_len": params["max_prompt_length"] + params["max_tokens"],
        f"{rollout}.seed": params["seed"],
        f"{rollout}.log_prob_micro_batch_size_per_gpu": layout["log_prob_micro_batch_size_per_gpu"],
        f"{rollout}.load_format": params["load_format"],
        f"{rollout}.checkpoint_engine.update_weights_bucket_megabytes":
            params["update_weights_bucket_megabytes"],
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": layout["log_prob_micro_batch_size_per_gpu"],
        "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        "reward.custom_reward_function.path": files["reward_module"],
        "reward.custom_reward_function.name": "compute_score",
        "trainer.n_gpus_per_node": n_gpus,
        "trainer.nnodes": nnodes,
        "trainer.total_epochs": params["num_epochs"],
        "trainer.save_freq": save_freq,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.project_name": params.get("wandb_project") or "thub",
        # one name for W&B and MLflow: differing wandb_run_name / mlflow_run_name are an error
        "trainer.experiment_name": shared_run_name(params, "verl trainer.experiment_name"),
        "trainer.logger": loggers,
        "trainer.default_local_dir": files["checkpoints"],
        "trainer.resume_mode": "resume_path" if resume_from else "disable",
    }
    if resume_from:
        o["trainer.resume_from_path"] = resume_from
    if params.get("save_total_limit") is not None:
        # verl's CheckpointManager rotates global_step_N/actor itself (with 1, the old one goes only
        # once the new one is saved); unset: verl's null, every checkpoint kept
        o["trainer.max_actor_ckpt_to_keep"] = params["save_total_limit"]
    if scheduler is not None:
        o[f"{actor}.optim.lr_scheduler_type"] = _SCHEDULERS[scheduler]
    if steps and (params.get("max_steps") or params.get("num_iterations")):
        o["trainer.total_training_steps"] = steps
        # verl stops at whichever comes first: enough epochs that the step count decides
        o["trainer.total_epochs"] = steps
    if beta:
        o.update({f"{actor}.kl_loss_coef": beta, f"{actor}.kl_loss_type": "low_var_kl"})
    if lora:
        o.update({f"{model}.lora_rank": params["lora_r"], f"{model}.lora_alpha": params["lora_alpha"],
                  f"{model}.target_modules": params.get("target_modules") or "all-linear"})
    optional = {"warmup_steps": f"{actor}.optim.lr_warmup_steps", "weight_decay": f"{actor}.optim.weight_decay",
                "max_grad_norm": f"{actor}.optim.clip_grad"}
    o.update({key: params[name] for name, key in optional.items() if params.get(name) is not None})
    # unset: verl's own default (false) applies
    switches = {"enforce_eager": f"{rollout}.enforce_eager",
                "param_offload": f"{actor}.fsdp_config.param_offload",
                "optimizer_offload": f"{actor}.fsdp_config.optimizer_offload",
                "use_fused_kernels": f"{model}.use_fused_kernels"}
    o.update({key: bool(params[name]) for name, key in switches.items() if params.get(name) is not None})
    if lora and params.get("layered_summon") is not None:  # honoured for LoRA only
        o[f"{rollout}.layered_summon"] = bool(params["layered_summon"])
    if params.get("language_model_only") is not None:
        # engine_kwargs.vllm is an open mapping in verl's schema: a new key needs Hydra's '+'
        o[f"+{rollout}.engine_kwargs.vllm.language_model_only"] = bool(params["language_model_only"])
    if params.get("use_dr_grpo"):
        # Dr. GRPO (Liu et al. 2025): no std normalisation of advantages, sequence-sum loss
        o.update({"algorithm.norm_adv_by_std_in_grpo": False, f"{actor}.loss_agg_mode": "seq-mean-token-sum-norm"})
    # each beta set on its own (Hydra's list-index override): an unset one keeps verl's default
    o.update({f"{actor}.optim.betas.{i}": params[name] for i, name in enumerate(("beta1", "beta2"))
              if params.get(name) is not None})

    overrides = [f"{key}={hydra_value(value)}" for key, value in o.items()]
    notes = []
    if save_freq == -1 and params.get("saves_per_epoch"):
        notes.append(f"trainer.save_freq is set at launch from the data: max(1, prompt batches per pass // "
                     f"saves_per_epoch {params['saves_per_epoch']})")
    elif save_freq == -1 and params.get("save_final_checkpoint", True):
        notes.append("trainer.save_freq is set at launch to the step count from the data "
                     "(verl saves at the last step when save_freq > 0)")
    return {
        "argv": ["python", "-m", MODULE, *overrides],
        "overrides": overrides,
        "environment": env,
        # verl's MLflow run goes to the experiment named by its project (thub.trackers.library)
        "mlflow_experiment": o["trainer.project_name"],
        "files": files,
        "batch": layout,
        "max_steps": steps,
        "rewards": list(params["reward"]),
        "system_prompt": params.get("system_prompt"),
        "lora": lora,
        "notes": notes,
    }
