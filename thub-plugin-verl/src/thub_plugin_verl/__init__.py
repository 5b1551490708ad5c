"""thub backend ``verl``: registration only. verl, Ray, vLLM and torch run in verl's own process."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from thub.backend import BackendSpec, CheckContext, CheckResult, CheckSpec, MemoryPolicy, hookimpl, translation_hook
from thub_plugin_verl.translate import BACKEND, DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("verl>=0.9.1,<0.10", "vllm", "ray>=2.41", "torch>=2.6", "transformers>=5.5.3,!=5.6.0,<5.11")
# What `thub install` runs for it (thub and its plugins are on no package index): verl[vllm] pins
# torch 2.11.0 and vllm 0.24.0 (CUDA), so it gets an environment of its own.
INSTALL = "thub install verl --into managed --gpu   # verl[vllm]: torch 2.11.0 + vllm 0.24.0 (CUDA)"
DOCS = "thub-plugin-verl/README.md"
# AF_UNIX socket paths are limited to 107 bytes; Ray puts them under
# {RAY_TMPDIR}/ray/session_YYYY-MM-DD_HH-MM-SS_ffffff_PID/sockets/plasma_store (about 75 more)
UNIX_PATH_MAX = 107
RAY_SOCKET_SUFFIX = len("/ray/session_2026-01-01_00-00-00_000000_1234567/sockets/raylet.9999999999")


MEMORY = MemoryPolicy(
    summary="verl: FSDP actor with fp32 weights and bf16 compute, co-located vLLM holding "
            "gpu_memory_utilization of each GPU, full logits for log-probs",
    precision="bf16-mixed", sharding="fsdp", loss="upcast", liger_fuses_loss=False, rollout="colocated",
    source="verl ppo_trainer.yaml: actor fsdp_config model_dtype fp32, mixed_precision param_dtype bf16; "
           "rollout.gpu_memory_utilization; dp_actor logprobs_from_logits",
)


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="verl: GRPO and LoRA GRPO on NVIDIA GPUs (FSDP + vLLM rollouts, Ray; multi-node).",
        algorithms=HONOURED,
        runner="thub_plugin_verl.runner:run",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=True,
        priority=5,
        defaults=DEFAULTS,
        # verl starts Ray and its workers itself: thub starts one child that runs main_ppo
        launcher="python",
        memory=MEMORY,
        docs=DOCS,
    ))


thub_translate_params = translation_hook(BACKEND, translate)


def _pin(distribution: str, dependency: str) -> str | None:
    """The ``==`` version ``distribution`` pins for ``dependency``, read from its metadata."""
    from importlib import metadata

    from packaging.requirements import Requirement

    for line in metadata.requires(distribution) or ():
        requirement = Requirement(line)
        if requirement.name.lower() != dependency or (requirement.marker and "extra" in str(requirement.marker)):
            continue
        for spec in requirement.specifier:
            if spec.operator == "==":
                return spec.version
    return None


def torch_pairing_problems() -> list[str]:
    """vllm's exact torch pin against the installed torch, from metadata only."""
    from importlib import metadata

    try:
        vllm, torch = metadata.version("vllm"), metadata.version("torch")
    except metadata.PackageNotFoundError:
        return []
    wanted = _pin("vllm", "torch")
    if wanted and torch.split("+")[0] != wanted:
        return [f"vllm {vllm} was built against torch=={wanted}, but torch {torch} is installed "
                "(its compiled kernels fail to load: 'undefined symbol' or 'from vllm import _C' errors)"]
    return []


def _pairing_check(_context: CheckContext) -> CheckResult:
    problems = torch_pairing_problems()
    if problems:
        return CheckResult("fail", "vllm and torch do not match", tuple(problems),
                           fix=f"{INSTALL}\n# verl[vllm] pairs torch 2.11.0 with vllm 0.24.0 in its own environment",
                           docs=DOCS)
    return CheckResult("ok", "vllm and torch are a matching pair (or vllm is not installed)")


def ray_socket_problem(environ: dict[str, str] | None = None) -> str | None:
    environ = dict(os.environ) if environ is None else environ
    base = environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    longest = len(base.rstrip("/")) + RAY_SOCKET_SUFFIX
    if longest > UNIX_PATH_MAX:
        return (f"Ray's socket paths under {base!r} reach about {longest} bytes; AF_UNIX allows "
                f"{UNIX_PATH_MAX}, so Ray fails to start")
    return None


def _ray_tmpdir_check(context: CheckContext) -> CheckResult:
    problem = ray_socket_problem(dict(context.env) if context.env else None)
    if problem:
        return CheckResult("fail", "Ray's temporary directory path is too long", (problem,),
                           fix="export RAY_TMPDIR=/tmp/ray-$USER   # a short path on a disk with space", docs=DOCS)
    return CheckResult("ok", "Ray's socket paths fit the AF_UNIX limit")


def _stale_gpu_processes_check(_context: CheckContext) -> CheckResult:
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return CheckResult("skip", "nvidia-smi not found")
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=8, check=False)
    busy = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if busy:
        return CheckResult("warn", f"{len(busy)} process(es) already hold GPU memory", tuple(busy),
                           fix="# stop those processes by their PID (not `ray stop`, which may end other users' "
                               "clusters);\n# NCCL errors and OOM at start are often leftover Ray/vLLM workers:\n"
                               f"ps -o pid,user,etime,args -p {','.join(line.split(',')[0] for line in busy)}",
                           docs=DOCS)
    return CheckResult("ok", "no other process holds GPU memory")


@hookimpl
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    from thub.backend import when_gpu_visible  # on use: importing the plugin (and its runner) stays light

    only = frozenset({BACKEND})
    preflight = frozenset({"preflight"})
    register(CheckSpec("verl.vllm-torch", "vllm and torch versions pair up", _pairing_check, tags=preflight,
                       backends=only))
    register(CheckSpec("verl.ray-tmpdir", "Ray socket path length", _ray_tmpdir_check, tags=preflight, backends=only))
    register(CheckSpec("verl.gpu-processes", "GPU memory held by other processes", _stale_gpu_processes_check,
                       backends=only, applies=when_gpu_visible))
