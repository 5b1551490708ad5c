"""Whether installing a backend's missing requirements here would break what is installed.

``core.backend-requirements`` used to print one ``pip install`` of every missing pin, e.g.
``trl<=1.15`` for unsloth next to the trl backend that needs ``trl>=1.16``: following it breaks a
working backend. A pin conflicts when the installed version of its distribution satisfies some
other installed distribution (or installed backend) that the pin's range cannot satisfy together
with it. Then the fix is an environment of its own: ``thub install BACKEND --into managed``.
Metadata only (each distribution's read once per process: :mod:`thub.installed`); nothing is
imported, no resolver runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from thub import installed
from thub.specs import BackendSpec


def _candidates(spec: SpecifierSet) -> set[Version]:
    """Versions at and just around every bound of ``spec`` (enough to find a common version)."""
    found: set[Version] = set()
    for clause in spec:
        text = clause.version.removesuffix(".*")
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        release = list(version.release)
        bumped = ".".join(map(str, [*release[:-1], release[-1] + 1]))
        found.update({version, Version(f"{text}.1"), Version(bumped)})
    return found


def compatible(a: SpecifierSet, b: SpecifierSet) -> bool:
    """Whether some version satisfies both ranges (checked at their bounds)."""
    if not str(a) or not str(b):
        return True
    both = a & b
    return any(both.contains(v, prereleases=True) for v in _candidates(a) | _candidates(b))


# required name -> (canonical owner, "owner version", range) for each installed requirement of it
Needs = dict[str, list[tuple[str, str, SpecifierSet]]]


def installed_needs() -> Needs:
    """Every versioned requirement of the installed distributions (markers applied), by the
    canonical name it requires; built once per installed set (:func:`thub.installed.derived`),
    for any number of pins and checks. Read-only."""
    return installed.derived(_installed_needs)


def _installed_needs() -> Needs:
    needs: Needs = {}
    for dist in installed.distributions():
        owner = dist.name
        for text in dist.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if not str(req.specifier):
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            needs.setdefault(canonicalize_name(req.name), []).append(
                (canonicalize_name(owner), f"{owner} {dist.version}", req.specifier))
    return needs


def contradiction(text: str, skip: Iterable[str] = (), others: Iterable[BackendSpec] = (),
                  installed_by_name: Needs | None = None) -> str | None:
    """Why installing requirement ``text`` here would break what is installed, or None.

    It would when the installed version of its distribution satisfies an installed
    distribution (not in ``skip``) or a backend of ``others`` that no version in the
    requirement's range can satisfy too. ``installed_by_name`` is :func:`installed_needs`,
    read once by a caller that asks about several requirements.
    """
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    name = canonicalize_name(req.name)
    current = installed.version(req.name)
    skipped = {canonicalize_name(s) for s in skip} | {name}
    if installed_by_name is None:
        installed_by_name = installed_needs()
    needs = [(who, wanted) for owner, who, wanted in installed_by_name.get(name, []) if owner not in skipped]
    for other in others:
        for pin in other.requirements:
            try:
                theirs = Requirement(pin)
            except InvalidRequirement:
                continue
            if canonicalize_name(theirs.name) == name and str(theirs.specifier):
                needs.append((f"backend {other.name}", theirs.specifier))
    for who, wanted in needs:
        if current is not None and not wanted.contains(current, prereleases=True):
            continue  # already unsatisfied: not something this install would break
        if not compatible(req.specifier, wanted):
            return f"installed {req.name} {current or '-'} is what {who} needs: {wanted}"
    return None


def conflicting_pins(backend: BackendSpec, specs: Iterable[str], others: Iterable[BackendSpec]) -> list[str]:
    """The pins of ``specs`` that contradict what installed distributions or ``others`` need.

    ``others`` are the backends that work in this environment; their requirements count as
    installed needs even when their plugin was installed without dependencies.
    """
    others = list(others)
    skip = [backend.provenance.distribution or ""]
    needs = installed_needs()
    return [f"{text} ({why})" for text in specs if (why := contradiction(text, skip, others, needs))]


def owner_install(distribution: str, into: str = "managed") -> str:
    """The ``thub install`` command for a plugin distribution (catalog name when known, its
    library extras included: see :meth:`thub.envs.catalog.PluginEntry.install_command`)."""
    from thub.envs.catalog import CATALOG
    from thub.selection import cuda_visible

    entry = next((e for e in CATALOG.values() if canonicalize_name(e.distribution) == canonicalize_name(distribution)),
                 None)
    if entry is not None:
        return entry.install_command(into=into, gpu=cuda_visible())
    return f"thub install --package {distribution} --into {into}"


def managed_install(backend: BackendSpec) -> str:
    """``thub install NAME --into managed ...`` for ``backend``: its own install hint when that is
    such a line (one command per problem: the backend's other checks print the same), else the
    catalog's command for this machine, else one for its distribution."""
    from thub.envs.catalog import catalog_entry
    from thub.selection import cuda_visible

    hint = (backend.install or "").split("#")[0].strip()
    if hint.startswith("thub install ") and "--into managed" in hint and "\n" not in hint:
        return hint
    entry = catalog_entry(backend.name)
    if entry is not None:
        return entry.install_command(into="managed", gpu=cuda_visible())
    if backend.provenance.distribution:
        return owner_install(backend.provenance.distribution)
    return (f"# install backend {backend.name}'s plugin into an environment of its own: "
            "thub install PLUGIN --into managed")
