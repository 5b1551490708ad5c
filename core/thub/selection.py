"""Which backend runs an algorithm here: requirements read from metadata, never by importing."""

from __future__ import annotations

import os
import shutil
from functools import cache

from thub.errors import UsageError
from thub.manager import Registry
from thub.specs import BackendSpec


def installed_version(distribution: str | None) -> str | None:
    """The installed version of ``distribution`` from its metadata (nothing imported), or None."""
    if not distribution:
        return None
    from thub import installed

    return installed.version(distribution)


def module_origin(module: str, python: str | None = None, *, timeout: float = 60) -> str | None:
    """Where ``module`` would be imported from, without importing it: its file (a package's
    ``__init__.py``), ``"namespace"`` for a namespace package, or None when it is not there.

    ``python`` asks another interpreter (a managed environment, a backend's own ``python``) in a
    subprocess; None: this one. Finding ``a.b`` imports ``a``; an import error doing so, or an
    interpreter that cannot run within ``timeout`` seconds, counts as not there.
    """
    if python is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        return (spec.origin or "namespace") if spec else None
    import subprocess

    code = (f"import importlib.util as u\ntry:\n    s = u.find_spec({module!r})\nexcept (ImportError, ValueError):\n"
            "    s = None\nprint((s.origin or 'namespace') if s else '')")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()  # the last line: a sitecustomize may print before it
    return lines[-1] if done.returncode == 0 and lines and lines[-1] else None


def requirement_problem(specifier: str) -> str | None:
    """None if ``specifier`` is satisfied by an installed distribution, else what is wrong."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(specifier)
    except InvalidRequirement as exc:
        return f"invalid requirement {specifier!r}: {exc}"
    if requirement.marker is not None and not requirement.marker.evaluate():
        return None
    installed = installed_version(requirement.name)
    if installed is None:
        return f"{requirement.name} is not installed (needs {specifier})"
    if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
        return f"{requirement.name} {installed} is installed, needs {specifier}"
    return None


def missing_requirements(backend: BackendSpec) -> list[str]:
    """Unsatisfied requirements of ``backend`` (empty when it can be imported)."""
    return [problem for spec in backend.requirements if (problem := requirement_problem(spec))]


@cache
def cuda_visible() -> bool:
    """Whether an NVIDIA driver is present, decided without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def when_gpu_visible(_context: object = None) -> bool:
    """``CheckSpec.applies`` for a check that means something only with an NVIDIA GPU (a CUDA
    library, the GPU count): without one it is "not applicable", never a failure whose fix (a
    CUDA build, another GPU) cannot work here. Calls :func:`cuda_visible` each time, so a test
    that patches ``thub.selection.cuda_visible`` after the checks are registered is honoured."""
    return cuda_visible()


def backend_status(backend: BackendSpec) -> tuple[bool, str]:
    """(can run here, why not) for one backend."""
    missing = missing_requirements(backend)
    if missing:
        return False, "; ".join(missing)
    if backend.needs_cuda and not cuda_visible():
        return False, "needs an NVIDIA GPU and none is visible"
    return True, "ready"


def choose_backend(registry: Registry, algorithm: str, requested: str | None) -> tuple[BackendSpec, str]:
    """The requested backend (validated) or the best one that can run here, and why."""
    candidates = registry.backends_for(algorithm)
    if requested:
        backend = registry.backend(requested)
        if algorithm not in backend.algorithms:
            if candidates:
                runs = ", ".join(b.name for b in candidates)
            else:
                from thub.envs.catalog import install_advice

                runs = f"none installed; {install_advice(algorithm)}"
            raise UsageError(
                f"backend {backend.name!r} does not run {algorithm!r} "
                f"(it runs {', '.join(sorted(backend.algorithms))}); backends for {algorithm}: {runs}"
            )
        return backend, "chosen with --backend"
    if not candidates:
        from thub.envs.catalog import install_advice

        raise UsageError(f"no installed backend runs {algorithm!r}; {install_advice(algorithm)}")
    notes: list[str] = []
    for backend in candidates:
        ok, why = backend_status(backend)
        if ok:
            skipped = f"; skipped {', '.join(notes)}" if notes else ""
            return backend, f"highest-priority backend for {algorithm} that can run here{skipped}"
        notes.append(f"{backend.name} ({why})")
    raise UsageError(f"no backend for {algorithm!r} can run here: {'; '.join(notes)}")
