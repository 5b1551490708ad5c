"""thub backend ``instructlab-training``: registration only. instructlab and torch are imported in ``runner``."""

from __future__ import annotations

import sys
from collections.abc import Callable

from thub.backend import BackendSpec, CheckContext, CheckResult, CheckSpec, MemoryPolicy, hookimpl, translation_hook
from thub_plugin_instructlab.translate import (
    BACKEND,
    DEFAULTS,
    HONOURED,
    MIN_SAMPLE_TOKENS,
    flash_attn_installed,
    translate,
)

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("instructlab-training>=0.16.2,<0.17", "torch>=2.6", "transformers>=4.57.1", "datasets>=2.15")
# What `thub install` runs for it (thub and its plugins are on no package index).
INSTALL = ("thub install instructlab --into current   # instructlab-training 0.16; --gpu adds flash-attn, mamba-ssm "
           "(source builds)")
DOCS = "thub-plugin-instructlab/README.md"


MEMORY = MemoryPolicy(
    summary="instructlab-training: FSDP (HYBRID_SHARD = full shard within a node), fp32 weights with "
            "accelerate bf16 mixed precision, gradient checkpointing always on, fp32-upcast logits",
    checkpointing="always", precision="bf16-mixed", sharding="fsdp", loss="upcast",
    source="instructlab/training/model.py: no torch_dtype (fp32 load), gradient_checkpointing_enable(); "
           "accelerator.py: mixed_precision bf16, FSDP ShardingStrategy",
)


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="instructlab-training: full fine-tuning and continued pretraining, FSDP on NVIDIA GPUs.",
        algorithms=HONOURED,
        runner="thub_plugin_instructlab.runner:run",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=True,
        priority=5,
        defaults=DEFAULTS,
        # instructlab-training starts torchrun itself (run_training): thub starts one child
        launcher="python",
        memory=MEMORY,
        docs=DOCS,
    ))


thub_translate_params = translation_hook(BACKEND, translate)


def _flash_attn_check(_context: CheckContext) -> CheckResult:
    if flash_attn_installed():
        return CheckResult("ok", "flash-attn installed: padding-free packed batches")
    return CheckResult(
        "warn", "flash-attn is not installed: thub sets disable_flash_attn=True (SDPA, padded batches, slower)",
        ("instructlab-training refuses to start without flash-attn unless disable_flash_attn is set",),
        fix=f"{sys.executable} -m pip install flash-attn --no-build-isolation   # needs CUDA torch and nvcc",
        docs=DOCS,
    )


def _short_samples_check(_context: CheckContext) -> CheckResult:
    return CheckResult(
        "warn", f"instructlab-training silently drops samples shorter than {MIN_SAMPLE_TOKENS} tokens "
                "(and those of max_seq_len tokens or more)",
        ("thub counts them before the launch: a WARNING line in logs/train.log and "
         "summary.data_dropped_short / data_dropped_long in result.json",),
        fix="thub data stats DATA  # check sample lengths; merge or drop very short samples", docs=DOCS,
    )


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    from thub.backend import when_gpu_visible  # on use: importing the plugin (and its runner) stays light

    only = frozenset({BACKEND})
    register(CheckSpec("instructlab.flash-attn", "flash-attn for instructlab-training", _flash_attn_check,
                       tags=frozenset({"preflight"}), backends=only, applies=when_gpu_visible))
    register(CheckSpec("instructlab.short-samples", "samples instructlab-training drops", _short_samples_check,
                       backends=only))
