"""Install plans: the exact commands ``thub install`` runs, and the current-environment check.

A plan is data (:class:`Plan`): files to write and commands to run, each with why. ``--dry-run``
prints it; :mod:`thub.envs.installer` runs it. Rules:

* **torch first, CPU-safe.** A plugin whose library needs torch gets torch installed by *pip*
  before anything else (pip's configuration may point at local wheels that uv never sees), pinned
  to ``--torch``, ``$THUB_TORCH``, or the torch installed beside thub (a CPU build stays a CPU
  build). Every later step runs with a constraints file holding that pin, so no resolver can
  swap in a CUDA torch. GPU extras are added only on request (``--gpu`` / ``--extra``).
* **managed**: ``<data>/envs/<name>`` is a fresh virtual environment (no system site-packages)
  holding thub core + the plugin + its library, created with uv when it is on PATH (pip
  otherwise); thub core comes from the same checkout (editable) or the same version as the
  thub running the install.
* **current**: before changing anything, a resolver dry run (``pip install --dry-run --report``)
  of the plugin into ``sys.executable``'s environment; if what it would install breaks a
  requirement of an installed thub plugin (or of the libraries those plugins need), the install
  is refused with both pins named (:func:`find_conflicts`).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from thub.envs.catalog import Source, thub_checkout
from thub.envs.paths import LOCK_NAME, env_dir, interpreter

CONSTRAINTS_NAME = "constraints.txt"


@dataclass
class Step:
    """One command of a plan; ``capture`` writes its stdout into that file (lock export)."""

    argv: list[str]
    why: str
    capture: Path | None = None
    check: bool = True

    def shell(self) -> str:
        text = shlex.join(self.argv)
        return f"{text} > {shlex.quote(str(self.capture))}" if self.capture else text


@dataclass
class Plan:
    """Everything an install will do, in order."""

    target: str                      # "current" or "managed"
    python: str                      # interpreter the packages go into
    sources: list[Source]
    installer: str                   # "pip" or "uv"
    env_name: str | None = None
    env_path: Path | None = None
    files: dict[Path, str] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torch: str | None = None
    create: bool = False             # a new managed environment (removed again if the install fails)

    def lines(self) -> list[str]:
        """The plan as text: files written, then ``$ command`` lines with their reasons."""
        out = [f"# into {self.target} environment"
               + (f" {self.env_name!r} at {self.env_path}" if self.env_path else f" ({self.python})")]
        out += [f"# note: {note}" for note in self.notes]
        for path, content in self.files.items():
            out.append(f"# write {path}:")
            out += [f"#   {line}" for line in content.splitlines()]
        for step in self.steps:
            out.append(f"# {step.why}")
            out.append(step.shell())
        if self.target == "managed":
            out.append(f"# then: {self.python} -m thub.envs.describe describe  -> manifest thub-env.json")
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "environment": self.env_name,
            "path": str(self.env_path) if self.env_path else None,
            "python": self.python,
            "installer": self.installer,
            "torch": self.torch,
            "sources": [s.argument() for s in self.sources],
            "files": {str(p): c for p, c in self.files.items()},
            "commands": [step.argv for step in self.steps],
            "notes": self.notes,
        }


def choose_installer(requested: str = "auto") -> str:
    """``uv`` when asked for or (auto) on PATH, else ``pip``."""
    if requested == "auto":
        return "uv" if shutil.which("uv") else "pip"
    if requested == "uv" and not shutil.which("uv"):
        raise ValueError("uv is not on PATH; use --installer pip")
    return requested


def current_torch() -> str | None:
    """``torch==<version>`` for the torch installed beside thub (local label kept: ``+cpu``)."""
    try:
        return f"torch=={metadata.version('torch')}"
    except metadata.PackageNotFoundError:
        return None


def torch_pin(requested: str | None) -> str | None:
    """The torch requirement a managed environment gets: ``--torch``, ``$THUB_TORCH``, or ours."""
    import os

    spec = requested or os.environ.get("THUB_TORCH") or current_torch()
    if spec and spec.lower() == "none":
        return None  # explicitly no torch step (a plugin that needs no torch)
    if spec and not spec.startswith("torch"):
        spec = f"torch=={spec}"
    return spec


def thub_requirement(editable: bool | None) -> list[str]:
    """How thub core gets into a managed environment: the same checkout, or the same version."""
    from thub._version import __version__

    checkout = thub_checkout()
    if checkout is not None:
        return ["-e", str(checkout)] if editable is not False else [str(checkout)]
    return [f"thub=={__version__}"]


def _install_cmd(installer: str, python: str, constraints: Path | None, args: list[str]) -> list[str]:
    extra = ["-c", str(constraints)] if constraints else []
    if installer == "uv":
        return ["uv", "pip", "install", "--python", python, *extra, *args]
    return [python, "-m", "pip", "install", *extra, *args]


def _source_args(sources: Iterable[Source], editable: bool) -> list[str]:
    args: list[str] = []
    for source in sources:
        if source.local and editable:
            args += ["-e", source.argument()]
        else:
            args.append(source.argument())
    return args


def plan_managed(sources: list[Source], *, name: str | None = None, installer: str = "auto",
                 torch: str | None = None, editable: bool | None = None, force: bool = False) -> Plan:
    """Create (or add to) managed environment ``name`` holding thub + ``sources``."""
    name = name or sources[0].name
    path = env_dir(name)
    python = str(interpreter(path))
    tool = choose_installer(installer)
    exists = interpreter(path).exists()
    plan = Plan("managed", python, sources, tool, env_name=name, env_path=path, create=force or not exists)
    if exists and not force:
        plan.notes.append(f"environment {name!r} exists: installing into it (--force recreates it)")
    if force and path.exists():
        plan.notes.append(f"--force: {path} is removed first")
    if plan.create:
        if tool == "uv":
            plan.steps.append(Step(["uv", "venv", "--seed", "--allow-existing", "--python", sys.executable, str(path)],
                                   "create the virtual environment (uv; --seed adds pip for the torch step)"))
        else:
            plan.steps.append(Step([sys.executable, "-m", "venv", str(path)], "create the virtual environment"))
    constraints: Path | None = None
    needs_torch = any(s.entry is None or s.entry.needs_torch for s in sources)
    plan.torch = torch_pin(torch) if needs_torch else None
    if plan.torch:
        constraints = path / CONSTRAINTS_NAME
        plan.files[constraints] = plan.torch + "\n"
        plan.steps.append(Step([python, "-m", "pip", "install", plan.torch],
                               "torch first, with pip (it sees pip's local wheels and constraints)"))
    elif needs_torch and (torch or "").lower() != "none":
        plan.notes.append("no torch pin known (no torch beside thub, no --torch/THUB_TORCH): "
                          "the resolver picks torch, which may be a CUDA build")
    is_editable = editable if editable is not None else thub_checkout() is not None
    core = thub_requirement(editable if editable is not None else None)
    plan.steps.append(Step(_install_cmd(tool, python, constraints, [*core, *_source_args(sources, is_editable)]),
                           "thub core + the plugin and its library, in one resolve"))
    plan.steps.append(Step([python, "-m", "pip", "check"], "the environment is consistent", check=False))
    plan.steps.append(Step([python, "-m", "pip", "freeze", "--all"], "export the lock",
                           capture=path / LOCK_NAME))
    return plan


def plan_current(sources: list[Source], *, installer: str = "auto", torch: str | None = None,
                 editable: bool = False) -> Plan:
    """Install ``sources`` into the environment thub runs in (``sys.executable``)."""
    python = sys.executable
    tool = choose_installer(installer)
    plan = Plan("current", python, sources, tool)
    pin = None if (torch or "").lower() == "none" else torch or current_torch()
    needs_torch = any(s.entry is None or s.entry.needs_torch for s in sources)
    constraints: Path | None = None
    if needs_torch and pin:
        plan.torch = pin if pin.startswith("torch") else f"torch=={pin}"
        constraints = Path(_state_dir()) / CONSTRAINTS_NAME
        plan.files[constraints] = plan.torch + "\n"
        if current_torch() is None:
            plan.steps.append(Step([python, "-m", "pip", "install", plan.torch], "torch first, with pip"))
    plan.steps.append(Step(_install_cmd(tool, python, constraints, _source_args(sources, editable)),
                           "the plugin and its library"))
    plan.steps.append(Step([python, "-m", "pip", "check"], "the environment is consistent", check=False))
    return plan


def _state_dir() -> Path:
    from thub.envs.paths import data_dir

    return data_dir() / "current"


# ---------------------------------------------------------------- the current-environment check


@dataclass(frozen=True)
class Conflict:
    """An installed requirement the planned install would break."""

    requirement: str          # e.g. "six==1.16.0"
    required_by: str          # e.g. "thub-plugin-pinned 0.1.0"
    installed: str | None     # version installed now
    planned: str              # version the install would bring
    brought_by: list[str]     # e.g. ["thub-plugin-newsix: six>=1.17"]
    plugin: str               # the thub plugin whose requirements break

    def message(self) -> str:
        why = f" (required by {', '.join(self.brought_by)})" if self.brought_by else ""
        now = f" (now {self.installed})" if self.installed else ""
        via = "" if self.required_by.split()[0] == self.plugin else f", needed by {self.plugin}"
        return (f"{self.requirement} is required by {self.required_by}{via}, "
                f"but the install would bring {canonicalize_name(Requirement(self.requirement).name)} "
                f"{self.planned}{now}{why}")


@dataclass
class DistInfo:
    """The parts of an installed or planned distribution the check needs."""

    name: str
    version: str
    requires: list[str]
    plugin: bool = False


def installed_distributions() -> dict[str, DistInfo]:
    """Distributions of the current environment, keyed by canonical name."""
    found: dict[str, DistInfo] = {}
    for dist in metadata.distributions():
        raw = dist.metadata.get("Name")  # type: ignore[attr-defined]  # .get: typed in 3.12+ stubs only
        if not raw:
            continue
        key = canonicalize_name(raw)
        if key in found:
            continue
        plugin = any(ep.group == "thub" for ep in dist.entry_points) or key == "thub"
        found[key] = DistInfo(raw, dist.version, list(dist.requires or []), plugin)
    return found


def _requirements_in_use(dist: DistInfo, state: dict[str, DistInfo]) -> list[Requirement]:
    """Base requirements plus those of every extra whose requirements are all installed."""
    base: list[Requirement] = []
    extras: dict[str, list[Requirement]] = {}
    for text in dist.requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None:
            base.append(req)
            continue
        if req.marker.evaluate({"extra": ""}):
            base.append(req)
            continue
        for extra in _extras_of(req):
            if req.marker.evaluate({"extra": extra}):
                extras.setdefault(extra, []).append(req)
    for reqs in extras.values():
        if all(_satisfied(r, state) for r in reqs):
            base.extend(reqs)
    return base


def _extras_of(req: Requirement) -> list[str]:
    import re

    return re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", str(req.marker))


def _satisfied(req: Requirement, state: dict[str, DistInfo]) -> bool:
    have = state.get(canonicalize_name(req.name))
    return have is not None and (not req.specifier or req.specifier.contains(have.version, prereleases=True))


def find_conflicts(installed: dict[str, DistInfo], planned: dict[str, DistInfo]) -> list[Conflict]:
    """Requirements of installed thub plugins (and everything they need) that ``planned`` breaks.

    ``planned`` holds what the resolver would install or replace (pip's ``--report``). Only
    requirements satisfied now and unsatisfied afterwards count: the install must not break
    what works.
    """
    after = {**installed, **planned}
    conflicts: list[Conflict] = []
    for plugin in sorted(k for k, d in installed.items() if d.plugin and k not in planned):
        seen: set[str] = set()
        todo = [plugin]
        while todo:
            key = todo.pop()
            if key in seen or key not in installed or key in planned:
                continue
            seen.add(key)
            dist = installed[key]
            for req in _requirements_in_use(dist, installed):
                dep = canonicalize_name(req.name)
                todo.append(dep)
                if dep not in planned or not _satisfied(req, installed) or _satisfied(req, after):
                    continue
                brought = [f"{p.name}: {r}" for p in planned.values() for r in p.requires
                           if _names(r) == dep and "extra ==" not in r]
                conflicts.append(Conflict(str(req), f"{dist.name} {dist.version}",
                                          installed[dep].version if dep in installed else None,
                                          planned[dep].version, brought, installed[plugin].name))
    unique = {(c.requirement, c.required_by): c for c in conflicts}
    return list(unique.values())


def _names(text: str) -> str | None:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return None


def resolve_report(python: str, args: list[str], constraints: Path | None = None,
                   ignore_installed: bool = False, timeout: float = 600) -> dict[str, Any]:
    """pip's ``install --dry-run --report`` for ``args`` into ``python``'s environment."""
    cmd = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-"]
    if ignore_installed:
        cmd.append("--ignore-installed")
    if constraints:
        cmd += ["-c", str(constraints)]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip() and "is ignored" not in line]
        raise RuntimeError("the resolver dry run failed:\n" + "\n".join(lines[-15:]))
    return json.loads(done.stdout)


def planned_from_report(report: dict[str, Any]) -> dict[str, DistInfo]:
    """What a pip report would install, keyed by canonical name."""
    planned: dict[str, DistInfo] = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        planned[canonicalize_name(meta["name"])] = DistInfo(meta["name"], meta["version"],
                                                           list(meta.get("requires_dist") or []))
    return planned


def cuda_packages(planned: dict[str, DistInfo]) -> list[str]:
    """Planned distributions that mean a CUDA install (nvidia-*, cuda-*, triton, a non-CPU torch)."""
    found = []
    for key, dist in sorted(planned.items()):
        if key.startswith(("nvidia-", "cuda-")) or key in ("triton", "cupy-cuda12x", "cupy-cuda13x"):
            found.append(f"{dist.name} {dist.version}")
        elif key == "torch" and not dist.version.endswith("+cpu") and _torch_wants_cuda(dist):
            found.append(f"{dist.name} {dist.version} (CUDA build)")
    return found


def _torch_wants_cuda(dist: DistInfo) -> bool:
    return any(_names(r) and _names(r).startswith(("nvidia-", "cuda-")) for r in dist.requires)  # type: ignore[union-attr]


def check_current(sources: list[Source], plan: Plan) -> tuple[list[Conflict], dict[str, DistInfo]]:
    """Resolver dry run of ``sources`` into the current environment, and what it would break."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="thub-check-") as tmp:
        constraints: Path | None = None
        if plan.torch:
            constraints = Path(tmp) / CONSTRAINTS_NAME
            constraints.write_text(plan.torch + "\n")
        report = resolve_report(plan.python, [s.argument() for s in sources], constraints)
    planned = planned_from_report(report)
    return find_conflicts(installed_distributions(), planned), planned
