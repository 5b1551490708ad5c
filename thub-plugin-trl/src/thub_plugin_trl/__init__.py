"""thub backend ``trl``: registration only. TRL, PEFT and torch are imported in ``runner``."""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import BackendSpec, MemoryPolicy, hookimpl, translation_hook
from thub_plugin_trl.translate import DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("trl>=1.16,<2", "peft>=0.17", "transformers>=4.56", "datasets>=3", "torch>=2.4")
# What `thub install` runs for it (thub and its plugins are on no package index).
INSTALL = "thub install trl --into current   # --gpu adds bitsandbytes (QLoRA)"


MEMORY = MemoryPolicy(
    summary="HF Trainer + TRL SFTTrainer: weights in the checkpoint's dtype, chunked LM head (no full logits), "
            "DDP; gradient checkpointing on unless turned off (TRL's default)",
    checkpointing="unless-disabled", precision="checkpoint", sharding="ddp", loss="fused", rollout="colocated",
    source="trl SFTTrainer: model_init_kwargs dtype 'auto'; add_fused_lm_head() scores trained positions "
           "in tiles; _BaseConfig gradient_checkpointing=True; GRPOTrainer use_vllm colocate reserves "
           "vllm_gpu_memory_utilization",
)


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name="trl",
        summary="Hugging Face TRL + PEFT; trains on CPU or GPU (the reference backend).",
        algorithms=HONOURED,
        runner="thub_plugin_trl.runner:run",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=False,
        priority=10,
        defaults=DEFAULTS,
        launcher="torchrun",
        memory=MEMORY,
        docs="thub-plugin-trl/README.md",
    ))


thub_translate_params = translation_hook("trl", translate)

