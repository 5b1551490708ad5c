"""Checks of the filesystem and environment variables: TMPDIR, socket paths, free disk, cache
sizes, the output directory, Hugging Face settings and leftover debugging variables."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable

from thub.specs import CheckContext, CheckResult
from thub_builtins.checks._util import (
    cache_home,
    dist_version,
    existing_ancestor,
    fail,
    hf_hub_cache,
    home,
    human_bytes,
    ok,
    quote,
    skip,
    tmpdir,
    warn,
)
from thub_builtins.checks.system import pip_install

#: ``sun_path`` holds 108 bytes including the terminating NUL.
AF_UNIX_MAX = 107
#: Longest socket name commonly created under TMPDIR: vLLM's ZMQ ``ipc://$TMPDIR/<uuid4>``
#: (multiprocessing's ``pymp-xxxxxxxx/listener-xxxxxxxx`` is 32).
TMPDIR_SUFFIX = "/" + "0" * 36
#: Ray's ``$RAY_TMPDIR/ray/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store``.
RAY_SUFFIX = "/ray/session_2026-01-01_00-00-00_000000_1234567/sockets/plasma_store"

GIB = 2**30


def _writable_dir(path: str) -> str | None:
    """None when files can be created in ``path``, else why not."""
    if not os.path.isdir(path):
        return "does not exist" if not os.path.exists(path) else "is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".thub-doctor-"):
            pass
    except OSError as exc:
        return f"is not writable ({exc.strerror or exc})"
    return None


def check_tmpdir(context: CheckContext) -> CheckResult:
    path, variable = tmpdir(context)
    problem = _writable_dir(path)
    if problem is None:
        return ok(f"{variable} {path} is writable")
    if variable == "default":
        return fail(f"/tmp {problem}", "mkdir -p \"$HOME/tmp\" && export TMPDIR=\"$HOME/tmp\"",
                    anchor="coretmpdir")
    # Python's tempfile silently falls back to /tmp, which is how JIT builds end up filling '/'.
    return fail(
        f"{variable}={path} {problem}: Python silently falls back to /tmp, compilers fail",
        f"mkdir -p {quote(path)}",
        anchor="coretmpdir",
    )


def check_socket_paths(context: CheckContext) -> CheckResult:
    path, variable = tmpdir(context)
    rows = [(variable if variable != "default" else "TMPDIR (unset: /tmp)", path, TMPDIR_SUFFIX)]
    ray_base = context.env.get("RAY_TMPDIR") or path
    if context.env.get("RAY_TMPDIR") or dist_version("ray"):
        rows.append(("RAY_TMPDIR" if context.env.get("RAY_TMPDIR") else f"Ray (via {variable})", ray_base, RAY_SUFFIX))
    details, fixes = [], []
    too_long = []
    for label, base, suffix in rows:
        length = len(base.rstrip("/").encode()) + len(suffix.encode())
        details.append(f"{label}: {base} -> socket paths of ~{length} bytes (limit {AF_UNIX_MAX})")
        if length > AF_UNIX_MAX:
            too_long.append(label)
            budget = AF_UNIX_MAX - len(suffix)
            # A short symlink keeps the files on the big disk: AF_UNIX limits the string only.
            if label.startswith("RAY"):
                fixes.append(f"ln -sfn {quote(base)} /tmp/ray-t && export RAY_TMPDIR=/tmp/ray-t")
            elif label.startswith("Ray"):
                fixes.append(f"mkdir -p /tmp/ray-t && export RAY_TMPDIR=/tmp/ray-t   # Ray needs <= {budget} bytes")
            else:
                fixes.append(f"ln -sfn {quote(base)} /tmp/thub-tmp && export TMPDIR=/tmp/thub-tmp"
                             f"   # TMPDIR must be <= {budget} bytes")
    if too_long:
        return fail(
            f"{' and '.join(too_long)} too long for AF_UNIX sockets (> {AF_UNIX_MAX} bytes with the "
            "socket name): torch.distributed, vLLM and Ray fail with 'AF_UNIX path too long'",
            "\n".join(fixes), details, anchor="coresocket-paths",
        )
    return ok("socket paths fit in AF_UNIX's 107 bytes", details)


def _locations(context: CheckContext) -> list[tuple[str, str, int]]:
    """(label, path, warn-below bytes) of every place a run writes to."""
    path, variable = tmpdir(context)
    found = []
    if context.output_dir:
        found.append(("output dir", context.output_dir, 20 * GIB))
    found.append((f"{variable if variable != 'default' else 'TMPDIR (unset)'}", path, 10 * GIB))
    found.append(("HF cache", hf_hub_cache(context), 20 * GIB))
    found.append(("~/.cache (pip, uv, vLLM, flashinfer, triton)", cache_home(context), 10 * GIB))
    return found


_DISK_FIXES = {
    "output dir": "# choose a ckpt_output_dir on a filesystem with room for the checkpoints",
    "HF cache": "hf cache delete   # or: export HF_HOME=/path/on/big/disk/huggingface",
    "~/.cache": "thub doctor core.caches   # shows what to clean; or export XDG_CACHE_HOME=/path/on/big/disk/cache",
}


def check_disk(context: CheckContext) -> CheckResult:
    details: list[str] = []
    low: list[tuple[str, str, int, bool]] = []
    seen: dict[int, str] = {}
    for label, path, threshold in _locations(context):
        anchor = existing_ancestor(path)
        try:
            stat = os.statvfs(anchor)
            device = os.stat(anchor).st_dev
        except OSError as exc:
            details.append(f"{label} {path}: cannot stat ({exc.strerror})")
            continue
        free = stat.f_bavail * stat.f_frsize
        total = stat.f_blocks * stat.f_frsize
        same = f" (same filesystem as {seen[device]})" if device in seen else ""
        seen.setdefault(device, label)
        details.append(f"{label} {path}: {human_bytes(free)} free of {human_bytes(total)}{same}")
        if free < threshold:
            low.append((label, path, free, free < GIB))
    if not low:
        return ok("enough free space for the output dir, TMPDIR and caches", details)
    fixes = []
    for label, _path, _, _ in low:
        if label.startswith(("TMP", "TEMP")):
            fixes.append("mkdir -p /path/on/big/disk/tmp && export TMPDIR=/path/on/big/disk/tmp"
                         "   # flash-attn/flashinfer JIT builds write GBs here")
        else:
            fixes.append(next((fix for key, fix in _DISK_FIXES.items() if label.startswith(key)), ""))
    summary = "low disk space: " + ", ".join(f"{label} {human_bytes(free)} free" for label, _, free, _ in low)
    if any(critical for *_, critical in low):
        return fail(summary, "\n".join(dict.fromkeys(fixes)), details, anchor="coredisk")
    return warn(summary, "\n".join(dict.fromkeys(fixes)), details, anchor="coredisk")


def check_output_dir(context: CheckContext) -> CheckResult:
    if not context.output_dir:
        return skip("no output directory given (thub doctor --output-dir DIR)")
    path = os.path.abspath(os.path.expanduser(context.output_dir))
    if os.path.exists(path):
        problem = _writable_dir(path)
        if problem is None:
            return ok(f"{path} is writable")
        if _read_only(path):
            return fail(f"output dir {path} is on a read-only filesystem", _READ_ONLY_FIX, anchor="coreoutput-dir")
        return fail(f"output dir {path} {problem}",
                    f"sudo chown -R \"$USER\" {quote(path)}   # or choose another ckpt_output_dir",
                    anchor="coreoutput-dir")
    parent = existing_ancestor(path)
    problem = _writable_dir(parent)
    if problem is None:
        return ok(f"{path} can be created (in {parent})")
    if _read_only(parent):
        return fail(f"output dir {path} cannot be created: {parent} is on a read-only filesystem", _READ_ONLY_FIX,
                    anchor="coreoutput-dir")
    return fail(f"output dir {path} cannot be created: {parent} {problem}",
                f"sudo mkdir -p {quote(path)} && sudo chown -R \"$USER\" {quote(path)}   # or choose another "
                "ckpt_output_dir",
                anchor="coreoutput-dir")


# no owner or mode change makes a read-only mount writable
_READ_ONLY_FIX = "# choose a ckpt_output_dir on a writable disk (this filesystem is mounted read-only)"


def _read_only(path: str) -> bool:
    """Whether ``path`` lies on a filesystem mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _caches(context: CheckContext) -> list[tuple[str, str, str]]:
    """(name, path, clean command) of the caches that grow without bound."""
    cache = cache_home(context)
    env = context.env
    return [
        ("HF hub", hf_hub_cache(context), "hf cache delete   # interactive; pick old models"),
        ("pip", env.get("PIP_CACHE_DIR") or os.path.join(cache, "pip"), "pip cache purge"),
        ("uv", env.get("UV_CACHE_DIR") or os.path.join(cache, "uv"), "uv cache clean"),
        ("vLLM", env.get("VLLM_CACHE_ROOT") or os.path.join(cache, "vllm"),
         "rm -rf "
         f"{quote(os.path.join(env.get('VLLM_CACHE_ROOT') or os.path.join(cache, 'vllm'), 'torch_compile_cache'))}"),
        ("flashinfer", os.path.join(cache, "flashinfer"),
         f"rm -rf {quote(os.path.join(cache, 'flashinfer'))}   # also needed after changing the CUDA toolkit"),
        ("torch extensions", env.get("TORCH_EXTENSIONS_DIR") or os.path.join(cache, "torch_extensions"),
         f"rm -rf {quote(env.get('TORCH_EXTENSIONS_DIR') or os.path.join(cache, 'torch_extensions'))}"),
        ("triton", env.get("TRITON_CACHE_DIR") or os.path.join(home(context), ".triton", "cache"),
         f"rm -rf {quote(env.get('TRITON_CACHE_DIR') or os.path.join(home(context), '.triton', 'cache'))}"),
    ]


def directory_size(path: str, deadline: float) -> tuple[int, bool]:
    """(bytes, complete) of ``path``; stops at ``deadline`` (uv caches hold millions of files)."""
    total = 0
    stack = [path]
    while stack:
        if time.monotonic() > deadline:
            return total, False
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total, True


def check_caches(context: CheckContext) -> CheckResult:
    details: list[str] = []
    big: list[tuple[int, str]] = []
    total = 0
    for name, path, clean in _caches(context):
        if not os.path.isdir(path):
            continue
        size, complete = directory_size(path, time.monotonic() + 3.0)
        total += size
        shown = human_bytes(size) if complete else f">= {human_bytes(size)} (stopped counting after 3 s)"
        details.append(f"{name}: {shown} in {path}")
        try:
            stat = os.statvfs(path)
            tight = stat.f_bavail * stat.f_frsize < 20 * GIB or stat.f_bavail < 0.1 * stat.f_blocks
        except OSError:
            tight = False
        if tight and size > GIB:
            big.append((size, clean))
    if not details:
        return ok("no pip/uv/HF/vLLM/flashinfer/triton caches found")
    if big:
        return warn(
            f"caches use {human_bytes(total)} on a filesystem that is nearly full",
            "\n".join(clean for _, clean in sorted(big, reverse=True)), details, anchor="corecaches",
        )
    return ok(f"caches use {human_bytes(total)}", details)


_TRUE = ("1", "true", "yes", "on")


def _flag(context: CheckContext, name: str) -> bool | None:
    value = context.env.get(name)
    return None if value is None else value.strip().lower() in _TRUE


def check_hf_env(context: CheckContext) -> CheckResult:
    problems: list[tuple[str, str, str]] = []  # (status, summary, fix)
    hub = hf_hub_cache(context)
    flags = {name: _flag(context, name) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    offline = any(flags.values())
    set_flags = {k: v for k, v in flags.items() if v is not None}
    if len(set(set_flags.values())) > 1:
        problems.append(("warn", "offline settings disagree: " + ", ".join(f"{k}={context.env[k]}" for k in set_flags),
                         "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1   # or unset all three"))
    models = [e for e in os.listdir(hub) if e.startswith(("models--", "datasets--"))] if os.path.isdir(hub) else []
    if offline and not models:
        problems.append(("warn", f"offline mode, but the HF cache {hub} holds no models: only local paths will load",
                         "hf download MODEL_ID   # on a machine with network, same HF_HOME; or unset HF_HUB_OFFLINE"))
    if "TRANSFORMERS_CACHE" in context.env:
        problems.append(("warn", "TRANSFORMERS_CACHE is deprecated and ignored by transformers 5",
                         f"export HF_HUB_CACHE={quote(context.env['TRANSFORMERS_CACHE'])} && unset TRANSFORMERS_CACHE"))
    hf_home_var = context.env.get("HF_HOME")
    if hf_home_var:
        parent = existing_ancestor(hf_home_var)
        if not os.access(parent, os.W_OK) and not offline:
            problems.append(("fail", f"HF_HOME={hf_home_var} is not writable: downloads will fail",
                             f"sudo chown -R \"$USER\" {quote(parent)}   # or export HF_HOME=$HOME/.cache/huggingface"))
    if (_flag(context, "HF_HUB_ENABLE_HF_TRANSFER")
            and dist_version("hf_transfer") is None and dist_version("hf-transfer") is None):
        problems.append(("warn", "HF_HUB_ENABLE_HF_TRANSFER=1 but hf_transfer is not installed",
                         pip_install("hf_transfer") + "   # or: unset HF_HUB_ENABLE_HF_TRANSFER"))
    tokens = [context.env[k] for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN") if context.env.get(k)]
    if len(set(tokens)) > 1:
        problems.append(("warn", "HF_TOKEN and HUGGING_FACE_HUB_TOKEN differ (HF_TOKEN wins)",
                         "unset HUGGING_FACE_HUB_TOKEN"))
    mode = "offline" if offline else "online"
    if not problems:
        return ok(f"{mode}; HF cache {hub} ({len(models)} models/datasets)")
    worst = "fail" if any(p[0] == "fail" for p in problems) else "warn"
    make: Callable[..., CheckResult] = fail if worst == "fail" else warn
    return make(problems[0][1] if len(problems) == 1 else f"{len(problems)} Hugging Face setting problems",
                "\n".join(p[2] for p in problems), [p[1] for p in problems], anchor="corehf-env")


#: Variables left over from debugging or from older library versions: name -> (bad?, why, fix).
LEFTOVER_VARIABLES: dict[str, tuple[Callable[[str], bool], str, str]] = {
    "VLLM_USE_V1": (lambda v: True, "VLLM_USE_V1 was removed in vLLM 0.12; setting it does nothing",
                    "unset VLLM_USE_V1"),
    "CUDA_LAUNCH_BLOCKING": (lambda v: v.strip() == "1",
                             "CUDA_LAUNCH_BLOCKING=1 serialises every kernel (a debugging setting)",
                             "unset CUDA_LAUNCH_BLOCKING"),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": (lambda v: v.strip() == "1",
                                       "PYTORCH_NO_CUDA_MEMORY_CACHING=1 disables torch's allocator cache (slow)",
                                       "unset PYTORCH_NO_CUDA_MEMORY_CACHING"),
    "NCCL_BLOCKING_WAIT": (lambda v: v.strip() == "1", "NCCL_BLOCKING_WAIT is deprecated; use TORCH_NCCL_BLOCKING_WAIT",
                           "export TORCH_NCCL_BLOCKING_WAIT=$NCCL_BLOCKING_WAIT && unset NCCL_BLOCKING_WAIT"),
}


def check_leftover_env(context: CheckContext) -> CheckResult:
    from thub.envnames import describe, unknown_variables

    hits = [(why, fix) for name, (bad, why, fix) in LEFTOVER_VARIABLES.items()
            if name in context.env and bad(context.env[name])]
    # A mistyped THUB_* name (THUB_LEARNNG_RATE) is ignored by thub: name it with the nearest one.
    unknown = unknown_variables(context.env)
    hits += [(line, f"unset {name}" + (f"; export {near}=...   # what you probably meant" if near else ""))
             for line, (name, near) in zip(describe(unknown), unknown, strict=True)]
    if not hits:
        return ok("no obsolete or debugging-only variables set")
    return warn(hits[0][0] if len(hits) == 1 else f"{len(hits)} obsolete or debugging-only variables set",
                "\n".join(fix for _, fix in hits), [why for why, _ in hits], anchor="coreenv-vars")

