"""Parameter models of the built-in algorithms: each parameter is defined once, here (the
parameters every algorithm shares: :class:`thub.params.BaseParams`, re-exported here for
compatibility).

Names, types and meanings follow Training Hub so users can move over. The CLI options, the
YAML schema (``thub config schema``), ``thub config init``, the Python API and the docs are
generated from these fields. Defaults that differ by training library live in the backend
specs; a field left ``None`` here means "the backend's default".

This module imports pydantic models and is loaded only by commands that need parameters.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from thub.params import REQUIRED, BaseParams, DataFormat, param

__all__ = ["REQUIRED", "BaseParams", "DataFormat", "GRPOParams", "LoRAGRPOParams", "LoRAMixin", "LoRASFTParams",
           "OSFTParams", "OverlongMixin", "SFTParams", "param"]


class OverlongMixin(BaseModel):
    """What happens to a sample longer than ``max_seq_len`` (shared by every token-level algorithm)."""

    model_config = ConfigDict(allow_inf_nan=False)

    overlong: Literal["truncate", "drop", "error"] = param(
        "truncate", group="data",
        help="Samples longer than max_seq_len: truncate, drop or error (always counted and reported).")


class _SupervisedParams(OverlongMixin, BaseParams):
    """Supervised fine-tuning on chat data, or continued pretraining on documents."""

    unmask_messages: bool = param(False, group="core", help="Train on every token, not only assistant turns.")
    packing: bool | None = param(group="core", help="Pack several samples into one sequence.")
    use_liger: bool | None = param(group="core", help="Use Liger kernels.")
    validation_split: float | None = param(group="core", help="Fraction of data held out for validation.", ge=0, lt=1)
    validation_data_path: str | None = param(
        group="core", path=True,
        help="A separate held-out file of the same kind as the training data (checked as data_path is); "
             "instead of validation_split.")
    validation_frequency: int | None = param(
        group="core", ge=1,
        help="Evaluate the held-out loss (eval_loss) every N steps (needed with validation_split or "
             "validation_data_path).")

    # continued pretraining
    is_pretraining: bool = param(False, group="pretraining", help="Continued pretraining on documents instead of chat.")
    block_size: int | None = param(group="pretraining",
                                   help="Tokens per pretraining block (required with is_pretraining).", ge=1)
    document_column_name: str = param("document", core_applied=True, group="pretraining",
                                      help="Column holding the document text.")

    @model_validator(mode="after")
    def _pretraining_consistent(self) -> _SupervisedParams:
        if self.is_pretraining and self.block_size is None:
            raise ValueError("block_size is required when is_pretraining is true")
        if not self.is_pretraining and "block_size" in self.model_fields_set:
            raise ValueError("block_size only applies with is_pretraining: true")
        if self.is_pretraining and self.unmask_messages:
            raise ValueError("is_pretraining and unmask_messages cannot be combined (documents have no roles)")
        if self.validation_split and self.validation_data_path:
            raise ValueError("validation_split and validation_data_path cannot be combined (one held-out set: a "
                             "fraction of data_path, or a separate file)")
        held_out = "validation_data_path" if self.validation_data_path else "validation_split"
        if (self.validation_split or self.validation_data_path) and not self.validation_frequency:
            raise ValueError(f"validation_frequency is required with {held_out}")
        if self.validation_frequency and not (self.validation_split or self.validation_data_path):
            raise ValueError(f"validation_frequency ({self.validation_frequency}) needs validation_split > 0 or "
                             "validation_data_path: without held-out data no backend validates; set one or drop it")
        return self


class SFTParams(_SupervisedParams):
    """Full fine-tuning (SFT), with continued pretraining through is_pretraining."""

    save_samples: int | None = param(group="core", help="Save a checkpoint every N samples (0 disables).", ge=0)
    accelerate_full_state_at_epoch: bool | None = param(group="core",
                                                        help="Save full optimizer state at each epoch (for resuming).")
    fsdp_sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"] | None = param(
        group="distributed",
        help="FSDP sharding strategy (PyTorch's ShardingStrategy names; default: the backend's, "
             "instructlab-training: HYBRID_SHARD, i.e. full sharding within a node, replicas across nodes).")
    fsdp_cpu_offload: bool | None = param(group="distributed",
                                          help="Offload the FSDP-sharded parameters to CPU memory (less GPU memory, "
                                               "slower steps).")


class OSFTParams(SFTParams):
    """Orthogonal-subspace fine-tuning: learn new tasks while preserving old ones."""

    unfreeze_rank_ratio: float = param(REQUIRED, group="osft", gt=0, le=1,
                                       help="Fraction of each matrix's singular subspace to train.")
    target_patterns: list[str] | None = param(group="osft",
                                              help="Module-name patterns to apply OSFT to (default: per-model map).")


class LoRAMixin(BaseModel):
    """LoRA / QLoRA adapter parameters."""

    model_config = ConfigDict(allow_inf_nan=False)

    lora_r: int = param(16, group="lora", help="LoRA rank.", ge=1)
    lora_alpha: int = param(32, group="lora",
                            help="LoRA scaling alpha (32 on every backend; none substitutes its own default).", ge=1)
    lora_dropout: float = param(0.0, group="lora", help="Dropout on LoRA layers.", ge=0, lt=1)
    target_modules: list[str] | None = param(group="lora",
                                             help="Modules to adapt (default: the backend's choice, usually all linear "
                                                  "layers).")
    use_rslora: bool = param(False, group="lora", help="Rank-stabilised LoRA scaling.")
    use_dora: bool = param(False, group="lora", help="Weight-decomposed LoRA (DoRA).")
    load_in_4bit: bool = param(False, group="lora", help="QLoRA: load the base model in 4 bits.")
    load_in_8bit: bool = param(False, group="lora", help="Load the base model in 8 bits.")
    bnb_4bit_quant_type: Literal["nf4", "fp4"] | None = param(group="lora", help="4-bit quantisation type.")
    bnb_4bit_compute_dtype: str | None = param(group="lora", help="Compute dtype for 4-bit layers.")
    bnb_4bit_use_double_quant: bool | None = param(group="lora", help="Nested quantisation for 4-bit.")

    @model_validator(mode="after")
    def _one_quantisation(self) -> LoRAMixin:
        if self.load_in_4bit and self.load_in_8bit:
            raise ValueError("load_in_4bit and load_in_8bit cannot both be true")
        return self


class LoRASFTParams(LoRAMixin, _SupervisedParams):
    """Supervised fine-tuning of LoRA/QLoRA adapters."""

    save_merged: bool = param(False, group="lora",
                              help="Also export the base model with the adapter merged in, in 16 bits, next to the "
                                   "adapter (ckpt_output_dir/merged).")

    @model_validator(mode="after")
    def _merged_needs_final(self) -> LoRASFTParams:
        if self.save_merged and not self.save_final_checkpoint:
            raise ValueError("save_merged exports the final model: it needs save_final_checkpoint: true")
        return self


class GRPOParams(BaseParams):
    """Group Relative Policy Optimisation with verifiable rewards."""

    data_path: str | None = param(group="core", path=True,
                                  help="Prompts with ground truth: rows {question|prompt|messages, "
                                       "ground_truth|answer}.")
    reward: list[str] = param(["math"], group="grpo",
                              help="Reward functions: registered names (thub backends --rewards) or module:function.")
    group_size: int = param(8, group="grpo",
                            help="Completions sampled per prompt. The GRPO group, the same on every backend.", ge=2)
    prompt_batch_size: int | None = param(group="grpo", help="Prompts per optimizer step.", ge=1)
    num_iterations: int | None = param(
        group="grpo",
        help="GRPO steps: each samples group_size completions for prompt_batch_size prompts and updates the policy "
             "on them. The same as max_steps (set one, or both equal); unset: the backend's own length. "
             "Not honoured by trl, whose num_iterations means updates per batch: use max_steps there.", ge=1)
    max_tokens: int = param(512, group="grpo", help="Maximum completion tokens.", ge=1)
    max_prompt_length: int | None = param(group="grpo", help="Maximum prompt tokens.", ge=1)
    temperature: float = param(0.7, group="grpo", gt=0,
                               help="Sampling temperature of the rollouts (passed to every backend's generator; not 0: "
                                    "transformers refuses it when sampling, and GRPO samples).")
    beta: float | None = param(group="grpo", help="KL penalty coefficient (0 disables the reference model).", ge=0)
    system_prompt: str | None = param(group="grpo", help="System prompt prepended to every question.")
    gpu_memory_utilization: float | None = param(group="grpo",
                                                 help="Fraction of GPU memory for the vLLM rollout engine (vLLM's own "
                                                      "setting, passed to the engine on every backend that has one).",
                                                 gt=0, le=1)
    enforce_eager: bool | None = param(group="grpo",
                                       help="Run the vLLM rollout engine eagerly, without CUDA graphs (less memory, "
                                            "slower).")
    rollout_function: str | None = param(
        group="grpo",
        help="Custom rollouts: module:function, an async f(model, task) -> art.Trajectory that scores its own "
             "trajectories; the rows of data_path are the tasks (reward is then not used).")
    tensor_parallel_size: int | None = param(group="grpo", help="Tensor parallelism of the rollout engine.", ge=1)
    concurrency: int | None = param(group="grpo", help="Concurrent rollouts.", ge=1)
    micro_batch_size: int | None = param(group="grpo-scale", help="Per-GPU micro-batch of policy updates.", ge=1)
    ppo_mini_batch_size: int | None = param(group="grpo-scale",
                                            help="Prompts per policy-update mini-batch (default: derived from "
                                                 "prompt_batch_size).", ge=1)
    load_format: Literal["dummy", "safetensors", "auto"] | None = param(group="grpo-scale",
                                                                        help="How the rollout engine loads initial "
                                                                             "weights before the first sync.")
    layered_summon: bool | None = param(group="grpo-scale",
                                        help="Gather sharded LoRA weights layer by layer for the rollout engine (large "
                                             "models).")
    language_model_only: bool | None = param(group="grpo-scale",
                                             help="Load only the language model of a multimodal checkpoint into the "
                                                  "rollout engine.")
    update_weights_bucket_megabytes: int | None = param(
        group="grpo-scale", help="Bucket size of the trainer-to-rollout weight sync, in MB.", ge=1)
    param_offload: bool | None = param(group="grpo-scale", help="Offload sharded parameters to CPU.")
    optimizer_offload: bool | None = param(group="grpo-scale", help="Offload optimizer states to CPU.")
    saves_per_epoch: int | None = param(group="grpo-scale", help="Checkpoints per pass over the prompts.", ge=1)
    use_dr_grpo: bool | None = param(group="grpo",
                                     help="Dr. GRPO: no std normalisation of advantages, sequence-sum loss.")
    use_fused_kernels: bool | None = param(group="grpo-scale", help="Fused logits/entropy kernels in the policy model.")

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

    max_lora_rank: int | None = param(group="lora",
                                      help="Largest LoRA rank the vLLM rollout engine accepts (default: the smallest "
                                           "vLLM rank that holds lora_r).", ge=1)

    @model_validator(mode="after")
    def _rank_fits(self) -> LoRAGRPOParams:
        if self.max_lora_rank is not None and self.max_lora_rank < self.lora_r:
            raise ValueError(f"max_lora_rank {self.max_lora_rank} is smaller than lora_r {self.lora_r}")
        return self
