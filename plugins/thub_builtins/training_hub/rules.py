"""Training Hub names: the one table that lets its users move over unchanged.

Training Hub (PyPI ``training-hub`` 0.11.2) exposes ``sft``, ``osft``, ``lora_sft``,
``lora_grpo``, ``grpo`` and ``embedding_sft`` (thub-plugin-sentence-transformers). Every keyword
of theirs is, in thub, one of:

* **same**: a thub parameter of the same name and meaning (found in the algorithm's pydantic
  model; a ``same`` rule here only adds a type conversion, e.g. an int ``rdzv_id``);
* **mapped**: rewritten to thub's parameter(s), shown as ``training-hub name X → Y`` in the
  ``--dry-run`` sources (``mapped`` rules);
* **fixed**: a switch whose accepted values are what thub does anyway (accepted with a note
  in the plan), any other value refused (``fixed`` rules);
* **refused**: a one-line migration message, why and what to use instead (``refused`` rules);
* **api**: a Python object the Python API handles in this process (callbacks).

Nothing is silently dropped. The signatures are copied from the wheel as data (the test
``tests/test_training_hub_names.py`` reads the unpacked wheel with ``ast`` and fails on any
keyword this table does not classify); the migration guide's table is generated from here.
The logic that applies the table (layers, merged batch, positional arguments) is in
:mod:`thub_builtins.training_hub.names`, which re-exports every public name here.
No training_hub import: its dependencies are not needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

VERSION = "0.11.2"
FUNCTIONS = ("sft", "osft", "lora_sft", "lora_grpo", "grpo", "embedding_sft")

_LOGGING = ("wandb_project", "wandb_entity", "wandb_run_name", "tensorboard_log_dir",
            "mlflow_tracking_uri", "mlflow_experiment_name", "mlflow_run_name")
_TORCHRUN = ("nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_addr", "master_port")
_GRPO_LOGGING = tuple(n for n in _LOGGING if n != "tensorboard_log_dir")

# Named parameters of each public function, in signature order (positional-or-keyword).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "sft": ("model_path", "data_path", "ckpt_output_dir", "backend", "num_epochs", "effective_batch_size",
            "learning_rate", "max_seq_len", "max_tokens_per_gpu", "data_output_dir", "save_samples",
            "warmup_steps", "accelerate_full_state_at_epoch", "checkpoint_at_epoch", "is_pretraining",
            "block_size", "document_column_name", "beta1", "beta2", "eps", "weight_decay", *_TORCHRUN,
            *_LOGGING),
    "osft": ("model_path", "data_path", "unfreeze_rank_ratio", "effective_batch_size", "max_tokens_per_gpu",
             "max_seq_len", "learning_rate", "ckpt_output_dir", "data_output_dir", "backend", "target_patterns",
             "seed", "use_liger", "use_processed_dataset", "unmask_messages", "is_pretraining", "block_size",
             "document_column_name", "lr_scheduler", "warmup_steps", "lr_scheduler_kwargs", "beta1", "beta2",
             "eps", "weight_decay", "checkpoint_at_epoch", "save_final_checkpoint", "num_epochs",
             "nproc_per_node", "nnodes", "node_rank", "rdzv_id", "rdzv_endpoint", "master_port", "master_addr",
             *_LOGGING, "trust_remote_code"),
    "lora_sft": ("model_path", "data_path", "ckpt_output_dir", "backend", "lora_r", "lora_alpha", "lora_dropout",
                 "target_modules", "num_epochs", "effective_batch_size", "micro_batch_size",
                 "gradient_accumulation_steps", "learning_rate", "max_seq_len", "lr_scheduler", "warmup_steps",
                 "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_compute_dtype",
                 "bnb_4bit_use_double_quant", "flash_attention", "sample_packing", "bf16", "fp16", "tf32",
                 "save_steps", "eval_steps", "logging_steps", "save_total_limit", *_LOGGING, "dataset_type",
                 "field_messages", "field_instruction", "field_input", "field_output", *_TORCHRUN,
                 "enable_model_splitting", "finetune_vision_layers", "finetune_language_layers",
                 "trust_remote_code"),
    "lora_grpo": ("model_path", "ckpt_output_dir", "data_path", "data_config", "n_train", "n_val", "rollout_fn",
                  "tasks", "reward_fn", "num_iterations", "group_size", "prompt_batch_size", "learning_rate",
                  "temperature", "max_tokens", "max_prompt_length", "concurrency", "lora_r", "lora_alpha",
                  "target_modules", "max_grad_norm", "gpu_memory_utilization", "max_lora_rank", "enforce_eager",
                  "n_gpus", "nnodes", "tensor_parallel_size", "use_dr_grpo", "backend", "iteration_callback",
                  *_GRPO_LOGGING),
    "grpo": ("model_path", "ckpt_output_dir", "data_path", "data_config", "n_train", "n_val", "reward_fn",
             "num_iterations", "group_size", "prompt_batch_size", "learning_rate", "temperature", "max_tokens",
             "max_prompt_length", "gpu_memory_utilization", "n_gpus", "nnodes", "tensor_parallel_size",
             "use_dr_grpo", "iteration_callback", *_GRPO_LOGGING),
    "embedding_sft": ("model_path", "data_path", "ckpt_output_dir"),
}
# Keyword-only parameters (after ``*``).
KEYWORD_ONLY: dict[str, tuple[str, ...]] = {
    "sft": ("callbacks", "enable_jit_checkpoint", "checkpoint_storage"),
    "osft": ("callbacks", "enable_jit_checkpoint", "checkpoint_storage"),
    "lora_sft": ("callbacks", "eval_data_path", "per_device_eval_batch_size", "enable_jit_checkpoint",
                 "checkpoint_storage"),
    "lora_grpo": (),
    "grpo": (),
    "embedding_sft": ("backend", "loss_type", "loss_fn", "num_epochs", "batch_size", "learning_rate", "warmup_ratio",
                      "batch_sampler", "eval_data_path", "text_column", "label_column", "seed"),
}
# ``**kwargs`` names Training Hub forwards: read by its own code, or fields of the backend's
# arguments (instructlab-training 0.16 TrainingArgs for sft, mini-trainer 0.9 TrainingArgs for osft)
# and names its example scripts pass (device, osft_memory_efficient_init).
_GRPO_KWARGS = ("reward_type", "system_prompt", "data_source", "saves_per_epoch", "param_offload",
                "optimizer_offload", "load_format", "layered_summon", "language_model_only")
KWARGS: dict[str, tuple[str, ...]] = {
    "sft": ("chat_tmpl_path", "use_legacy_tmpl", "max_batch_len", "random_seed", "use_dolomite", "is_padding_free",
            "mock_data", "mock_data_len", "deepspeed_options", "fsdp_options", "distributed_backend",
            "disable_flash_attn", "lora", "process_data", "keep_last_checkpoint_only", "pretraining_config",
            "data_process_num_cpu_procs", "use_liger", "trust_remote_code", "log_level", "validation_split",
            "validation_frequency", "on_demand_checkpointing", "adamw_weight_decay", "adamw_betas", "adamw_eps",
            "device"),
    "osft": ("model_name_or_path", "batch_size", "output_dir", "num_warmup_steps", "use_liger_kernels",
             "osft_unfreeze_rank_ratio", "osft_target_patterns", "max_epochs", "osft", "osft_upcast_dtype",
             "min_samples_per_checkpoint", "training_mode", "max_steps", "max_tokens", "save_dtype", "train_dtype",
             "validation_split", "validation_data_path", "validation_frequency", "validate_at_epoch",
             "min_samples_per_validation", "validate_at_final", "save_best_val_loss",
             "val_loss_improvement_threshold", "on_demand_checkpointing", "resume_from_full_state_checkpoint",
             "pretraining_config", "osft_memory_efficient_init", "device", "torch_compile", "num_chunks"),
    "lora_sft": ("use_rslora", "use_dora", "init_lora_weights", "rank_pattern", "alpha_pattern", "loftq_config",
                 "seed", "max_grad_norm", "weight_decay", "save_model"),
    "lora_grpo": ("art_model_name", "art_project", "art_path", *_GRPO_KWARGS),
    "grpo": _GRPO_KWARGS,
    "embedding_sft": (),  # its other keywords are only warned about and ignored there: thub refuses them
}
# The backend Training Hub uses when none is named (lora_grpo/grpo: the function's default, verl).
DEFAULT_BACKEND = {"sft": "instructlab-training", "osft": "mini-trainer", "lora_sft": "unsloth",
                   "lora_grpo": "verl", "grpo": "verl", "embedding_sft": "sentence-transformers"}
# lora_grpo/grpo pass every signature default explicitly to their backend: the values a Training
# Hub run used when the caller left them out (checked against the wheel's signatures).
_GRPO_DEFAULTS = {"num_iterations": 15, "group_size": 8, "prompt_batch_size": 100, "learning_rate": 1e-05,
                  "temperature": 0.7, "max_tokens": 512, "max_prompt_length": 16384,
                  "gpu_memory_utilization": 0.45, "n_gpus": 1, "nnodes": 1, "tensor_parallel_size": 1,
                  "use_dr_grpo": True}
SIGNATURE_DEFAULTS: dict[str, dict[str, Any]] = {
    "lora_grpo": {**_GRPO_DEFAULTS, "concurrency": 32, "lora_r": 16, "lora_alpha": 8, "max_grad_norm": 0.1,
                  "enforce_eager": False},
    "grpo": dict(_GRPO_DEFAULTS),
}
# Which of them each Training Hub backend reads (``params.get("name", ...)`` in its source; the
# others it ignores, so they are not applied there).
BACKEND_READS: dict[str, frozenset[str]] = {
    "verl": frozenset({"num_iterations", "group_size", "prompt_batch_size", "learning_rate", "temperature",
                       "max_tokens", "max_prompt_length", "gpu_memory_utilization", "n_gpus", "nnodes",
                       "tensor_parallel_size", "use_dr_grpo", "lora_r", "lora_alpha"}),
    "art": frozenset({"num_iterations", "group_size", "prompt_batch_size", "learning_rate", "temperature",
                      "max_tokens", "concurrency", "lora_r", "lora_alpha", "max_grad_norm",
                      "gpu_memory_utilization", "enforce_eager"}),
}
# ``**kwargs`` defaults a Training Hub backend applies itself (``algorithm_params.get(name, default)``):
# its verl backend scores with its tool_call reward unless told otherwise (lora_grpo_verl.py).
BACKEND_KWARG_DEFAULTS: dict[str, dict[str, Any]] = {"verl": {"reward_type": "tool_call"}}
# ``**kwargs`` defaults a Training Hub *function* applies whatever thub backend runs it: its lora_sft
# keeps 3 checkpoints (``save_total_limit=params.get('save_total_limit', 3)``, lora.py), where
# thub's own default keeps every one.
FUNCTION_KWARG_DEFAULTS: dict[str, dict[str, Any]] = {"lora_sft": {"save_total_limit": 3}}
# use_dr_grpo=False on Training Hub's verl backend is GRPO with a KL loss: use_kl_loss=True,
# kl_loss_coef=0.01, kl_loss_type=low_var_kl (lora_grpo_verl.py); thub's beta (verl: kl_loss_coef,
# low_var_kl) gives the same.
DR_GRPO_OFF_KL = 0.01
OSFT_MAX_STEPS = ("Training Hub's osft passes max_steps to mini-trainer, which ignores it unless training_mode='step' "
                  "(it trains full epochs): add training_mode='step' to stop after max_steps, or leave max_steps out "
                  "to train num_epochs as Training Hub did")
# TrainingHubCallback's hooks, in call order within a run.
CALLBACK_HOOKS = ("on_train_begin", "on_epoch_begin", "on_step_begin", "on_log", "on_evaluate", "on_save",
                  "on_step_end", "on_epoch_end", "on_train_end")

Kind = Literal["same", "mapped", "fixed", "refused", "api"]
Converter = Callable[[Any, Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Rule:
    """How thub treats one Training Hub name.

    ``thub``: the thub parameter(s) it becomes (docs); ``convert(value, same_layer_values)``
    returns the thub values (empty: nothing to set, ``note`` says why) or raises ValueError
    to refuse that value; ``accepts``: the values a ``fixed`` switch takes; ``note``: the
    mapping, the fixed behaviour or the migration message.
    """

    kind: Kind
    note: str = ""
    thub: str = ""
    convert: Converter | None = None
    accepts: tuple[Any, ...] = ()


def rename(target: str, note: str = "") -> Rule:
    return Rule("mapped", note or f"same meaning under thub's name {target}", target,
                lambda value, _others: {target: value})


def refuse(message: str) -> Rule:
    return Rule("refused", message)


def fixed(accepts: tuple[Any, ...], note: str) -> Rule:
    return Rule("fixed", note, accepts=accepts)


# --- converters -------------------------------------------------------------------------------


def _betas(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"expected a (beta1, beta2) pair such as (0.9, 0.95), found {value!r}")
    beta1, beta2 = value
    return {"beta1": beta1, "beta2": beta2}


def _processed(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    return {"data_format": "processed"} if value else {}


def _keep_last(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    """instructlab's ``keep_last_checkpoint_only`` overwrites one ``last_epoch`` folder; thub keeps the newest
    complete checkpoint instead (``save_total_limit: 1``), never deleting it before the next one is saved."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, found {value!r}")
    return {"save_total_limit": 1} if value else {}


def _dataset_type(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    formats = {"chat_template": "messages", "alpaca": "alpaca"}
    if value not in formats:
        raise ValueError(f"dataset_type {value!r}: thub reads chat_template (messages) and alpaca rows; for raw text "
                         "use data_format: document with document_column_name: text")
    return {"data_format": formats[value]}


def _default_only(default: str, what: str) -> Converter:
    def convert(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
        if value != default:
            raise ValueError(f"thub reads {what} from the key {default!r}; rename the key in your data "
                             "(or give a dataset mapping, see docs/data.md)")
        return {}
    return convert


def _reward_type(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    if value in ("tool_call", "math"):
        return {"reward": [value]}
    raise ValueError(f"reward_type {value!r}: pass your reward as reward='module:function' (thub's built-ins: "
                     "math, tool_call, binary)")


def import_string(function: Any) -> str:
    """``module:qualname`` of a module-level function the training child can import."""
    if isinstance(function, str):
        return function
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not callable(function) or not module or module == "__main__" or "<" in qualname:
        raise ValueError("thub runs it in the training process, which imports it by name: define it at the top "
                         "level of a module on PYTHONPATH (not in __main__, a notebook cell or a closure)")
    return f"{module}:{qualname}"


_FSDP_KEYS = {"sharding_strategy": "fsdp_sharding_strategy", "cpu_offload_params": "fsdp_cpu_offload"}


def _fsdp_options(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    """instructlab-training's ``FSDPOptions`` (the object, or a dict of its fields) as thub's FSDP
    parameters; the strategy's enum as its name (pydantic checks it)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if not isinstance(value, Mapping):
        raise ValueError(f"expected FSDPOptions or a dict of its fields {sorted(_FSDP_KEYS)}, found "
                         f"{type(value).__name__}")
    unknown = sorted(str(key) for key in value if key not in _FSDP_KEYS)
    if unknown:
        raise ValueError(f"unknown FSDPOptions field {unknown[0]!r} (instructlab-training's are "
                         f"{', '.join(sorted(_FSDP_KEYS))})")
    out = {}
    for key, target in _FSDP_KEYS.items():
        if value.get(key) is not None:
            given = value[key]
            out[target] = str(getattr(given, "value", given)).upper() if key == "sharding_strategy" else given
    return out


def _data_config(value: Any, others: Mapping[str, Any]) -> dict[str, Any]:
    """Training Hub streams a Hugging Face dataset id with ``load_dataset(data_path, data_config)``
    and reads a local ``.json``/``.jsonl`` file without it (lora_grpo._load_tool_call_dataset):
    with such a file the name changes nothing there either."""
    data_path = others.get("data_path")
    if isinstance(data_path, str) and data_path.lower().endswith((".json", ".jsonl")):
        return {}
    raise ValueError("data_config is the Hugging Face dataset configuration Training Hub streams data_path with; "
                     + HUB_DATA_REFUSAL.replace("'CONFIG'", repr(value)))


def _reward_fn(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    from thub_builtins.training_hub.reward import reward_target

    return {"reward": [reward_target(value)]}


def _rollout(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    return {"rollout_function": import_string(value)}


def _training_mode(value: Any, others: Mapping[str, Any]) -> dict[str, Any]:
    mode = str(getattr(value, "value", value)).lower()  # mini-trainer's TrainingMode enum, or its string
    if mode == "step":
        if others.get("max_steps") is None:
            raise ValueError("training_mode='step' stops after max_steps: set max_steps")
        return {}
    if mode == "epoch":
        if others.get("max_steps") is not None:
            raise ValueError(OSFT_MAX_STEPS)
        return {}
    raise ValueError("thub trains by epochs (num_epochs) or steps (training_mode='step' with max_steps); token and "
                     "infinite budgets are not offered")


def _storage(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    """Training Hub's selector: None or ``"pvc"`` keeps checkpoints on the filesystem only (nothing to
    set); a URI is thub's ``checkpoint_storage`` (its scheme and driver are checked by the parameter)."""
    if value in (None, "", "pvc"):
        return {}
    if not isinstance(value, str) or "://" not in value:
        raise ValueError(f"expected None, 'pvc' or a URI such as 's3://bucket/prefix', found {value!r}")
    return {"checkpoint_storage": value}


def _column(default: str) -> Converter:
    """embedding_sft's ``text_column``/``label_column``: thub's ``text_label`` rows are read from
    ``text`` and ``label``; another column name is refused with the rename to make."""
    def convert(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
        if value != default:
            raise ValueError(f"thub's text_label rows hold the key {default!r}: rename {value!r} to {default!r} in "
                             "your data")
        return {}
    return convert


def _loss_fn(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    """A loss class or factory (``f(model) -> loss``) by import string; a loss object built in the
    caller's process (bound to a model there) cannot reach the training process."""
    if value is None:
        return {}
    if isinstance(value, str) or isinstance(value, type) or getattr(value, "__code__", None) is not None:
        return {"loss_fn": import_string(value)}
    raise ValueError(f"a loss object ({type(value).__name__}) is bound to a model built in this process; pass its "
                     "class (or a function model -> loss) by import string, e.g. 'sentence_transformers."
                     "sentence_transformer.losses:BatchSemiHardTripletLoss': thub calls it with the model it trains")


def _rdzv_id(value: Any, _others: Mapping[str, Any]) -> dict[str, Any]:
    return {"rdzv_id": str(value) if isinstance(value, int) and not isinstance(value, bool) else value}


# --- the table ----------------------------------------------------------------------------------

HUB_DATA_REFUSAL = ("thub reads local files, not a Hugging Face dataset stream: export it once, e.g. python -c \"from "
             "datasets import load_dataset; load_dataset('ID', 'CONFIG', split='train[:N]').to_json('train.jsonl')\", "
             "then pass data_path='train.jsonl'")
_JIT = ("thub always saves a checkpoint and stops on SIGTERM or Ctrl-C; the same call with resume=True "
        "(on the command line: --resume) continues")
_VALIDATION = ("thub evaluates eval_loss every validation_frequency steps on the validation_split held out of "
               "data_path or on validation_data_path")
_HPU = "thub trains on NVIDIA GPUs (and on CPU with the trl backend); Intel Gaudi (HPU) is not supported"
_MT_DTYPE = "thub keeps mini-trainer's default dtypes (bf16 weights saved, fp32 optimizer state)"

RULES: dict[str, Rule] = {
    # every function
    "backend": Rule("api", "the same backend names; none given: Training Hub's default for the function when it "
                           "can run here, else thub's choice (--backend on the command line)"),
    "callbacks": Rule("api", "TrainingHubCallback objects: called in this process from the run's events "
                             "(thub_on_event), never pickled into the training process"),
    "iteration_callback": Rule("api", "called in this process as f(step, metrics_line) for every metrics line"),
    "rdzv_id": Rule("same", "an int is accepted and passed as its string", "rdzv_id", _rdzv_id),
    "num_iterations": Rule("same", "GRPO steps (Training Hub's ART meaning); Training Hub's verl backend runs "
                                   "num_iterations epochs: thub.grpo/lora_grpo on verl pass it as num_epochs, in "
                                   "YAML set num_epochs", "num_iterations"),
    "enable_jit_checkpoint": fixed((True, False), _JIT),
    "on_demand_checkpointing": fixed((True, False), _JIT),
    "checkpoint_storage": Rule("same", "'pvc' (or None): checkpoints stay in ckpt_output_dir; s3://, gs://, file:// "
                                       "URI: thub's checkpoint_storage (every complete checkpoint mirrored with a "
                                       "completion marker; resume=True continues from the newest complete one, "
                                       "local or remote). Unlike Training Hub, a failed upload is a warning, not a "
                                       "stopped run, and the marker is .thub-complete", "checkpoint_storage",
                               _storage),
    "device": refuse(_HPU),
    "torch_compile": refuse(_HPU + " (torch_compile is a Gaudi option of its osft example)"),
    "num_chunks": refuse(_HPU + " (num_chunks is a Gaudi option of its osft example)"),
    # sft (instructlab-training TrainingArgs)
    "max_batch_len": rename("max_tokens_per_gpu"),
    "random_seed": rename("seed"),
    "adamw_weight_decay": rename("weight_decay"),
    "adamw_eps": rename("eps"),
    "adamw_betas": Rule("mapped", "a (beta1, beta2) pair becomes beta1 and beta2", "beta1, beta2", _betas),
    "chat_tmpl_path": refuse("thub uses the tokenizer's chat template: put yours in the model's "
                             "tokenizer_config.json (chat_template)"),
    "use_legacy_tmpl": refuse("thub uses the tokenizer's chat template: put the template you need in the model's "
                              "tokenizer_config.json"),
    "use_dolomite": fixed((False,), "dolomite model conversion is not offered: thub trains the Hugging Face model as "
                                    "is (use_dolomite=False, Training Hub's default)"),
    "is_padding_free": refuse("thub's instructlab-training backend decides padding-free batches itself "
                              "(on when flash-attn is installed)"),
    "mock_data": refuse("thub trains on real data only: use a small file, e.g. examples/data/chat.jsonl"),
    "mock_data_len": refuse("thub trains on real data only: use a small file, e.g. examples/data/chat.jsonl"),
    "deepspeed_options": refuse("thub's instructlab-training backend uses FSDP, not DeepSpeed"),
    "fsdp_options": Rule("mapped", "instructlab-training's FSDPOptions (or a dict of its fields): sharding_strategy "
                                   "→ fsdp_sharding_strategy, cpu_offload_params → fsdp_cpu_offload; honoured by the "
                                   "instructlab-training backend, refused (exit 2) on a backend without FSDP",
                         "fsdp_sharding_strategy, fsdp_cpu_offload", _fsdp_options),
    "distributed_backend": fixed(("fsdp",), "thub's instructlab-training backend runs FSDP"),
    "disable_flash_attn": refuse("thub sets it itself: flash-attn when installed, SDPA otherwise (see thub doctor)"),
    "lora": refuse("LoRA is its own algorithm in thub: thub.lora_sft(...) or thub train lora_sft"),
    "process_data": fixed((True,), "thub always prepares the data; for pre-tokenised rows use "
                                   "data_format: processed"),
    "keep_last_checkpoint_only": Rule("mapped", "True: save_total_limit 1 (the newest complete checkpoint is kept, "
                                                "each older one deleted once a new one is saved); False: every "
                                                "checkpoint kept", "save_total_limit", _keep_last),
    "pretraining_config": refuse("use is_pretraining, block_size and document_column_name"),
    "data_process_num_cpu_procs": refuse("thub chooses the number of data-processing workers"),
    "log_level": refuse("thub writes the backend's log to logs/train.log at the library's default level"),
    # osft (mini-trainer TrainingArgs names)
    "use_processed_dataset": Rule("mapped", "true: data_format processed (rows of input_ids and labels); false: "
                                            "thub prepares the data (its default)", "data_format", _processed),
    "model_name_or_path": rename("model_path"),
    "batch_size": rename("effective_batch_size"),
    "output_dir": rename("ckpt_output_dir"),
    "num_warmup_steps": rename("warmup_steps"),
    "use_liger_kernels": rename("use_liger"),
    "osft_unfreeze_rank_ratio": rename("unfreeze_rank_ratio"),
    "osft_target_patterns": rename("target_patterns"),
    "max_epochs": rename("num_epochs"),
    "osft": fixed((True,), "osft=False is plain SFT: thub.sft(..., backend='mini-trainer')"),
    "osft_upcast_dtype": refuse(_MT_DTYPE),
    "save_dtype": refuse(_MT_DTYPE),
    "train_dtype": refuse(_MT_DTYPE),
    "min_samples_per_checkpoint": refuse("checkpoint by steps or epochs: save_steps or checkpoint_at_epoch"),
    "training_mode": Rule("fixed", "'step' with max_steps: stop after max_steps; 'epoch': train num_epochs, as "
                                   "mini-trainer does (thub sets its training mode from max_steps)",
                          convert=_training_mode),
    "max_tokens": refuse("token-budget training is not offered: use max_steps or num_epochs"),
    "validate_at_epoch": refuse(_VALIDATION),
    "min_samples_per_validation": refuse(_VALIDATION),
    "validate_at_final": refuse(_VALIDATION),
    "save_best_val_loss": refuse(_VALIDATION + "; result.json names the best checkpoint (best_checkpoint, the lowest "
                                               "eval_loss) and save_total_limit never deletes it"),
    "val_loss_improvement_threshold": refuse(_VALIDATION + "; result.json names the best checkpoint "
                                                           "(best_checkpoint)"),
    "resume_from_full_state_checkpoint": refuse("run the same command with --resume (thub.train(..., resume=True))"),
    "osft_memory_efficient_init": fixed((True,), "mini-trainer 0.9 always loads OSFT models memory-efficiently under "
                                                 "torchrun (rank 0 reads the weights, FSDP2 lazy init shards them: "
                                                 "setup_model_for_training.setup_osft_model_distributed); it has no "
                                                 "such field (Training Hub drops the keyword), so False cannot be had"),
    # lora_sft (unsloth)
    # both converted on the merged layers by _merged_batch (the world size may come from another layer)
    "micro_batch_size": Rule("mapped", "effective_batch_size = micro_batch_size x gradient_accumulation_steps x "
                                       "processes, when effective_batch_size is not set (Training Hub ignores it "
                                       "otherwise)", "effective_batch_size"),
    "gradient_accumulation_steps": Rule("mapped", "folded into effective_batch_size (thub chooses the micro-batch x "
                                                  "accumulation split of the same effective batch)",
                                        "effective_batch_size"),
    "flash_attention": fixed((True, False), "no effect in Training Hub either; thub uses flash-attn when installed, "
                                            "SDPA otherwise"),
    "sample_packing": rename("packing"),
    "bf16": fixed((True,), "thub trains in bf16 on GPUs (fp32 on CPU); there is no switch to turn it off"),
    "fp16": fixed((False,), "fp16 training is not offered: thub trains in bf16 on GPUs"),
    "tf32": fixed((True, False), "no effect in Training Hub either (never passed to the trainer); thub leaves TF32 "
                                 "at PyTorch's default"),
    "eval_steps": rename("validation_frequency", "eval_loss every N steps on validation_split of data_path or on "
                                                 "validation_data_path"),
    "dataset_type": Rule("mapped", "chat_template: data_format messages; alpaca: data_format alpaca", "data_format",
                         _dataset_type),
    "field_messages": Rule("fixed", "the list key 'messages' is accepted; another key: a dataset mapping "
                                    "{path, messages: KEY} (docs/data.md)",
                           convert=_default_only("messages", "messages")),
    "field_instruction": Rule("fixed", "'instruction' is accepted; rename other keys",
                              convert=_default_only("instruction", "alpaca instructions")),
    "field_input": Rule("fixed", "'input' is accepted; rename other keys",
                        convert=_default_only("input", "alpaca inputs")),
    "field_output": Rule("fixed", "'output' is accepted; rename other keys",
                         convert=_default_only("output", "alpaca outputs")),
    "enable_model_splitting": fixed((False,), "thub does not split one model over GPUs (device_map); use "
                                              "nproc_per_node for data parallelism"),
    "finetune_vision_layers": fixed((False,), "thub trains the language model; vision layers are not adapted"),
    "finetune_language_layers": fixed((True,), "thub always adapts the language layers"),
    "eval_data_path": rename("validation_data_path", "a separate held-out file, checked as data_path is; needs "
                                                     "eval_steps (validation_frequency)"),
    "per_device_eval_batch_size": refuse("thub evaluates with the training micro-batch"),
    "init_lora_weights": fixed((True,), "thub initialises LoRA with PEFT's default (B = 0)"),
    "rank_pattern": refuse("one lora_r for every adapted module: choose target_modules, or train twice"),
    "alpha_pattern": refuse("one lora_alpha for every adapted module: choose target_modules"),
    "loftq_config": refuse("LoftQ initialisation is not offered: use load_in_4bit (QLoRA)"),
    "save_model": rename("save_final_checkpoint"),
    # lora_grpo / grpo
    "data_config": Rule("fixed", "the Hugging Face dataset configuration of a dataset id data_path (Training Hub: "
                                 "load_dataset(data_path, data_config)); with a local .json/.jsonl file it changes "
                                 "nothing, in Training Hub too; with a dataset id, export it (see data_path)",
                        convert=_data_config),
    "n_train": refuse(HUB_DATA_REFUSAL),
    "n_val": refuse(HUB_DATA_REFUSAL + " (a validation split: a second file)"),
    "rollout_fn": Rule("mapped", "a module-level async function becomes rollout_function='module:function' (art "
                                 "backend)", "rollout_function", _rollout),
    "tasks": refuse("thub reads the tasks from data_path: write one task per JSONL line and pass rollout_fn"),
    "reward_fn": Rule("mapped", "Training Hub's per-completion f(data_source, solution_str, ground_truth, "
                                "extra_info=None) -> float (a module-level function or its dotted path) becomes "
                                "reward [thub_builtins.training_hub.reward:per_completion.MODULE.FUNCTION], which "
                                "scores each completion of thub's batches with it (data_source 'custom', as on "
                                "Training Hub's verl; replaces Training Hub's default reward_type)", "reward",
                      _reward_fn),
    "n_gpus": rename("nproc_per_node", "GPUs per node"),
    "art_model_name": rename("wandb_run_name", "ART's model name is its W&B run name"),
    "art_project": rename("wandb_project", "ART's project is its W&B project"),
    "art_path": refuse("thub keeps ART's files in the run directory (ckpt_output_dir)"),
    "reward_type": Rule("mapped", "tool_call or math: reward [tool_call] or [math]", "reward", _reward_type),
    "data_source": refuse("thub's backends give a reward the prompts, completions and ground_truth only; a reward_fn "
                          "is called with data_source='custom' (Training Hub's verl default): branch on the "
                          "ground truth, or train each data source with its own reward"),
    # embedding_sft (sentence-transformers); batch_size (per device, one process) and eval_data_path: above
    "loss_fn": Rule("same", "a loss class or a function model -> loss, by import string or as a module-level "
                            "object (thub calls it with the model); a loss object is refused", "loss_fn", _loss_fn),
    "text_column": Rule("fixed", "'text' is accepted; rename other keys", convert=_column("text")),
    "label_column": Rule("fixed", "'label' is accepted; rename other keys", convert=_column("label")),
}


def rule_for(name: str, thub_fields: Mapping[str, Any]) -> Rule | None:
    """The rule for ``name``: an explicit one, else ``same`` when ``thub_fields`` (the algorithm's
    parameters) has the field."""
    rule = RULES.get(name)
    if name in thub_fields and (rule is None or rule.kind != "same"):
        return Rule("same", thub=name)  # e.g. max_tokens: refused for osft, thub's own for grpo
    return rule


def names_for(algorithm: str) -> tuple[str, ...]:
    """Every Training Hub keyword of the function ``algorithm`` (signature, keyword-only, kwargs)."""
    return SIGNATURES.get(algorithm, ()) + KEYWORD_ONLY.get(algorithm, ()) + KWARGS.get(algorithm, ())
