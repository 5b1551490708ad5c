"""Checks of compiled training libraries: flashinfer, flash-attn, vLLM, NCCL, GatedDeltaNet kernels,
and leftover Ray processes. Each applies only when its library is installed.

Imports of compiled extensions run in a child interpreter: an extension built against another
torch can abort the process, and the doctor must survive to report it.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

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
from thub_builtins.checks.gpu import NvidiaSmiError, list_gpus
from thub_builtins.checks.system import pip_install

FLASHINFER_DISTS = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
NCCL_DISTS = ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl")


def _base(version: str) -> str:
    """Version without local label: flashinfer-jit-cache is ``0.6.4+cu128``."""
    return version.partition("+")[0]


def check_flashinfer(_: CheckContext) -> CheckResult:
    found = {name: v for name in FLASHINFER_DISTS if (v := dist_version(name))}
    if "flashinfer-python" not in found:
        return skip("flashinfer is not installed")
    wanted = _base(found["flashinfer-python"])
    wrong = {n: v for n, v in found.items() if _base(v) != wanted}
    details = [f"{n} {v}" for n, v in found.items()]
    if wrong:
        return fail(
            "flashinfer packages disagree: " + ", ".join(f"{n} {v}" for n, v in found.items())
            + " (vLLM's engine core dies with 'Engine core initialization failed')",
            pip_install(*(f"{n}=={wanted}" for n in wrong if n != "flashinfer-jit-cache"))
            + ("\n# flashinfer-jit-cache: reinstall it from the flashinfer index for your CUDA"
               if "flashinfer-jit-cache" in wrong else ""),
            details, anchor="coreflashinfer",
        )
    return ok(f"flashinfer {wanted}: " + ", ".join(found), details)


def _import_probe(context: CheckContext, module: str, timeout: float = 100) -> tuple[bool, str]:
    """(imports, error text) for ``module`` imported in a child interpreter."""
    done = run_command([sys.executable, "-c", f"import {module}"], context, timeout=timeout)
    if done is None:
        return False, f"import {module} did not finish within {timeout:g} s"
    if done.returncode == 0:
        return True, ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1] if lines else f"the interpreter exited with code {done.returncode}"


def check_flash_attn(context: CheckContext) -> CheckResult:
    version = dist_version("flash-attn") or dist_version("flash_attn")
    if version is None:
        return skip("flash-attn is not installed")
    imports, error = _import_probe(context, "flash_attn_2_cuda")
    if imports:
        return ok(f"flash-attn {version} loads against torch {dist_version('torch') or '?'}")
    return fail(
        f"flash-attn {version} does not load: {error}",
        "# the extension was built against another torch; rebuild it (do not downgrade torch):\n"
        "uv cache clean flash-attn   # if you use uv\n"
        + pip_install("flash-attn", "--no-build-isolation", "--force-reinstall"),
        [error, f"torch {dist_version('torch') or 'not installed'}"],
        anchor="coreflash-attn",
    )


def check_vllm(context: CheckContext) -> CheckResult:
    version = dist_version("vllm")
    if version is None:
        return skip("vLLM is not installed")
    imports, error = _import_probe(context, "vllm._C")
    if imports:
        return ok(f"vLLM {version}: vllm._C loads against torch {dist_version('torch') or '?'}")
    return fail(
        f"vLLM {version}: vllm._C does not load ({error})",
        "# the vLLM wheel was built for another torch/CUDA; install the torch it pins:\n"
        + pip_install("--force-reinstall", f"vllm=={version}"),
        [error], anchor="corevllm",
    )


def _nccl_library(dist: metadata.Distribution) -> Path | None:
    for file in dist.files or []:
        if file.name.startswith("libnccl.so"):
            return Path(str(dist.locate_file(file)))
    return None


_NCCL_PROBE = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "v = ctypes.c_int()\n"
    "rc = lib.ncclGetVersion(ctypes.byref(v))\n"
    "print(rc, v.value)\n"
)


def decode_nccl_version(code: int) -> str:
    """``ncclGetVersion``'s integer as ``major.minor.patch`` (2.9+ uses 10000s, older 1000s)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def loaded_nccl_version(context: CheckContext, library: Path) -> tuple[str | None, str]:
    done = run_command([sys.executable, "-c", _NCCL_PROBE, str(library)], context, timeout=30)
    if done is None or done.returncode != 0:
        lines = (done.stderr.strip().splitlines() if done else []) or ["timed out"]
        return None, lines[-1]
    rc, _, code = done.stdout.strip().partition(" ")
    if rc != "0":
        return None, f"ncclGetVersion returned {rc}"
    return decode_nccl_version(int(code)), ""


def check_nccl(context: CheckContext) -> CheckResult:
    dists = [d for name in NCCL_DISTS if (d := _dist(name)) is not None]
    if not dists:
        return skip("no NCCL wheel (nvidia-nccl-cu12/-cu13) is installed")
    problems: list[tuple[str, str, str]] = []
    details: list[str] = []
    for dist in dists:
        name, version = dist.metadata["Name"], dist.version
        library = _nccl_library(dist)
        if library is None or not library.exists():
            problems.append((name, version, f"{name} {version}: its libnccl.so.2 is missing"
                             + (f" ({library})" if library else "")))
            continue
        loaded, error = loaded_nccl_version(context, library)
        if loaded is None:
            problems.append((name, version, f"{name} {version}: {library} cannot be loaded: {error}"))
            continue
        expected = ".".join(version.split(".")[:3])
        details.append(f"{name} {version}: {library} reports NCCL {loaded}")
        if loaded != expected:
            problems.append((name, version, f"pip says {name} {version} but {library} is NCCL {loaded} "
                                            "(a stale .so from another install)"))
    if len(dists) > 1:
        details.append("several NCCL wheels share nvidia/nccl/lib: the last one installed wins")
    if problems:
        return fail(
            problems[0][2],
            "\n".join(pip_install("--force-reinstall", f"{n}=={v}") for n, v, _ in problems),
            [p for _, _, p in problems] + details, anchor="corenccl",
        )
    return ok(", ".join(f"{d.metadata['Name']} {d.version}" for d in dists) + ": library matches metadata",
              details)


def _dist(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _nvcc_release(context: CheckContext) -> tuple[str | None, tuple[int, ...] | None]:
    candidates = []
    if context.env.get("CUDA_HOME"):
        candidates.append(os.path.join(context.env["CUDA_HOME"], "bin", "nvcc"))
    if (found := which(context, "nvcc")) is not None:
        candidates.append(found)
    for nvcc in candidates:
        done = run_command([nvcc, "--version"], context, timeout=20)
        if done is not None and done.returncode == 0:
            import re

            match = re.search(r"release ([0-9.]+)", done.stdout)
            if match:
                return nvcc, parse_version(match.group(1))
    return None, None


def check_gdn_kernels(context: CheckContext) -> CheckResult:
    fla = dist_version("flash-linear-attention") or dist_version("fla-core")
    if fla is None:
        return skip("flash-linear-attention is not installed (needed for GatedDeltaNet models)")
    nvcc, release = _nvcc_release(context)
    toolkit_fix = ("# a CUDA toolkit >= 12.5 (no driver upgrade needed), e.g.:\n"
                   "sudo dnf install -y cuda-toolkit-12-8\n"
                   "export CUDA_HOME=/usr/local/cuda-12.8 PATH=/usr/local/cuda-12.8/bin:$PATH")
    details = [f"flash-linear-attention {fla}", f"nvcc: {nvcc or 'not found'} "
               f"({'.'.join(map(str, release)) if release else '?'})"]
    if release is None:
        return warn("no nvcc found: flashinfer's GatedDeltaNet kernels need CUDA toolkit >= 12.5 to JIT",
                    toolkit_fix, details, anchor="coregdn-kernels")
    if release < (12, 5):
        return fail(f"CUDA toolkit {'.'.join(map(str, release))} is too old for GatedDeltaNet kernels "
                    "(PTX tensormap_replace_global_dim needs 12.5)", toolkit_fix, details,
                    anchor="coregdn-kernels")
    triton = dist_version("triton")
    try:
        gpus = list_gpus(context) or []
    except NvidiaSmiError:
        gpus = []
    hopper = any(g.compute_cap.startswith("9.") for g in gpus)
    new_triton = False
    if triton:
        try:
            new_triton = Version(triton).release[:2] >= (3, 4)
        except InvalidVersion:
            pass
    if hopper and new_triton and dist_version("tilelang") is None:
        return fail(f"Hopper GPU with triton {triton}: FLA's chunk_bwd gives wrong gradients without tilelang",
                    pip_install("tilelang"), details, anchor="coregdn-kernels")
    return ok(f"flash-linear-attention {fla} with CUDA toolkit {'.'.join(map(str, release))}", details)


def _ray_processes() -> list[tuple[str, str, str]]:
    """(pid, user, command) of Ray daemons and workers visible in /proc."""
    import pwd

    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        head = cmd.split(" ", 1)[0]
        if (head.startswith("ray::") or any(n in head for n in ("raylet", "gcs_server"))
                or "ray/_private/workers" in cmd):
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                user = str(uid)
            found.append((entry, user, cmd[:100]))
    return found


def check_stale_ray(_: CheckContext) -> CheckResult:
    if dist_version("ray") is None:
        return skip("Ray is not installed")
    processes = _ray_processes()
    if not processes:
        return ok("no Ray processes running")
    mine = [p for p in processes if p[1] == _me()]
    pids = " ".join(p[0] for p in mine)
    return warn(
        f"{len(processes)} Ray process(es) running ({len(mine)} yours): leftover workers hold GPU memory",
        ("# `ray stop` often leaves vLLM/FSDP workers behind, and stops other users' clusters too.\n"
         f"ps -o pid,user,etime,args -p {pids or '<pid>'}   # confirm they are yours and idle\n"
         f"kill {pids or '<pid>'}") if mine else
        "# these belong to other users: leave them, or ask them; check GPU memory with thub doctor core.gpu-memory",
        [f"pid {pid} user {user}: {cmd}" for pid, user, cmd in processes[:20]],
        anchor="corestale-ray",
    )


def _me() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
