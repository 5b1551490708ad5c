"""Runs *inside* a managed environment: ``python -m thub.envs.describe describe|translate|check_rows``.

``describe`` prints, as JSON, what the environment provides: thub's version, the interpreter
and site-packages, every plugin with its distribution and version, and every backend spec with
the installed versions of its requirements. ``thub install`` writes this into the manifest.

``translate`` reads ``{"algorithm", "backend", "params"}`` as JSON on stdin and prints the
backend-native configuration that the environment's plugins produce (``thub train --dry-run``
for a backend that lives only in a managed environment). ``check_rows`` reads ``{"algorithm",
"backend", "rows", "locations", "params"}`` and runs the backend's row check
(``BackendSpec.check_rows``). A :class:`~thub.errors.UsageError` of either is answered as
``{"usage_error": message}`` with exit code 2, so that the parent raises it as bad input. All
import the plugins' registration modules, never a training library.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from importlib import metadata
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement


def _installed(specifier: str) -> tuple[str, str | None]:
    try:
        name = Requirement(specifier).name
    except InvalidRequirement:
        return specifier, None
    try:
        return name, metadata.version(name)
    except metadata.PackageNotFoundError:
        return name, None


def describe() -> dict[str, Any]:
    """What this environment provides (the manifest's content, less install details)."""
    from thub._version import __version__
    from thub.manager import load_registry

    registry = load_registry()
    backends = []
    for spec in sorted(registry.backends.values(), key=lambda b: b.name):
        installed = dict(_installed(r) for r in spec.requirements)
        library = next(iter(installed), None)
        backends.append({
            "name": spec.name,
            "summary": spec.summary,
            "algorithms": {alg: sorted(params) for alg, params in spec.algorithms.items()},
            "runner": spec.runner,
            "check_rows": spec.check_rows,
            "tracker_params_alone": sorted(spec.tracker_params_alone),
            "requirements": list(spec.requirements),
            "installed": installed,
            "library": {"name": library, "version": installed.get(library) if library else None},
            "needs_cuda": spec.needs_cuda,
            "priority": spec.priority,
            "defaults": {alg: dict(values) for alg, values in spec.defaults.items()},
            "launcher": spec.launcher,
            "docs": spec.docs,
            "plugin": spec.provenance.plugin,
            "distribution": spec.provenance.distribution,
            "version": spec.provenance.version,
        })
    return {
        "thub": {"version": __version__},
        "python": sys.executable,
        "python_version": sys.version.split()[0],
        "site_packages": sysconfig.get_paths()["purelib"],
        "plugins": [
            {"name": p.name, "distribution": p.distribution, "version": p.version}
            for p in registry.plugins.values() if not p.builtin
        ],
        "backends": backends,
        "failures": [f"{f.name} ({f.distribution}) at {f.stage}: {f.error}" for f in registry.failures],
    }


def translate(request: dict[str, Any]) -> Any:
    """The translation this environment's plugins give for one parameter set."""
    from thub.manager import load_registry

    registry = load_registry()
    return registry.translate(request["algorithm"], request["backend"], request["params"])


def check_rows(request: dict[str, Any]) -> None:
    """This environment's backend row check over one run's validated rows."""
    from thub.manager import load_registry

    load_registry().check_rows(request["algorithm"], request["backend"], request["rows"], request["locations"],
                               request["params"])


def main(argv: list[str]) -> int:
    from thub.errors import UsageError

    if argv[:1] == ["describe"]:
        print(json.dumps(describe(), default=str))
        return 0
    answers = {"translate": translate, "check_rows": check_rows}
    if argv[:1] and argv[0] in answers:
        try:
            print(json.dumps(answers[argv[0]](json.loads(sys.stdin.read())), default=str))
        except UsageError as refused:  # bad input: the parent's exit 2, not a failed environment
            print(json.dumps({"usage_error": str(refused)}))
            return 2
        return 0
    print("usage: python -m thub.envs.describe describe|translate|check_rows", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
