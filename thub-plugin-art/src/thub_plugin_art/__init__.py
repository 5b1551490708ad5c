"""thub backend ``art`` (openpipe-art): registration only. ART, torch and vLLM are imported in ``runner``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from thub.backend import BackendSpec, CheckContext, CheckResult, CheckSpec, MemoryPolicy, hookimpl, translation_hook
from thub_plugin_art.translate import BACKEND, DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json); the rest is what
# openpipe-art[backend] 0.5.18 brings for LocalBackend (Unsloth trainer + CUDA torch).
REQUIREMENTS = ("openpipe-art>=0.5.18,<0.6", "torch>=2.10", "unsloth>=2026.3", "peft>=0.14")
# What `thub install` runs for it (thub and its plugins are on no package index).
INSTALL = ("thub install art --into managed --gpu   "
           "# openpipe-art[backend]: CUDA torch 2.10, transformers 5.2, trl 0.20, unsloth 2026.3.3")
DOCS = "thub-plugin-art/README.md"


MEMORY = MemoryPolicy(
    summary="ART: unsloth LoRA training (offloaded checkpointing, fused loss) next to a co-located vLLM "
            "holding gpu_memory_utilization of the GPU",
    checkpointing="offloaded", sharding="ddp", loss="fused", rollout="colocated",
    source="openpipe-art dev/model.py engine_args gpu_memory_utilization; unsloth get_peft_model "
           "use_gradient_checkpointing='unsloth'",
)


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="openpipe-art: LoRA GRPO on one NVIDIA GPU (Unsloth trainer + co-located vLLM).",
        algorithms=HONOURED,
        runner="thub_plugin_art.runner:run",
        # ART's model name (TrainableModel(name), its checkpoint folder) whether W&B logs or not
        tracker_params_alone=frozenset({"wandb_run_name"}),
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=True,
        priority=5,
        defaults=DEFAULTS,
        launcher="python",
        memory=MEMORY,
        docs=DOCS,
    ))


thub_translate_params = translation_hook(BACKEND, translate)


def visible_gpu_count(environ: dict[str, str] | None = None) -> int | None:
    """GPUs this process would see: CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`; None if unknown."""
    environ = dict(os.environ) if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    if not shutil.which("nvidia-smi"):
        return None
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return len([line for line in listing.splitlines() if line.startswith("GPU ")])


def _single_gpu_check(_context: CheckContext) -> CheckResult:
    from thub_plugin_art.translate import single_gpu

    count = visible_gpu_count()
    if count is None or count <= 1:
        return CheckResult("ok", f"ART runs on one GPU ({'GPU ' + single_gpu() if count else 'none visible'})")
    return CheckResult(
        "warn", f"{count} GPUs visible; ART uses one: thub sets CUDA_VISIBLE_DEVICES={single_gpu()} for the run",
        ("ART's LocalBackend shares one GPU between the Unsloth trainer and vLLM; the others stay idle",),
        fix="# for several GPUs use `--backend verl`; or pick the GPU: CUDA_VISIBLE_DEVICES=N thub train ...",
        docs=DOCS,
    )


def _vllm_runtime_check(_context: CheckContext) -> CheckResult:
    if os.environ.get("ART_VLLM_RUNTIME_BIN"):
        return CheckResult("ok",
                           f"ART uses the vLLM runtime at ART_VLLM_RUNTIME_BIN={os.environ['ART_VLLM_RUNTIME_BIN']}")
    if shutil.which("uv"):
        return CheckResult("warn", "ART will install its bundled vLLM runtime with uv on first use (needs the network)",
                           fix="# prepare it once on a connected machine, or point to an existing one:\n"
                               "export ART_VLLM_RUNTIME_BIN=/path/to/vllm-runtime/bin/vllm",
                           docs=DOCS)
    return CheckResult(
        "fail", "ART's vLLM runtime cannot be installed: `uv` is not on PATH and ART_VLLM_RUNTIME_BIN is unset",
        ("openpipe-art 0.5.18 runs vLLM from a wheel it bundles, installed with uv into its own environment",),
        fix="pip install uv   # or: export ART_VLLM_RUNTIME_BIN=/path/to/vllm-runtime/bin/vllm", docs=DOCS,
    )


def _module_collision_check(_context: CheckContext) -> CheckResult:
    from importlib import metadata

    try:
        version = metadata.version("art")
    except metadata.PackageNotFoundError:
        return CheckResult("ok", "no other distribution installs a top-level `art` module")
    return CheckResult(
        "fail", f"the ASCII-art package `art` {version} is installed; it shadows openpipe-art's `art` module",
        ("axolotl depends on it; the two cannot share an environment",),
        fix="pip uninstall art && pip install --force-reinstall --no-deps openpipe-art", docs=DOCS,
    )


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    from thub.backend import when_gpu_visible  # on use: importing the plugin (and its runner) stays light

    only = frozenset({BACKEND})
    preflight = frozenset({"preflight"})
    register(CheckSpec("art.single-gpu", "ART trains on one GPU", _single_gpu_check, tags=preflight, backends=only,
                       applies=when_gpu_visible))
    register(CheckSpec("art.vllm-runtime", "ART's vLLM runtime", _vllm_runtime_check, backends=only,
                       applies=when_gpu_visible))
    register(CheckSpec("art.module-collision", "the `art` module belongs to openpipe-art", _module_collision_check,
                       tags=preflight, backends=only))
