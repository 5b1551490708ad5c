"""Doctor check ``core.managed-envs``: every managed environment is usable and as recorded.

For each manifest: the interpreter exists, the plugin distributions and the backends' required
distributions installed there (read from that environment's metadata, nothing imported) have the
versions the manifest recorded, and the lock file is the one recorded. Registered by
``thub_builtins.checks``.
"""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

from thub.specs import CheckContext, CheckResult

ANCHOR = "docs/doctor.md#coremanaged-envs"


def _installed(site_packages: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in metadata.distributions(path=[site_packages]):
        name = dist.metadata.get("Name")  # type: ignore[attr-defined]  # .get: typed in 3.12+ stubs only
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def problems_of(manifest: object) -> list[str]:
    """What is wrong with one managed environment (empty when it matches its manifest)."""
    from thub.envs.manifest import Manifest

    assert isinstance(manifest, Manifest)
    name = manifest.name
    if not Path(manifest.python).exists():
        return [f"{name}: interpreter {manifest.python} is missing"]
    site = manifest.data.get("site_packages")
    if not site or not Path(site).is_dir():
        return [f"{name}: site-packages {site} is missing"]
    have = _installed(site)
    wanted: dict[str, str | None] = {}
    for plugin in manifest.data.get("plugins", []):
        if plugin.get("distribution"):
            wanted[plugin["distribution"]] = plugin.get("version")
    for backend in manifest.backends:
        wanted.update(backend.get("installed") or {})
    problems = []
    for dist, version in sorted(wanted.items()):
        now = have.get(canonicalize_name(dist))
        if version is None:
            continue
        if now is None:
            problems.append(f"{name}: {dist} {version} was installed, now it is missing")
        elif now != version:
            problems.append(f"{name}: {dist} is {now}, the manifest recorded {version}")
    lock = manifest.lock_path
    recorded = manifest.data.get("lock_sha256")
    if lock is not None and recorded:
        if not lock.exists():
            problems.append(f"{name}: lock {lock} is missing")
        elif hashlib.sha256(lock.read_bytes()).hexdigest() != recorded:
            problems.append(f"{name}: lock {lock} changed since the install")
    return problems


def check_managed_envs(_: CheckContext) -> CheckResult:
    from thub.envs.manifest import Manifest, iter_manifests
    from thub.envs.paths import envs_dir

    manifests = list(iter_manifests())
    if not manifests:
        return CheckResult("skip", f"no managed environments under {envs_dir()}")
    problems: list[str] = []
    broken: list[str] = []
    for item in manifests:
        if isinstance(item, Manifest):
            found = problems_of(item)
            problems += found
            if found:
                broken.append(item.name)
        else:
            problems.append(f"{item[0].parent.name}: unreadable manifest: {item[1]}")
            broken.append(item[0].parent.name)
    if problems:
        fixes = "\n".join(f"thub install {b} --env {b} --into managed --force   # recreate it"
                          for b in dict.fromkeys(broken))
        return CheckResult("fail",
                           f"{len(broken)} of {len(manifests)} managed environment(s) do not match their manifest",
                           tuple(problems), fix=fixes, docs=ANCHOR)
    names = ", ".join(m.name for m in manifests if isinstance(m, Manifest))
    return CheckResult("ok", f"{len(manifests)} managed environment(s) match their manifests: {names}")
