"""``thub env``: a copy-paste report of this environment for bug reports.

Modelled on ``torch.utils.collect_env`` / ``vllm collect-env`` / ``accelerate env``: versions of
thub, its plugins and the training stack (read from metadata, no import), Python and platform,
torch/CUDA/GPUs when torch is importable (every probe guarded, so it works without torch), the
NVIDIA driver from ``nvidia-smi``, and the environment variables that change how training runs,
with secrets redacted.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

from thub import installed
from thub.redact import REDACTED, is_secret_name, redact_text
from thub.selection import installed_version

#: Environment variables reported: these prefixes, plus the exact names below.
ENV_PREFIXES: tuple[str, ...] = (
    "THUB_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "CUDA_", "NCCL_", "TORCH", "PYTORCH_",
    "WANDB_", "MLFLOW_", "SLURM_", "PET_", "VLLM_", "RAY_", "TRITON_", "FLASHINFER_", "NVIDIA_",
    "OMP_", "ACCELERATE_", "DEEPSPEED_", "UV_", "PIP_", "KUBEFLOW_",
)
ENV_NAMES: frozenset[str] = frozenset({
    "TMPDIR", "LD_LIBRARY_PATH", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "NODE_RANK", "TOKENIZERS_PARALLELISM", "VIRTUAL_ENV", "CONDA_PREFIX",
    "XDG_CACHE_HOME", "OSFT_CACHE_V", "CHECKPOINT_TRIGGER_FILENAME",
})

#: Distributions whose versions matter for training bugs, reported when installed.
PACKAGES: tuple[str, ...] = (
    "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers",
    "huggingface_hub", "safetensors", "vllm", "flash-attn", "flashinfer-python", "flashinfer-cubin",
    "flashinfer-jit-cache", "flash-linear-attention", "tilelang", "triton", "deepspeed", "liger-kernel",
    "bitsandbytes", "xformers", "ray", "verl", "unsloth", "unsloth_zoo", "openpipe-art", "litellm",
    "rhai-innovation-mini-trainer", "instructlab-training", "nvidia-nccl-cu12", "nvidia-nccl-cu13",
    "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cudnn-cu12", "numpy", "pydantic",
    "click", "pluggy", "rich", "wandb", "mlflow",
)


def is_secret(name: str) -> bool:
    """Whether a variable's value must never be printed, judged by whole words of its name
    (``HF_TOKEN``, ``WANDB_API_KEY``, ``OPENAI_KEY``; not ``TOKENIZERS_PARALLELISM``)."""
    return is_secret_name(name, loose=True)


def redact(name: str, value: str) -> str:
    """The value to show for ``name``: redacted for secrets; URI credentials and secret query
    values (``PIP_INDEX_URL=https://user:token@host``, ``...?token=``) always stripped."""
    if is_secret(name):
        return REDACTED
    return redact_text(value)


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    """The training-relevant variables of ``env``, sorted, with secrets redacted."""
    return {
        name: redact(name, value)
        for name, value in sorted(env.items())
        if name in ENV_NAMES or name.upper().startswith(ENV_PREFIXES)
    }


def package_versions() -> dict[str, str]:
    """Installed versions of the packages in :data:`PACKAGES` (from metadata, no import)."""
    found = {name: version for name in PACKAGES if (version := installed_version(name))}
    for dist in installed.distributions():
        if dist.key.startswith("thub-plugin-"):
            found.setdefault(dist.name, dist.version)
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def nvidia_info() -> dict[str, Any] | None:
    """Driver version, maximum CUDA version and GPUs from ``nvidia-smi``; None without one."""
    header = _run(["nvidia-smi"])
    if header is None:
        return None
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", header)
    rows = _run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,compute_cap",
                 "--format=csv,noheader,nounits"]) or ""
    gpus = []
    driver = None
    for line in rows.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            driver = parts[2]
            gpus.append({"index": parts[0], "name": parts[1], "memory_total_mib": parts[3],
                         "compute_capability": parts[4]})
    return {"driver_version": driver, "cuda_version": cuda.group(1) if cuda else None, "gpus": gpus}


def nvcc_version() -> str | None:
    """The CUDA toolkit release of ``nvcc`` on PATH (or in ``$CUDA_HOME/bin``)."""
    candidates = ["nvcc"]
    if os.environ.get("CUDA_HOME"):
        candidates.insert(0, os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    for nvcc in candidates:
        out = _run([nvcc, "--version"])
        if out and (match := re.search(r"release ([0-9.]+)", out)):
            return match.group(1)
    return None


def torch_info() -> dict[str, Any]:
    """What torch says about itself and the GPUs; ``{"installed": False}`` without torch.

    Every probe is guarded: a broken torch install is exactly when people run ``thub env``.
    """
    if find_spec("torch") is None:
        return {"installed": False}
    info: dict[str, Any] = {"installed": True}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - report, don't crash
        info["import_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["version"] = str(torch.__version__)
    info["cuda_build"] = getattr(torch.version, "cuda", None)
    info["hip_build"] = getattr(torch.version, "hip", None)
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        info["cudnn"] = None
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        devices = []
        if info["cuda_available"]:
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                devices.append({
                    "index": index,
                    "name": props.name,
                    "memory_total_gib": round(props.total_memory / 2**30, 1),
                    "compute_capability": f"{props.major}.{props.minor}",
                })
        info["devices"] = devices
    except Exception as exc:  # noqa: BLE001
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
    try:
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if info.get("cuda_build") else None
    except Exception:  # noqa: BLE001
        info["nccl"] = None
    return info


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def collect(include_torch: bool = True, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything ``thub env`` reports, as a JSON-ready dict."""
    from thub._version import __version__
    from thub.manager import get_registry

    registry = get_registry()
    env = os.environ if env is None else env
    return {
        "thub": {
            "version": __version__,
            "location": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "plugins": [
                {"name": info.name, "distribution": info.distribution, "version": info.version,
                 "builtin": info.builtin}
                for info in registry.plugins.values()
            ],
            "plugin_failures": [
                {"name": f.name, "distribution": f.distribution, "stage": f.stage, "error": f.error}
                for f in registry.failures
            ],
            "backends": sorted(registry.backends),
        },
        "python": {
            "version": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "virtual_env": sys.prefix != sys.base_prefix,
        },
        "platform": {
            "system": platform.platform(),
            "machine": platform.machine(),
            "libc": " ".join(platform.libc_ver()).strip() or None,
            "cpus": os.cpu_count(),
            "memory_gib": _memory_gib(),
        },
        "packages": package_versions(),
        "torch": torch_info() if include_torch else {"skipped": True},
        "nvidia": nvidia_info(),
        "nvcc": nvcc_version(),
        "environment": relevant_env(env),
    }


def _lines(data: Any, indent: int) -> list[str]:
    pad = "  " * indent
    out: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, (dict, list)) and value:
                out.append(f"{pad}- {key}:")
                out.extend(_lines(value, indent + 1))
            else:
                out.append(f"{pad}- {key}: {_scalar(value)}")
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict):
                out.append(f"{pad}- " + ", ".join(f"{k}={_scalar(v)}" for k, v in item.items()))
            else:
                out.append(f"{pad}- {_scalar(item)}")
    return out


def _scalar(value: Any) -> str:
    if value is None:
        return "N/A"
    if isinstance(value, (dict, list)):
        return "none"
    return str(value)


def render_text(data: Mapping[str, Any]) -> str:
    """The plain-text report (accelerate-env style ``- key: value`` blocks, no colour)."""
    sections = [
        ("thub", data["thub"]), ("Python", data["python"]), ("Platform", data["platform"]),
        ("Packages", data["packages"]), ("torch", data["torch"]),
        ("NVIDIA driver", data["nvidia"] or {"nvidia-smi": "not found (no NVIDIA driver on PATH)"}),
        ("CUDA toolkit", {"nvcc": data["nvcc"] or "not found"}),
        ("Environment variables", data["environment"] or ["(none of the reported variables is set)"]),
    ]
    lines = ["Copy-and-paste the text below into your bug report.", ""]
    for title, body in sections:
        lines.append(f"{title}:")
        lines.extend(_lines(body, 1))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
