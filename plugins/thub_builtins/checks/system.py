"""Checks of the Python environment: interpreter, plugins, requirements, conflicts, bad releases.

Everything here reads installed-distribution metadata (once per process: :mod:`thub.installed`);
nothing imports a training library.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from thub import installed
from thub.installed import InstalledDist
from thub.specs import BackendSpec, CheckContext, CheckResult
from thub_builtins.checks._util import fail, ok, quote, skip, warn

if TYPE_CHECKING:
    from thub.manager import Registry

MIN_PYTHON = (3, 11)

#: Releases known to be malicious: canonical name -> {version: why}. A hit is always a failure.
KNOWN_COMPROMISED: dict[str, dict[str, str]] = {
    "litellm": {
        "1.82.7": "TeamPCP supply-chain attack (March 2026): harvests credentials at import time",
        "1.82.8": "TeamPCP supply-chain attack (March 2026): harvests credentials at import time",
    },
}


def pip_install(*requirements: str) -> str:
    """A copy-pasteable install command for the interpreter running thub."""
    args = " ".join(quote(r) for r in requirements)
    if shutil.which("uv"):
        return f"uv pip install --python {quote(sys.executable)} {args}"
    return f"{quote(sys.executable)} -m pip install {args}"


def check_python(_: CheckContext) -> CheckResult:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < MIN_PYTHON:
        return fail(
            f"Python {version} is too old; thub needs {'.'.join(map(str, MIN_PYTHON))} or newer",
            _newer_python_fix(), anchor="corepython",
        )
    return ok(f"Python {version} ({sys.executable})")


def _newer_python_fix() -> str:
    """A Python 3.12 environment with thub from where this one came (thub is on no package
    index: from a checkout, that checkout)."""
    from thub.envs.catalog import thub_checkout

    checkout = thub_checkout()
    if checkout is None:
        return "# create a Python 3.12 environment and install thub into it the way it was installed here"
    venv = quote(str(checkout / ".venv-py312"))
    return f"uv venv --python 3.12 {venv} && uv pip install --python {venv} -e {quote(str(checkout))}"


def check_plugins(_: CheckContext) -> CheckResult:
    from thub.manager import get_registry

    registry = get_registry()
    loaded = len(registry.plugins)
    if not registry.failures:
        return ok(f"{loaded} plugins loaded", [f"{name}" for name in registry.plugins])
    details = [
        f"{f.name} ({f.distribution or 'built-in'} {f.version or ''}".rstrip() + f") failed at {f.stage}: {f.error}"
        for f in registry.failures
    ]
    names = sorted({f.name for f in registry.failures})
    dists = sorted({f.distribution for f in registry.failures if f.distribution})
    from thub.envs.catalog import catalog_entry
    from thub_builtins.checks.pins import owner_install

    # thub's own plugins are on no package index: `thub install` reinstalls them from their source
    ours = [d for d in dists if catalog_entry(d) is not None]
    fix_lines = [f"{owner_install(d, into='current')}   # reinstall the broken plugin" for d in ours]
    if others := [d for d in dists if d not in ours]:
        fix_lines.append(pip_install("--force-reinstall", *others) + "   # reinstall the broken plugin(s)")
    fix_lines.append(f"export THUB_DISABLE_PLUGINS={','.join(names)}   # or run without them meanwhile")
    return fail(
        f"{len(names)} plugin(s) failed to load: {', '.join(names)} ({loaded} loaded)",
        "\n".join(fix_lines),
        details,
        anchor="coreplugins",
    )


def check_backend_requirements(context: CheckContext) -> CheckResult:
    from thub.manager import get_registry
    from thub.selection import cuda_visible

    registry = get_registry()
    if context.backend is not None:
        if context.backend not in registry.backends:
            return fail(f"backend {context.backend!r} is not installed",
                        "thub backends   # lists installed backends", anchor="corebackend-requirements")
        return _selected_backend_requirements(registry.backends[context.backend], registry)
    backends = sorted(registry.backends.values(), key=lambda b: b.name)
    if not backends:
        return skip("no backend installed", ["install one, e.g. `thub install trl`"])
    problems: dict[str, list[str]] = {}
    fixes: list[str] = []
    separate: list[str] = []
    gpu_only: list[str] = []
    for backend in backends:
        if backend.python:
            # Its requirements live in its own managed environment, not in this interpreter.
            separate.append(f"{backend.name}: runs in {backend.python} (checked there)")
            continue
        if backend.needs_cuda and not cuda_visible():
            # Not applicable on this machine whatever is installed: no install fix would help here.
            gpu_only.append(backend.name)
            continue
        missing = [(spec, problem) for spec, problem in zip(backend.requirements, _problems(backend.requirements))
                   if problem]
        if missing:
            problems[backend.name] = [problem for _, problem in missing]
            fixes.append(install_fix(backend, registry, [spec for spec, _ in missing]))
    details = [f"{name}: {problem}" for name, found in problems.items() for problem in found] + separate
    if gpu_only:
        details.append(f"{_need(gpu_only)} an NVIDIA GPU; not applicable on this machine")
    if not problems:
        usable = [b.name for b in backends if b.name not in gpu_only]
        summary = f"requirements of {', '.join(usable)} satisfied" if usable else "no backend can run here"
        if gpu_only:
            summary += f"; {_need(gpu_only)} an NVIDIA GPU (not applicable here)"
        return ok(summary, details)
    # Without --backend an installed-but-unusable backend is fine as long as nobody picks it.
    # One fix line per backend, each consistent with what is installed (see checks/pins.py).
    return warn(f"unsatisfied requirements: {', '.join(problems)}", "\n".join(fixes), details,
                anchor="corebackend-requirements")


def _need(names: list[str]) -> str:
    """``"art needs"`` / ``"art, verl need"``: the verb agrees with the number of backends."""
    return f"{', '.join(names)} {'needs' if len(names) == 1 else 'need'}"


def install_fix(backend: BackendSpec, registry: Registry, missing: list[str]) -> str:
    """The command that installs ``backend``'s ``missing`` requirements without breaking anything
    installed: its ``install`` hint or a pip command, else (its pins contradict what installed
    distributions or working backends need) ``thub install NAME --into managed``."""
    from thub.selection import backend_status
    from thub_builtins.checks.pins import conflicting_pins, managed_install

    working = [b for b in registry.backends.values()
               if b.name != backend.name and b.python is None and backend_status(b)[0]]
    conflicts = conflicting_pins(backend, missing, working)
    if conflicts:
        return (f"{managed_install(backend)}   # its pins conflict with this environment: "
                + "; ".join(conflicts))
    return backend.install or pip_install(*missing)


def _selected_backend_requirements(backend: BackendSpec, registry: Registry) -> CheckResult:
    """The backend a run would use (``--backend``, ``thub train``): any problem fails.

    The messages are the ones users see before a launch is refused: "backend X needs an NVIDIA
    GPU; none found" (fix: a GPU machine or a backend that trains on CPU) and "backend X is
    missing ..." (fix: the backend's ``install`` hint, else a pip command, or ``thub install X
    --into managed`` when its pins contradict what is installed). Both when both apply.
    """
    from thub.selection import cuda_visible

    if backend.python:
        # Its requirements live in its own managed environment, not in this interpreter.
        return ok(f"requirements of {backend.name} satisfied",
                  [f"{backend.name}: runs in {backend.python} (checked there)"])
    missing = [(spec, problem) for spec, problem in zip(backend.requirements, _problems(backend.requirements))
               if problem]
    no_gpu = backend.needs_cuda and not cuda_visible()
    if not missing and not no_gpu:
        return ok(f"requirements of {backend.name} satisfied")
    install = install_fix(backend, registry, [spec for spec, _ in missing]) if missing else ""
    details = [problem for _, problem in missing]
    if not no_gpu:
        summary = f"backend {backend.name} is missing {', '.join(spec for spec, _ in missing)}"
        return fail(summary, install, details, anchor="corebackend-requirements")
    summary = f"backend {backend.name} needs an NVIDIA GPU; none found"
    gpu_fix = _gpu_fix(backend, registry)
    if missing:
        summary += f" (and is missing {', '.join(spec for spec, _ in missing)})"
        fix = f"{gpu_fix}\n{install}"
    else:
        fix = gpu_fix
    return fail(summary, fix, details, anchor="corebackend-requirements")


def _gpu_fix(backend: BackendSpec, registry: Registry) -> str:
    """Run on a GPU, or name the installed backends that train on CPU: those that run one of
    ``backend``'s algorithms when there are any, else all of them (highest priority first)."""
    on_cpu = sorted((b for b in registry.backends.values() if not b.needs_cuda),
                    key=lambda b: (-b.priority, b.name))
    sharing = [b for b in on_cpu if set(b.algorithms) & set(backend.algorithms)]
    choices = sharing or on_cpu
    # A comment line: every non-comment line of a fix is a command (tests/test_first_contact_round2.py).
    if not choices:
        return "# run on a machine with an NVIDIA GPU, or install a backend that trains on CPU: `thub install trl`"
    names = " or ".join(f"`--backend {b.name}`" for b in choices)
    return f"# run on a machine with an NVIDIA GPU, or use a backend that trains on CPU: {names}"


def _problems(specs: tuple[str, ...]) -> list[str | None]:
    from thub.selection import requirement_problem

    return [requirement_problem(spec) for spec in specs]


def _installed() -> tuple[dict[str, InstalledDist], list[str]]:
    """First distribution per canonical name in ``sys.path`` order (what imports see), and
    duplicates (several ``.dist-info`` of one name, a classic stale-install leftover)."""
    found: dict[str, InstalledDist] = {}
    duplicates: list[str] = []
    for dist in installed.distributions():
        if dist.key in found:
            if found[dist.key].version != dist.version:
                duplicates.append(f"{dist.name}: {found[dist.key].version} and {dist.version} are both installed")
            continue
        found[dist.key] = dist
    return found, duplicates


def _thub_related(name: str, context: CheckContext) -> bool:
    if context.backend is None:
        return name == "thub" or name.startswith("thub-plugin-")
    from thub.manager import get_registry

    backend = get_registry().backends.get(context.backend)
    owner = backend.provenance.distribution if backend else None
    return name == "thub" or (owner is not None and canonicalize_name(owner) == name)


def _requirement_conflicts(found: dict[str, InstalledDist],
                           context: CheckContext) -> Iterator[tuple[bool, str, str, str]]:
    """(involves thub, message, requirement to install, who requires it) per unsatisfied requirement."""
    for name, info in found.items():
        related = _thub_related(name, context)
        extras = info.extras
        for text in info.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            marker = req.marker
            gated = marker is not None and "extra" in str(marker)
            if marker is not None and gated:
                # Extras are checked for thub's own distributions only (the training library is
                # often an extra of its plugin), and only when the extra's dependency is there.
                if not related or not any(marker.evaluate({"extra": e}) for e in extras):
                    continue
            elif marker is not None and not marker.evaluate({"extra": ""}):
                continue
            target = found.get(canonicalize_name(req.name))
            if target is None:
                if not gated:
                    yield (related, f"{info.name} {info.version} requires {req}, which is not installed", str(req),
                           info.name)
                continue
            if req.specifier and not req.specifier.contains(target.version, prereleases=True):
                yield (
                    related,
                    f"{info.name} {info.version} requires {req.name}{req.specifier}, "
                    f"but {target.name} {target.version} is installed",
                    f"{req.name}{req.specifier}",
                    info.name,
                )


def check_conflicts(context: CheckContext) -> CheckResult:
    found, duplicates = _installed()
    conflicts = list(_requirement_conflicts(found, context))
    ours = [c for c in conflicts if c[0]]
    details = [message for _, message, *_ in sorted(conflicts, key=lambda c: not c[0])] + duplicates
    if ours:
        return fail(
            f"{len(ours)} requirement(s) of thub or its plugins are not satisfied",
            _safe_fix(ours),
            details,
            anchor="coreconflicts",
        )
    if conflicts or duplicates:
        fix_parts = []
        if conflicts:
            fix_parts.append(_safe_fix(conflicts))
        if duplicates:
            site = next(iter(p for p in sys.path if p.endswith("site-packages")), "site-packages")
            fix_parts.append(f"ls -d {quote(site)}/*.dist-info   # remove the stale duplicate, then reinstall it")
        return warn(
            f"{len(conflicts)} conflicting requirement(s) and {len(duplicates)} duplicate install(s) "
            "outside thub",
            "\n".join(fix_parts),
            details,
            anchor="coreconflicts",
        )
    return ok(f"{len(found)} distributions, no conflicting requirements")


def _safe_fix(conflicts: list[tuple[bool, str, str, str]]) -> str:
    """pip for the requirements that break nothing installed; for one that contradicts another
    installed distribution's need, an environment of its own for the distribution requiring it."""
    from thub_builtins.checks.pins import contradiction, installed_needs, owner_install

    safe: list[str] = []
    lines: list[str] = []
    needs = installed_needs()
    for _, _, req, owner in conflicts:
        why = contradiction(req, skip=[owner], installed_by_name=needs)
        if why is None:
            safe.append(req)
        elif owner.startswith("thub-plugin-") or owner.startswith("thub_plugin_"):
            lines.append(f"{owner_install(owner)}   # {owner} needs {req}, but {why}")
        else:
            lines.append(f"# {owner} needs {req}, but {why}: give {owner} an environment of its own")
    if safe:
        lines.insert(0, pip_install(*dict.fromkeys(safe)))
    return "\n".join(dict.fromkeys(lines))


def check_compromised(_: CheckContext) -> CheckResult:
    hits: list[tuple[str, str, str]] = []
    for dist in installed.distributions():
        bad = KNOWN_COMPROMISED.get(dist.key, {})
        if dist.version in bad:
            hits.append((dist.name, dist.version, bad[dist.version]))
    if not hits:
        return ok(f"none of {sum(len(v) for v in KNOWN_COMPROMISED.values())} known-compromised releases installed")
    safe = []
    for name, _version, _reason in hits:
        lowest_bad = min(KNOWN_COMPROMISED[canonicalize_name(name)], key=lambda v: tuple(map(int, v.split("."))))
        safe.append(f"{name}<{lowest_bad}")
    return fail(
        "known-compromised release installed: " + ", ".join(f"{n} {v}" for n, v, _ in hits),
        pip_install(*safe) + "\n# then rotate every credential this environment could read "
        "(HF/W&B tokens, cloud keys, ~/.ssh): these releases steal them at import time",
        [f"{n} {v}: {why}" for n, v, why in hits],
        anchor="corecompromised",
    )
