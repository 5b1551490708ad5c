"""Tracker problems found before a launch: a missing package, and each tracker's own checks
(``TrackerSpec.problems``: an unusable log directory or store, a server that does not answer, no
credentials).

``thub train`` calls :func:`validate` after resolving (a problem is a usage error, exit 2, with the
fix; nothing is written), and ``thub doctor`` runs :func:`check` as ``core.trackers`` (on a run's
config file with ``--config``: the same :func:`problems`). A package
is looked for where the tracker is logged: in the backend's interpreter when its library logs
(a managed environment: that interpreter, in a subprocess), in thub's own when thub logs from the
parent. Nothing is imported here: packages are found with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.specs import TrackerProblem, load_object
from thub.trackers import Tracker, enabled, route, tracker_params, trackers

if TYPE_CHECKING:
    from thub.config.resolve import ResolvedConfig
    from thub.specs import BackendSpec, CheckContext, CheckResult

HTTP_TIMEOUT = 5.0
_OFF = {"offline", "disabled", "dryrun"}


#: one reason a tracker would fail, and the fix (what ``TrackerSpec.problems`` returns)
Problem = TrackerProblem


def _python(backend: BackendSpec | None, where: str) -> str | None:
    """The interpreter whose packages log the tracker (None: this one)."""
    return backend.python if backend is not None and where == "library" and backend.python else None


def find_module(module: str, python: str | None) -> str | None:
    """The file of ``module`` (its ``__init__``) in ``python``'s environment, or None (the one
    check of another interpreter's modules: :func:`thub.selection.module_origin`)."""
    from thub.selection import module_origin

    return module_origin(module, python, timeout=20)


def pip(python: str | None, install: str) -> str:
    """``install`` run with ``python``'s pip (None: as written)."""
    return install if python is None else install.replace("pip install", f"{python} -m pip install", 1)


def writable_dir(path: Path) -> str | None:
    """Why ``path`` cannot be a directory we write to, or None when it can (created or not)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def problems(params: Mapping[str, Any], backend: BackendSpec | None, algorithm: str | None,
             environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Everything that would make an enabled tracker fail for a run with ``params``."""
    environ = os.environ if environ is None else environ
    found: list[Problem] = []
    for tracker in enabled(params):
        where = _where(backend, algorithm, tracker)
        python = _python(backend, where)
        if tracker.module and find_module(tracker.module, python) is None:
            place = f"the {backend.name} environment ({python})" if python and backend else "this environment"
            found.append(Problem(tracker.name, f"{tracker.title} is on ({tracker.key}) but the {tracker.module} "
                                 f"package is not installed in {place}", pip(python, tracker.install)))
            continue
        if tracker.problems:
            found.extend(load_object(tracker.problems)(params, python, environ))
    return found


def _where(backend: BackendSpec | None, algorithm: str | None, tracker: Tracker) -> str:
    if backend is None:
        return "thub"
    if algorithm is not None:
        return route(backend, algorithm, tracker)
    return "library" if any(route(backend, a, tracker) == "library" for a in backend.algorithms) else "thub"


def validate(resolved: ResolvedConfig) -> None:
    """Refuse a launch whose trackers would fail (UsageError, exit 2), naming each fix."""
    from thub.errors import UsageError

    found = problems(resolved.values(), resolved.backend, resolved.algorithm.name)
    if found:
        lines = []
        for problem in found:
            lines.append(f"  {problem.summary}")
            lines.extend(f"    fix: {line}" if i == 0 else f"         {line}"
                         for i, line in enumerate(problem.fix.splitlines()))
        raise UsageError("experiment tracker not ready (details: `thub doctor --backend "
                         f"{resolved.backend.name} core.trackers`):\n" + "\n".join(lines))


def env_params(environ: Mapping[str, str]) -> dict[str, str]:
    """Tracker parameters set as ``THUB_<NAME>`` variables (what ``thub doctor`` can see)."""
    return {name: environ[f"THUB_{name.upper()}"] for name in sorted(tracker_params())
            if environ.get(f"THUB_{name.upper()}")}


def _config_params(context: CheckContext, backend: BackendSpec | None
                   ) -> tuple[dict[str, Any], BackendSpec | None, str | None]:
    """The parameters of ``thub doctor --config FILE``, its backend and algorithm: resolved as
    ``thub train`` resolves them when the file names its algorithm, else the file's tracker
    parameters over ``THUB_*`` variables (the routes then hold for every algorithm of the backend)."""
    from thub.config.resolve import read_config_file, resolve
    from thub.errors import UsageError
    from thub.manager import get_registry

    assert context.config is not None
    values = read_config_file(context.config).values
    if values.get("algorithm"):
        try:
            resolved = resolve(get_registry(), str(values["algorithm"]), backend=context.backend,
                               config_file=context.config, environ=context.env)
            return resolved.values(), resolved.backend, resolved.algorithm.name
        except UsageError:
            pass  # another parameter is wrong (`thub train` names it); the trackers are still checked
    params = {**env_params(context.env), **{k: v for k, v in values.items() if k in tracker_params() and v}}
    params["ckpt_output_dir"] = str(values.get("ckpt_output_dir") or context.output_dir or ".")
    return params, backend, None


def check(context: CheckContext) -> CheckResult:
    """``core.trackers``: the tracker packages here and whether the trackers a run turns on would
    work, with the same checks as ``thub train``: those of the config file (``thub doctor
    --config FILE``), else those turned on by ``THUB_*`` variables."""
    from thub.selection import installed_version
    from thub.specs import CheckResult

    backend = None
    if context.backend:
        from thub.manager import get_registry

        backend = get_registry().backends.get(context.backend)
    algorithm = None
    if context.config:
        params, backend, algorithm = _config_params(context, backend)
    else:
        params = {**env_params(context.env), "ckpt_output_dir": context.output_dir or "."}
    details = []
    for tracker in trackers():
        where = _where(backend, algorithm, tracker)
        python = _python(backend, where)
        version = next((f"{d} {v}" for d in tracker.distributions if (v := installed_version(d))), None)
        state = (f"{version}" if version else "not installed") if python is None else (
            "installed" if not tracker.module or find_module(tracker.module, python) else "not installed"
        ) + f" in {python}"
        via = f"{backend.name}'s library" if backend and where == "library" else "thub (parent process)"
        details.append(f"{tracker.title}: {state}; logged by {via}")
    found = problems(params, backend, algorithm, context.env)
    if found:
        return CheckResult("fail", "; ".join(p.summary for p in found), tuple(details),
                           fix="\n".join(p.fix for p in found), docs="docs/trackers.md")
    on = [t.title for t in enabled(params)]
    source = "the config file" if context.config else "THUB_* variables"
    summary = f"{', '.join(on)} ready" if on else f"no tracker turned on by {source}"
    return CheckResult("ok", summary, tuple(details))
