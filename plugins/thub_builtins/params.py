"""Parameter models of the built-in algorithms: each parameter is defined once, here.

Names, types and meanings follow Training Hub so users can move over. The CLI options, the
YAML schema (``thub config schema``), ``thub config init``, the Python API and the docs are
generated from these fields. Defaults that differ by training library live in the backend
specs; a field left ``None`` here means "the backend's default".

This module imports pydantic models and is loaded only by commands that need parameters.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


def _field(default: Any = None, *, group: str, help: str, flag: str | None = None, split: bool = True,
           **kw: Any) -> Any:
    """A parameter: default, group (for --help and docs) and one line of help.

    ``flag`` renames the CLI option (``--dataset`` for ``datasets``); ``split=False`` keeps a list
    option's values whole instead of splitting them on commas.
    """
    extra: dict[str, Any] = {"group": group}
    if flag:
        extra["flag"] = flag
    if not split:
        extra["split"] = False
    return Field(default, description=help, json_schema_extra=extra, **kw)


REQUIRED = ...
DataFormat = Literal["auto", "messages", "sharegpt", "alpaca", "document", "grpo", "processed"]


class BaseParams(BaseModel):
    """Parameters shared by every algorithm."""

    # allow_inf_nan=False: inf, 1e309 and nan are never a learning rate, clip norm or epsilon
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    # core
    model_path: str = _field(REQUIRED, group="core", help="Local path or hub id of the base model.")
    data_path: str | None = _field(group="core", help="Training data file or directory (JSONL, JSON, Parquet, saved HF dataset); or use datasets.")
    ckpt_output_dir: str = _field(REQUIRED, group="core", help="Run directory: checkpoints, metrics, logs, result.json.")
    data_format: DataFormat = _field("auto", group="core", help="Data format; 'auto' detects it from the first row.")
    datasets: list[str | dict[str, Any]] | None = _field(
        group="data", flag="dataset", split=False,
        help="Several datasets to mix: PATH[:key=value,...] on the command line, or mappings "
             "{path, format, role_tag, content_tag, user_tag, assistant_tag, prob, ...} in YAML (see docs/data.md).")
    mix_strategy: Literal["concat", "interleave_under", "interleave_over"] = _field(
        "concat", group="data", help="How datasets are combined: concat, or interleave until the shortest/longest ends.")
    mix_probabilities: list[float] | None = _field(group="data", help="Sampling weights of the datasets for interleaving.")
    num_epochs: int | None = _field(group="core", help="Passes over the data.", ge=1)
    max_steps: int | None = _field(group="core", help="Stop after this many optimizer steps (overrides num_epochs where the backend supports it).", ge=1)
    effective_batch_size: int | None = _field(group="core", help="Samples per optimizer step across all processes (per-device batch x accumulation x world size).", ge=1)
    learning_rate: float | None = _field(group="core", help="Peak learning rate.", gt=0)
    max_seq_len: int | None = _field(group="core", help="Maximum tokens per sample.", ge=1)
    max_tokens_per_gpu: int | None = _field(group="core", help="Token budget per GPU per micro-batch (dynamic batching).", ge=1)
    seed: int = _field(42, group="core", help="Random seed for data order and initialisation.")
    data_output_dir: str | None = _field(group="core", help="Where prepared data goes (default: inside the run directory).")
    save_steps: int | None = _field(group="core", help="Save a checkpoint every N steps.", ge=1)
    checkpoint_at_epoch: bool | None = _field(group="core", help="Save a checkpoint at the end of every epoch.")
    save_final_checkpoint: bool = _field(True, group="core", help="Save the model when training ends.")
    trust_remote_code: bool = _field(False, group="core", help="Allow model code from the model repository.")
    gradient_checkpointing: bool | None = _field(group="core", help="Trade compute for memory by recomputing activations.")

    # optimizer
    lr_scheduler: str | None = _field(group="optimizer", help="Learning-rate schedule (linear, cosine, constant, ...).")
    lr_scheduler_kwargs: dict[str, Any] | None = _field(group="optimizer", help="Extra scheduler arguments (JSON object).")
    warmup_steps: int | None = _field(group="optimizer", help="Linear warm-up steps.", ge=0)
    beta1: float | None = _field(group="optimizer", help="AdamW beta1.", gt=0, lt=1)
    beta2: float | None = _field(group="optimizer", help="AdamW beta2.", gt=0, lt=1)
    eps: float | None = _field(group="optimizer", help="AdamW epsilon.", gt=0)
    weight_decay: float | None = _field(group="optimizer", help="AdamW weight decay.", ge=0)
    max_grad_norm: float | None = _field(group="optimizer", help="Gradient clipping norm.", gt=0)

    # torchrun / distributed
    nproc_per_node: int | Literal["auto", "gpu"] | None = _field(group="distributed", help="Processes per node (int, 'auto' or 'gpu').")
    nnodes: int | None = _field(group="distributed", help="Number of nodes.", ge=1)
    node_rank: int | None = _field(group="distributed", help="Rank of this node.", ge=0)
    rdzv_id: str | None = _field(group="distributed", help="Rendezvous id.")
    rdzv_endpoint: str | None = _field(group="distributed", help="Rendezvous endpoint host:port.")
    master_addr: str | None = _field(group="distributed", help="Master address (static rendezvous).")
    master_port: int | None = _field(group="distributed", help="Master port.", ge=1, le=65535)

    # logging
    logging_steps: int = _field(1, group="logging", help="Write a metrics line every N steps.", ge=1)
    divergence_steps: int = _field(3, group="logging", ge=0,
                                   help="Stop the run as failed when the loss or gradient norm is NaN/inf for this many consecutive logged steps (0: never).")
    wandb_project: str | None = _field(group="logging", help="Weights & Biases project.")
    wandb_entity: str | None = _field(group="logging", help="Weights & Biases entity.")
    wandb_run_name: str | None = _field(group="logging", help="Weights & Biases run name.")
    tensorboard_log_dir: str | None = _field(group="logging", help="TensorBoard log directory.")
    mlflow_tracking_uri: str | None = _field(group="logging", help="MLflow tracking URI.")
    mlflow_experiment_name: str | None = _field(group="logging", help="MLflow experiment.")
    mlflow_run_name: str | None = _field(group="logging", help="MLflow run name.")

    @model_validator(mode="after")
    def _some_data(self) -> BaseParams:
        if not self.data_path and not self.datasets:
            raise ValueError("data_path or datasets is required")
        if self.mix_probabilities and self.datasets and len(self.mix_probabilities) != len(self.datasets) + bool(self.data_path):
            raise ValueError("mix_probabilities needs one weight per dataset (data_path counts as the first)")
        return self


class _SupervisedParams(BaseParams):
    """Supervised fine-tuning on chat data, or continued pretraining on documents."""

    unmask_messages: bool = _field(False, group="core", help="Train on every token, not only assistant turns.")
    overlong: Literal["truncate", "drop", "error"] = _field(
        "truncate", group="data", help="Samples longer than max_seq_len: truncate, drop or error (always counted and reported).")
    packing: bool | None = _field(group="core", help="Pack several samples into one sequence.")
    use_liger: bool | None = _field(group="core", help="Use Liger kernels.")
    validation_split: float | None = _field(group="core", help="Fraction of data held out for validation.", ge=0, lt=1)
    validation_frequency: int | None = _field(group="core", help="Validate every N steps (needed when validation_split > 0).", ge=1)

    # continued pretraining
    is_pretraining: bool = _field(False, group="pretraining", help="Continued pretraining on documents instead of chat.")
    block_size: int | None = _field(group="pretraining", help="Tokens per pretraining block (required with is_pretraining).", ge=1)
    document_column_name: str = _field("document", group="pretraining", help="Column holding the document text.")

    @model_validator(mode="after")
    def _pretraining_consistent(self) -> _SupervisedParams:
        if self.is_pretraining and self.block_size is None:
            raise ValueError("block_size is required when is_pretraining is true")
        if not self.is_pretraining and "block_size" in self.model_fields_set:
            raise ValueError("block_size only applies with is_pretraining: true")
        if self.is_pretraining and self.unmask_messages:
            raise ValueError("is_pretraining and unmask_messages cannot be combined (documents have no roles)")
        if self.validation_split and not self.validation_frequency:
            raise ValueError("validation_frequency is required when validation_split > 0")
        return self


class SFTParams(_SupervisedParams):
    """Full fine-tuning (SFT), with continued pretraining through is_pretraining."""

    save_samples: int | None = _field(group="core", help="Save a checkpoint every N samples (0 disables).", ge=0)
    accelerate_full_state_at_epoch: bool | None = _field(group="core", help="Save full optimizer state at each epoch (for resuming).")


class OSFTParams(SFTParams):
    """Orthogonal-subspace fine-tuning: learn new tasks while preserving old ones."""

    unfreeze_rank_ratio: float = _field(REQUIRED, group="osft", help="Fraction of each matrix's singular subspace to train, in (0, 1].", gt=0, le=1)
    target_patterns: list[str] | None = _field(group="osft", help="Module-name patterns to apply OSFT to (default: per-model map).")


class LoRAMixin(BaseModel):
    """LoRA / QLoRA adapter parameters."""

    model_config = ConfigDict(allow_inf_nan=False)

    lora_r: int = _field(16, group="lora", help="LoRA rank.", ge=1)
    lora_alpha: int = _field(32, group="lora", help="LoRA scaling alpha (32 on every backend; none substitutes its own default).", ge=1)
    lora_dropout: float = _field(0.0, group="lora", help="Dropout on LoRA layers.", ge=0, lt=1)
    target_modules: list[str] | None = _field(group="lora", help="Modules to adapt (default: the backend's choice, usually all linear layers).")
    use_rslora: bool = _field(False, group="lora", help="Rank-stabilised LoRA scaling.")
    use_dora: bool = _field(False, group="lora", help="Weight-decomposed LoRA (DoRA).")
    load_in_4bit: bool = _field(False, group="lora", help="QLoRA: load the base model in 4 bits.")
    load_in_8bit: bool = _field(False, group="lora", help="Load the base model in 8 bits.")
    bnb_4bit_quant_type: Literal["nf4", "fp4"] | None = _field(group="lora", help="4-bit quantisation type.")
    bnb_4bit_compute_dtype: str | None = _field(group="lora", help="Compute dtype for 4-bit layers.")
    bnb_4bit_use_double_quant: bool | None = _field(group="lora", help="Nested quantisation for 4-bit.")

    @model_validator(mode="after")
    def _one_quantisation(self) -> LoRAMixin:
        if self.load_in_4bit and self.load_in_8bit:
            raise ValueError("load_in_4bit and load_in_8bit cannot both be true")
        return self


class LoRASFTParams(LoRAMixin, _SupervisedParams):
    """Supervised fine-tuning of LoRA/QLoRA adapters."""

    save_merged: bool = _field(False, group="lora", help="Also export the base model with the adapter merged in, in 16 bits, next to the adapter (ckpt_output_dir/merged).")

    @model_validator(mode="after")
    def _merged_needs_final(self) -> LoRASFTParams:
        if self.save_merged and not self.save_final_checkpoint:
            raise ValueError("save_merged exports the final model: it needs save_final_checkpoint: true")
        return self


class GRPOParams(BaseParams):
    """Group Relative Policy Optimisation with verifiable rewards."""

    data_path: str | None = _field(group="core", help="Prompts with ground truth: rows {question|prompt|messages, ground_truth|answer}.")
    reward: list[str] = _field(["math"], group="grpo", help="Reward functions: registered names (thub backends --rewards) or module:function.")
    group_size: int = _field(8, group="grpo", help="Completions sampled per prompt. The GRPO group, the same on every backend.", ge=2)
    prompt_batch_size: int | None = _field(group="grpo", help="Prompts per optimizer step.", ge=1)
    num_iterations: int | None = _field(
        group="grpo",
        help="GRPO steps: each samples group_size completions for prompt_batch_size prompts and updates the policy "
             "on them. The same as max_steps (set one, or both equal); unset: the backend's own length. "
             "Not honoured by trl, whose num_iterations means updates per batch: use max_steps there.", ge=1)
    max_tokens: int = _field(512, group="grpo", help="Maximum completion tokens.", ge=1)
    max_prompt_length: int | None = _field(group="grpo", help="Maximum prompt tokens.", ge=1)
    temperature: float = _field(0.7, group="grpo", help="Sampling temperature of the rollouts (passed to every backend's generator).", ge=0)
    beta: float | None = _field(group="grpo", help="KL penalty coefficient (0 disables the reference model).", ge=0)
    system_prompt: str | None = _field(group="grpo", help="System prompt prepended to every question.")
    gpu_memory_utilization: float | None = _field(group="grpo", help="Fraction of GPU memory for the vLLM rollout engine (vLLM's own setting, passed to the engine on every backend that has one).", gt=0, le=1)
    enforce_eager: bool | None = _field(group="grpo", help="Run the vLLM rollout engine eagerly, without CUDA graphs (less memory, slower).")
    rollout_function: str | None = _field(
        group="grpo",
        help="Custom rollouts: module:function, an async f(model, task) -> art.Trajectory that scores its own "
             "trajectories; the rows of data_path are the tasks (reward is then not used).")
    tensor_parallel_size: int | None = _field(group="grpo", help="Tensor parallelism of the rollout engine.", ge=1)
    concurrency: int | None = _field(group="grpo", help="Concurrent rollouts.", ge=1)
    micro_batch_size: int | None = _field(group="grpo-scale", help="Per-GPU micro-batch of policy updates.", ge=1)
    ppo_mini_batch_size: int | None = _field(group="grpo-scale", help="Prompts per policy-update mini-batch (default: derived from prompt_batch_size).", ge=1)
    load_format: Literal["dummy", "safetensors", "auto"] | None = _field(group="grpo-scale", help="How the rollout engine loads initial weights before the first sync.")
    layered_summon: bool | None = _field(group="grpo-scale", help="Gather sharded LoRA weights layer by layer for the rollout engine (large models).")
    language_model_only: bool | None = _field(group="grpo-scale", help="Load only the language model of a multimodal checkpoint into the rollout engine.")
    update_weights_bucket_megabytes: int | None = _field(group="grpo-scale", help="Bucket size of the trainer-to-rollout weight sync, in MB.", ge=1)
    param_offload: bool | None = _field(group="grpo-scale", help="Offload sharded parameters to CPU.")
    optimizer_offload: bool | None = _field(group="grpo-scale", help="Offload optimizer states to CPU.")
    saves_per_epoch: int | None = _field(group="grpo-scale", help="Checkpoints per pass over the prompts.", ge=1)
    use_dr_grpo: bool | None = _field(group="grpo", help="Dr. GRPO: no std normalisation of advantages, sequence-sum loss.")
    use_fused_kernels: bool | None = _field(group="grpo-scale", help="Fused logits/entropy kernels in the policy model.")

    @model_validator(mode="after")
    def _one_step_count(self) -> GRPOParams:
        if self.max_steps and self.num_iterations and self.max_steps != self.num_iterations:
            raise ValueError(f"max_steps {self.max_steps} and num_iterations {self.num_iterations} disagree; "
                             "both mean GRPO steps: set one")
        if self.rollout_function:
            unused = [name for name in ("reward", "system_prompt") if name in self.model_fields_set]
            if unused:
                raise ValueError(f"{' and '.join(unused)} not used with rollout_function (the rollout function "
                                 "builds its own prompts and scores its trajectories)")
        return self


class LoRAGRPOParams(LoRAMixin, GRPOParams):
    """GRPO training LoRA adapters."""

    max_lora_rank: int | None = _field(group="lora", help="Largest LoRA rank the vLLM rollout engine accepts (default: the smallest vLLM rank that holds lora_r).", ge=1)

    @model_validator(mode="after")
    def _rank_fits(self) -> LoRAGRPOParams:
        if self.max_lora_rank is not None and self.max_lora_rank < self.lora_r:
            raise ValueError(f"max_lora_rank {self.max_lora_rank} is smaller than lora_r {self.lora_r}")
        return self
