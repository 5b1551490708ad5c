"""Core doctor checks, registered through ``thub_register_checks`` like any plugin's.

Every check is listed here with its id, tags and timeout; the code lives in the submodules,
which import nothing heavy at module level (``core.torch`` imports torch in a child process).
Each check is described in docs/doctor.md (id, what it finds, the fix).

Tags: ``preflight`` (quick; ``thub train`` runs these first), ``gpu``, ``security``, ``slow``
(imports a large library or walks directories; listed last).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from thub import hookimpl
from thub.specs import CheckSpec


def _lazy(target: str) -> Callable[..., Any]:
    """The check function ``module:function``, imported on its first call: registering the checks
    (every registry load, so `thub train ... --help`) imports none of the check modules."""
    module_name, _, name = target.partition(":")
    if "." not in module_name:
        module_name = f"thub_builtins.checks.{module_name}"

    def run(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module_name), name)(*args, **kwargs)

    run.__name__ = run.__qualname__ = name
    return run


def _per_environment(check_id: str, run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` with its result cached per set of installed distributions (the fingerprint of
    :mod:`thub.discovery`) and backend: these checks read every distribution's metadata
    (0.5-0.8 s of each `thub train` preflight) and can only change when something is installed."""

    def cached(context: Any) -> Any:
        import dataclasses

        from thub.discovery import fingerprint, read_cache, write_cache
        from thub.specs import CheckResult

        name, key = f"check-{check_id}.json", f"{fingerprint()}:{context.backend}"
        hit = read_cache(name, key)
        if isinstance(hit, dict):
            try:
                return CheckResult(**{**hit, "details": tuple(hit.get("details") or ())})
            except TypeError:
                pass
        result = run(context)
        if result.status in ("ok", "warn", "fail"):
            write_cache(name, key, dataclasses.asdict(result))
        return result

    cached.__name__ = cached.__qualname__ = getattr(run, "__name__", check_id)
    return cached


_P, _GPU, _SLOW, _SEC = "preflight", "gpu", "slow", "security"
_DOCS = "docs/doctor.md"

# (id, title, run, tags, timeout seconds, applies)
_CHECKS: tuple[tuple[str, str, Callable, frozenset[str], float, Callable | None], ...] = (
    ("core.python", "Python version", _lazy("system:check_python"), frozenset({_P}), 5, None),
    ("core.plugins", "Plugins load", _lazy("system:check_plugins"), frozenset(), 5, None),
    ("core.backend-requirements", "Backend requirements", _lazy("system:check_backend_requirements"), frozenset({_P}),
     10, None),
    ("core.conflicts", "Installed requirements agree",
     _per_environment("core.conflicts", _lazy("system:check_conflicts")), frozenset({_P}), 20, None),
    ("core.managed-envs", "Managed environments match their manifests", _lazy("thub.envs.check:check_managed_envs"),
     frozenset(), 10, None),
    ("core.compromised", "Known-compromised releases",
     _per_environment("core.compromised", _lazy("system:check_compromised")), frozenset({_P, _SEC}), 10, None),
    ("core.tmpdir", "TMPDIR usable", _lazy("storage:check_tmpdir"), frozenset({_P}), 5, None),
    ("core.socket-paths", "Socket paths fit AF_UNIX", _lazy("storage:check_socket_paths"), frozenset({_P}), 5, None),
    ("core.disk", "Free disk space", _lazy("storage:check_disk"), frozenset({_P}), 10, None),
    ("core.output-dir", "Output directory writable", _lazy("storage:check_output_dir"), frozenset({_P}), 5, None),
    ("core.checkpoint-templates", "Saved chat templates match the input model",
     _lazy("thub.data.template_check:doctor_check"), frozenset(), 30, lambda context: bool(context.output_dir)),
    ("core.hf-env", "Hugging Face settings", _lazy("storage:check_hf_env"), frozenset({_P}), 5, None),
    ("core.env-vars", "Obsolete, debugging or unknown THUB_* variables", _lazy("storage:check_leftover_env"),
     frozenset({_P}), 5, None),
    ("core.gpus", "GPUs visible", _lazy("gpu:check_gpus"), frozenset({_P, _GPU}), 25, None),
    ("core.gpu-memory", "GPU memory held by other processes", _lazy("gpu:check_gpu_memory"), frozenset({_P, _GPU}), 45,
     None),
    ("core.cuda-driver", "torch CUDA build vs driver", _lazy("gpu:check_cuda_driver"), frozenset({_P, _GPU}), 25, None),
    ("core.nccl", "NCCL library matches pip metadata", _lazy("libs:check_nccl"), frozenset({_P, _GPU}), 40, None),
    ("core.flashinfer", "flashinfer versions agree", _lazy("libs:check_flashinfer"), frozenset({_P, _GPU}), 5, None),
    ("core.gdn-kernels", "GatedDeltaNet kernel toolchain", _lazy("libs:check_gdn_kernels"), frozenset({_GPU}), 45,
     None),
    ("core.stale-ray", "Leftover Ray processes", _lazy("libs:check_stale_ray"), frozenset({_GPU}), 10, None),
    ("core.torch", "torch imports", _lazy("gpu:check_torch"), frozenset({_SLOW, _GPU}), 120, None),
    ("core.flash-attn", "flash-attn loads against torch", _lazy("libs:check_flash_attn"), frozenset({_SLOW, _GPU}), 120,
     None),
    ("core.vllm", "vLLM extension loads", _lazy("libs:check_vllm"), frozenset({_SLOW, _GPU}), 120, None),
    ("core.caches", "Cache sizes", _lazy("storage:check_caches"), frozenset({_SLOW}), 30, None),
    ("core.training-hub", "Training Hub's `thub` script", _lazy("training_hub:check_training_hub"), frozenset(), 5,
     None),
)


def core_checks() -> list[CheckSpec]:
    """The core :class:`CheckSpec` objects (also used by tests and docs)."""
    return [
        CheckSpec(id=cid, title=title, run=run, tags=tags, timeout=timeout, applies=applies,
                  docs=f"{_DOCS}#{cid.replace('.', '')}")
        for cid, title, run, tags, timeout, applies in _CHECKS
    ]


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    for spec in core_checks():
        register(spec)
