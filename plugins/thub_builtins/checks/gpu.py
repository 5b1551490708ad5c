"""GPU checks: driver vs torch's CUDA build, visible GPUs, memory held by other processes, NCCL.

Most read ``nvidia-smi`` and distribution metadata. Only ``core.torch`` imports torch, and it
does so in a child interpreter: a broken CUDA library can segfault on import, and a child can be
killed at the timeout where a thread cannot.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from importlib import metadata

from thub.specs import CheckContext, CheckResult
from thub_builtins.checks._util import (
    dist_version,
    fail,
    ok,
    parse_version,
    run_command,
    skip,
    warn,
    which,
)
from thub_builtins.checks.system import pip_install

_NVML_MISMATCH_FIX = (
    "# the NVIDIA kernel module and user-space driver differ (usually after a driver update):\n"
    "sudo reboot\n"
    "# or, with nothing running on the GPUs: "
    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia"
)


@dataclass(frozen=True)
class Gpu:
    index: str
    uuid: str
    name: str
    used_mib: int
    total_mib: int
    compute_cap: str


class NvidiaSmiError(Exception):
    """``nvidia-smi`` is there but failed (driver/library mismatch, no devices, ...)."""


def nvidia_smi(context: CheckContext, *args: str) -> str | None:
    """stdout of ``nvidia-smi ARGS``; None when there is no nvidia-smi; raises on failure."""
    exe = which(context, "nvidia-smi")
    if exe is None:
        return None
    done = run_command([exe, *args], context, timeout=20)
    if done is None:
        raise NvidiaSmiError("nvidia-smi did not answer within 20 s")
    if done.returncode != 0:
        raise NvidiaSmiError((done.stdout + done.stderr).strip() or f"exit code {done.returncode}")
    return done.stdout


def _int(text: str) -> int:
    try:
        return int(float(text))
    except ValueError:
        return 0


def list_gpus(context: CheckContext) -> list[Gpu] | None:
    out = nvidia_smi(context, "--query-gpu=index,uuid,name,memory.used,memory.total,compute_cap",
                     "--format=csv,noheader,nounits")
    if out is None:
        return None
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 6:
            gpus.append(Gpu(parts[0], parts[1], parts[2], _int(parts[3]), _int(parts[4]), parts[5]))
    return gpus


def visible(gpus: list[Gpu], context: CheckContext) -> tuple[list[Gpu], str | None]:
    """The GPUs CUDA will use under ``CUDA_VISIBLE_DEVICES``, and a problem with its value.

    CUDA stops reading the list at the first entry that names no device, so ``0,7`` on a
    4-GPU machine silently means just GPU 0.
    """
    value = context.env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return gpus, None
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in value.split(",")):
        match = next((g for g in gpus if entry in (g.index, g.uuid)
                      or (entry.startswith("GPU-") and g.uuid.startswith(entry))), None)
        if match is None:
            if entry in ("", "-1") and not chosen:
                return [], f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU"
            return chosen, f"CUDA_VISIBLE_DEVICES={value!r}: {entry!r} is no GPU here, so CUDA ignores it and the rest"
        chosen.append(match)
    return chosen, None


def driver_cuda(context: CheckContext) -> tuple[int, ...] | None:
    """Highest CUDA version the driver supports (nvidia-smi header); None without a driver."""
    out = nvidia_smi(context)
    if out is None:
        return None
    match = re.search(r"CUDA Version:\s*([0-9.]+)", out)
    return parse_version(match.group(1)) if match else None


def torch_cuda_build() -> tuple[str, tuple[int, ...] | None]:
    """("cuda"|"cpu"|"rocm"|"unknown", CUDA version) of the installed torch, from metadata.

    The local version label says it for download.pytorch.org wheels (``2.8.0+cu128``); PyPI's
    Linux wheels carry no label but pin ``nvidia-cuda-runtime-cuXX==X.Y.*``.
    """
    version = dist_version("torch") or ""
    local = version.partition("+")[2]
    if local.startswith("cu") and local[2:].isdigit():
        digits = local[2:]
        return "cuda", (int(digits[:-1]), int(digits[-1]))
    if local.startswith("cpu"):
        return "cpu", None
    if local.startswith("rocm"):
        return "rocm", None
    for requirement in metadata.requires("torch") or []:
        match = re.match(r"nvidia-cuda-runtime(?:-cu\d+)?\s*==\s*([0-9]+)\.([0-9]+)", requirement)
        if match:
            return "cuda", (int(match.group(1)), int(match.group(2)))
    return "unknown", None


def _cu_tag(version: tuple[int, ...]) -> str:
    return f"cu{version[0]}{version[1] if len(version) > 1 else 0}"


def check_cuda_driver(context: CheckContext) -> CheckResult:
    torch_version = dist_version("torch")
    if torch_version is None:
        return skip("torch is not installed")
    try:
        driver = driver_cuda(context)
    except NvidiaSmiError as exc:
        return fail(f"nvidia-smi fails: {str(exc).splitlines()[0]}", _NVML_MISMATCH_FIX,
                    str(exc).splitlines(), anchor="corecuda-driver")
    kind, build = torch_cuda_build()
    if driver is None:
        return skip(f"torch {torch_version}; no NVIDIA driver here (nvidia-smi not on PATH)")
    driver_text = ".".join(map(str, driver))
    reinstall = pip_install("--force-reinstall", "torch", "--index-url",
                            f"https://download.pytorch.org/whl/{_cu_tag(driver)}")
    if kind == "cpu":
        return warn(f"torch {torch_version} is a CPU-only build, but this machine has an NVIDIA "
                    f"driver (CUDA {driver_text})", reinstall, anchor="corecuda-driver")
    if kind != "cuda" or build is None:
        return ok(f"torch {torch_version} ({kind} build); driver supports CUDA {driver_text}")
    build_text = ".".join(map(str, build))
    details = [f"torch {torch_version} built for CUDA {build_text}",
               f"driver supports up to CUDA {driver_text}"]
    if build[0] > driver[0]:
        return fail(
            f"torch needs CUDA {build_text} but the driver supports only CUDA {driver_text}",
            f"# upgrade the NVIDIA driver, or install a torch built for CUDA {driver_text}:\n{reinstall}",
            details, anchor="corecuda-driver",
        )
    if build > driver:
        # Minor-version compatibility lets the runtime start, but PTX JIT and newer kernels fail.
        return warn(
            f"torch is built for CUDA {build_text}, newer than the driver's CUDA {driver_text}",
            f"# upgrade the NVIDIA driver, or match torch to it:\n{reinstall}",
            details, anchor="corecuda-driver",
        )
    return ok(f"torch {torch_version} (CUDA {build_text}) runs on the driver's CUDA {driver_text}")


_TORCH_PROBE = r"""
import json, sys
info = {}
try:
    import torch
    info["version"] = str(torch.__version__)
    info["cuda_build"] = torch.version.cuda
    info["cuda_available"] = bool(torch.cuda.is_available())
    info["devices"] = torch.cuda.device_count() if info["cuda_available"] else 0
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


def check_torch(context: CheckContext) -> CheckResult:
    from importlib.util import find_spec

    if find_spec("torch") is None:
        return skip("torch is not installed (each backend installs the torch it needs)")
    done = run_command([sys.executable, "-c", _TORCH_PROBE], context, timeout=110)
    if done is None:
        return fail("importing torch did not finish within 110 s", pip_install("--force-reinstall", "torch"),
                    anchor="coretorch")
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-8:]
        return fail(f"importing torch crashed the interpreter (exit code {done.returncode})",
                    pip_install("--force-reinstall", "torch"), tail, anchor="coretorch")
    if "error" in info:
        return fail(f"import torch fails: {info['error']}", pip_install("--force-reinstall", "torch"),
                    anchor="coretorch")
    version = info["version"]
    if info.get("cuda_build") is None:
        return ok(f"torch {version} imports (CPU build)")
    has_driver = which(context, "nvidia-smi") is not None or os.path.exists("/proc/driver/nvidia/version")
    if not info["cuda_available"] and has_driver and context.env.get("CUDA_VISIBLE_DEVICES") not in ("", "-1"):
        return fail(
            f"torch {version} (CUDA {info['cuda_build']}) imports but sees no GPU although a driver is present",
            "thub doctor core.cuda-driver core.gpus   # driver too old for this torch, or GPUs hidden",
            anchor="coretorch",
        )
    return ok(f"torch {version} (CUDA {info['cuda_build']}), {info['devices']} GPU(s) usable")


def check_gpus(context: CheckContext) -> CheckResult:
    try:
        gpus = list_gpus(context)
    except NvidiaSmiError as exc:
        lines = str(exc).splitlines()
        return fail(f"nvidia-smi fails: {lines[0]}", _NVML_MISMATCH_FIX, lines, anchor="coregpus")
    if gpus is None:
        return skip("no NVIDIA driver here (nvidia-smi not on PATH)")
    if not gpus:
        return fail("nvidia-smi lists no GPU", "nvidia-smi -L   # check the driver and the container's GPU access",
                    anchor="coregpus")
    chosen, problem = visible(gpus, context)
    details = [f"GPU {g.index}: {g.name}, {g.total_mib / 1024:.0f} GiB, compute capability {g.compute_cap}"
               for g in chosen]
    if problem:
        every = ",".join(g.index for g in gpus)
        return warn(problem, f"export CUDA_VISIBLE_DEVICES={every}   # or unset CUDA_VISIBLE_DEVICES",
                    details, anchor="coregpus")
    names = sorted({g.name for g in chosen})
    return ok(f"{len(chosen)} GPU(s) visible: {', '.join(names)}", details)


def _process_owner(pid: str) -> str:
    """``user, running for, command`` from /proc, or why it cannot be told."""
    try:
        import pwd

        uid = os.stat(f"/proc/{pid}").st_uid
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmd = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        return f"user {pwd.getpwuid(uid).pw_name}: {cmd[:80]}"
    except (OSError, KeyError):
        return "not visible from here (other container or already dead)"


def check_gpu_memory(context: CheckContext) -> CheckResult:
    try:
        gpus = list_gpus(context)
        apps = nvidia_smi(context, "--query-compute-apps=pid,gpu_uuid,used_memory,process_name",
                          "--format=csv,noheader,nounits")
    except NvidiaSmiError as exc:
        return skip(f"nvidia-smi fails ({str(exc).splitlines()[0]}); see core.gpus")
    if gpus is None or apps is None:
        return skip("no NVIDIA driver here (nvidia-smi not on PATH)")
    chosen, _ = visible(gpus, context)
    by_uuid = {g.uuid: g for g in chosen}
    held: dict[str, int] = {}
    details: list[str] = []
    pids: list[str] = []
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or parts[1] not in by_uuid:
            continue
        pid, gpu, mib, name = parts[0], by_uuid[parts[1]], _int(parts[2]), parts[3]
        held[gpu.index] = held.get(gpu.index, 0) + mib
        pids.append(pid)
        details.append(f"pid {pid} ({name}) holds {mib} MiB on GPU {gpu.index}; {_process_owner(pid)}")
    # In a container, other namespaces' processes are not listed but their memory is used.
    for gpu in chosen:
        unexplained = gpu.used_mib - held.get(gpu.index, 0)
        if unexplained > 1024:
            details.append(f"GPU {gpu.index}: {unexplained} MiB used by processes not listed here "
                           "(another container, or a zombie outside this PID namespace)")
            held.setdefault(gpu.index, 0)
    if not held:
        return ok(f"no other process holds memory on the {len(chosen)} visible GPU(s)")
    total_gib = sum(g.used_mib for g in chosen if g.index in held) / 1024
    unique = ",".join(dict.fromkeys(pids))
    fix = (
        f"ps -o pid,user,etime,args -p {unique}   # check they are yours and finished (never pkill by name)\n"
        f"kill {' '.join(dict.fromkeys(pids))}   # then, if still listed by nvidia-smi: kill -9 ..."
        if pids else
        "nvidia-smi   # find the owner of the memory on the host; zombie ray/vLLM workers are the usual cause"
    )
    return warn(
        f"{total_gib:.1f} GiB already in use on GPU(s) {', '.join(sorted(held))}"
        + (f" by pid(s) {unique}" if pids else ""),
        fix, details, anchor="coregpu-memory",
    )
