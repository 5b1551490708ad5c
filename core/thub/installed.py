"""The installed distributions' metadata, read once per process while the installed set stays the same.

``importlib.metadata`` parses a distribution's METADATA file again on every ``version()``,
``.requires`` or ``.metadata`` access. ``thub doctor`` asks about every pin of every backend
against every installed requirement: ~1,700 parses, seconds on a busy machine. Here each
distribution is parsed once and the result kept until the installed set changes: an install,
upgrade or removal (``thub install`` can run in-process) creates or deletes a ``.dist-info``
folder, which moves the modification time of its ``sys.path`` entry; only then is that entry
listed again, and only a new or changed ``.dist-info`` folder parsed.

Nothing heavy is imported at module level: ``thub --help`` imports this through
:mod:`thub.selection`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from thub.discovery import distribution_folders, mtime

if TYPE_CHECKING:
    from importlib.metadata import Distribution

T = TypeVar("T")


@dataclass(frozen=True)
class InstalledDist:
    """One installed distribution, parsed once."""

    name: str  #: as its metadata spells it
    key: str  #: canonical name (PEP 503)
    version: str
    requires: tuple[str, ...]  #: Requires-Dist lines (requires.txt for an egg), markers included
    extras: tuple[str, ...]  #: Provides-Extra
    distribution: Distribution  #: for its files; reading its ``.metadata`` parses again


_lock = threading.RLock()  # doctor runs checks in threads: one of them reads, the others wait
_entries: dict[str, tuple[int | None, list[list[Any]]]] = {}  # sys.path entry -> (mtime, its distributions)
_path: list[str] = []  # sys.path when _entries was taken
_parsed: dict[tuple[str, int | None], InstalledDist] = {}  # (.dist-info folder, its mtime) -> parsed
_all: tuple[InstalledDist, ...] | None = None
_first: dict[str, InstalledDist] = {}
_derived: dict[Callable[[], Any], Any] = {}


def _changed() -> bool:
    """Whether a distribution appeared, went or changed on ``sys.path`` since the last look.

    One ``stat`` per ``sys.path`` entry; only an entry whose modification time moved is listed
    again (a busy folder on the path, the working directory or /tmp, is not a reinstall)."""
    changed = sys.path != _path
    if changed:
        _path[:] = sys.path
    for entry in sys.path:
        stamp = mtime(entry or ".")
        known = _entries.get(entry)
        if known is not None and known[0] == stamp:
            continue
        listing = distribution_folders(entry)
        changed = changed or known is None or known[1] != listing
        _entries[entry] = (stamp, listing)
    return changed


def parsed(dist: Distribution) -> InstalledDist | None:
    """``dist`` parsed, or the earlier parse of the same unchanged ``.dist-info`` folder."""
    from packaging.utils import canonicalize_name

    folder = getattr(dist, "_path", None)  # a PathDistribution's .dist-info/.egg-info folder
    key = (str(folder), mtime(str(folder))) if folder is not None else None
    with _lock:
        if key is not None and key in _parsed:
            return _parsed[key]
    meta = dist.metadata  # the one parse of this distribution
    name = meta["Name"] if meta is not None else None
    if not name:
        return None  # a broken .dist-info without metadata
    requires = meta.get_all("Requires-Dist")
    if requires is None and dist.read_text("requires.txt") is not None:
        requires = dist.requires  # an egg-info: its requirements live in requires.txt
    found = InstalledDist(name, canonicalize_name(name), meta["Version"] or "", tuple(requires or ()),
                          tuple(meta.get_all("Provides-Extra") or ()), dist)
    with _lock:
        if key is not None:
            _parsed[key] = found
    return found


def _refresh() -> tuple[tuple[InstalledDist, ...], dict[str, InstalledDist]]:
    """The cached distributions, listed again first when the installed set changed."""
    global _all, _first
    with _lock:
        if _changed() or _all is None:
            from importlib import metadata

            found = tuple(d for dist in metadata.distributions() if (d := parsed(dist)) is not None)
            first: dict[str, InstalledDist] = {}
            for dist in found:
                first.setdefault(dist.key, dist)  # sys.path order: the one imports (and pip) see
            _all, _first = found, first
            _derived.clear()
        return _all, _first


def distributions() -> tuple[InstalledDist, ...]:
    """Every distribution on ``sys.path``, in path order (a duplicate name appears twice)."""
    return _refresh()[0]


def distribution(name: str) -> InstalledDist | None:
    """The distribution ``name`` resolves to (first on ``sys.path``), or None when not installed."""
    from packaging.utils import canonicalize_name

    return _refresh()[1].get(canonicalize_name(name))


def version(name: str) -> str | None:
    """The installed version of ``name``, or None when it is not installed."""
    found = distribution(name)
    return found.version if found else None


def derived(compute: Callable[[], T]) -> T:
    """``compute()``'s result, computed once per installed set (for tables built from all of
    the metadata, e.g. every installed requirement by name). Treat the result as read-only."""
    with _lock:
        _refresh()
        if compute not in _derived:
            _derived[compute] = compute()  # from the parsed metadata: no file is read again
        return _derived[compute]  # type: ignore[no-any-return]
