"""thub backend ``mini-trainer``: registration only. mini_trainer and torch are imported in ``runner``.

The plugin registers even when mini-trainer is not installed: requirements are read from
distribution metadata, and ``thub backends`` / ``thub doctor`` say what to install.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from thub.backend import BackendSpec, CheckContext, CheckResult, CheckSpec, MemoryPolicy, hookimpl, translation_hook
from thub_plugin_minitrainer.translate import DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("rhai-innovation-mini-trainer>=0.9,<0.10", "datasets>=5", "transformers>=4.57.1", "torch>=2.6")
# What `thub install` runs for it (thub and its plugins are on no package index).
INSTALL = "thub install mini-trainer --into current   # --gpu adds flash-attn and mamba-ssm (source builds, need nvcc)"
BACKEND = "mini-trainer"
README = "thub-plugin-minitrainer/README.md"


MEMORY = MemoryPolicy(
    summary="mini-trainer: FSDP2 with every decoder block checkpointed, fp32 weights/grads/AdamW "
            "(train_dtype float32), bf16 compute, HF cross-entropy on fp32-upcast logits (Liger fuses it)",
    checkpointing="always", precision="bf16-mixed", sharding="fsdp", loss="upcast",
    source="mini_trainer/setup_model_for_training.py: ptd_checkpoint_wrapper on each block, "
           "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fully_shard; "
           "none_reduction_losses.py + transformers ForCausalLMLoss (logits.float())",
)


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="mini-trainer (Red Hat AI Innovation): sft, osft (orthogonal subspace) and pretraining; NVIDIA GPUs.",
        algorithms=HONOURED,
        runner="thub_plugin_minitrainer.runner:run",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=True,
        priority=8,  # below trl (10): sft on a GPU keeps its default; osft has only this backend
        defaults=DEFAULTS,
        launcher="python",  # mini_trainer.run_training starts torchrun itself
        memory=MEMORY,
        docs=README,
    ))


thub_translate_params = translation_hook(BACKEND, translate)


def _attention_check(context: CheckContext) -> CheckResult:
    from thub.backend import requirement_problem

    env = context.env or os.environ
    if requirement_problem("flash-attn") is None:
        return CheckResult("ok", "flash-attn installed (mini-trainer uses flash_attention_2)")
    if str(env.get("TESTING", "false")).lower() == "true":
        return CheckResult("warn", "flash-attn missing; TESTING=true makes mini-trainer fall back to sdpa")
    return CheckResult(
        "fail", "flash-attn is not installed: mini-trainer raises ImportError when it loads the model",
        fix="pip install flash-attn --no-build-isolation   # or set TESTING=true to use sdpa (slower)")


def _torchrun_check(_context: CheckContext) -> CheckResult:
    beside = Path(sys.executable).parent / "torchrun"
    if beside.exists():
        return CheckResult("ok", f"torchrun found next to the interpreter ({beside})")
    found = shutil.which("torchrun")
    if found:
        return CheckResult("warn", f"torchrun is not next to {sys.executable}; {found} from PATH will be used")
    return CheckResult("fail", "torchrun not found (mini_trainer.run_training starts it by name)",
                       fix="pip install torch")


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    from thub.backend import when_gpu_visible  # on use: importing the plugin (and its runner) stays light

    only = frozenset({BACKEND})
    pre, gpu = frozenset({"preflight"}), frozenset({"preflight", "gpu"})
    docs = f"{README}#doctor-checks"
    register(CheckSpec("minitrainer.attention", "flash-attn or TESTING=true", _attention_check, tags=gpu,
                       backends=only, docs=docs, applies=when_gpu_visible))
    register(CheckSpec("minitrainer.torchrun", "torchrun launcher", _torchrun_check, tags=pre, backends=only,
                       docs=docs))
