"""Finding plugins without paying for it on every start.

``importlib.metadata.entry_points()`` imports ``email``/``zipfile`` and reads every installed
distribution's metadata: ~0.05-0.12 s, more than the whole of ``thub --help``
(docs/performance.md). What it finds only changes when distributions change, so the ``thub``
entry points (and the plugin commands, see :mod:`thub.cli.plugin_commands`) are cached in
``$XDG_CACHE_HOME/thub/`` (``~/.cache/thub``) under a fingerprint of where plugins come from:
the Python version, the distribution folders (``*.dist-info``/``*.egg-info``) of every
``sys.path`` entry with their modification times (installing, upgrading or removing a
distribution changes them), the folder thub itself is loaded from, and
``THUB_PLUGINS``/``THUB_DISABLE_PLUGINS``. Computing it is one
directory listing per ``sys.path`` entry and one ``stat`` per distribution; nothing is read.
A stale or unreadable cache only costs one slow discovery, which rewrites it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

CACHE_VERSION = 1
GROUP = "thub"


def cache_dir() -> str:
    """thub's cache folder (not created)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "thub")


def distribution_folders(entry: str) -> list[list[Any]]:
    """``[name, mtime_ns]`` of each ``*.dist-info``/``*.egg-info`` folder of one ``sys.path`` entry, sorted."""
    found = []
    try:
        with os.scandir(entry or ".") as listing:
            for item in listing:
                if item.name.endswith((".dist-info", ".egg-info")):
                    found.append([item.name, item.stat().st_mtime_ns])
    except OSError:
        return []
    return sorted(found)


def fingerprint() -> str:
    """A digest of everything that decides which entry points exist (see the module doc)."""
    # entries without distributions (the script's folder, the working directory) cannot provide
    # plugins and are left out, so `thub` and `python -m thub` share one cache entry
    places = [[entry, found] for entry in sys.path if (found := distribution_folders(entry))]
    # where thub itself is loaded from: a second checkout first on PYTHONPATH (no distribution
    # folder there) has other built-in plugins and commands than the installed one
    parts = [CACHE_VERSION, sys.version, os.environ.get("THUB_PLUGINS"), os.environ.get("THUB_DISABLE_PLUGINS"),
             places, os.path.dirname(os.path.abspath(__file__))]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def mtime(path: str) -> int | None:
    """``path``'s modification time in nanoseconds, or None when it cannot be read."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def unchanged(files: dict[str, int | None]) -> bool:
    """Whether every file of ``files`` (path -> :func:`mtime` when a cache entry was written)
    still has that modification time: how both caches notice an edited plugin."""
    return all(mtime(path) == recorded for path, recorded in files.items())


def read_cache(name: str, key: str) -> Any | None:
    """The value stored under ``name`` if it was stored with ``key``, else None."""
    try:
        with open(os.path.join(cache_dir(), name), encoding="utf-8") as handle:
            data = json.load(handle)
        return data["value"] if data.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_cache(name: str, key: str, value: Any) -> None:
    """Store ``value`` atomically (a concurrent reader sees the old or the new file)."""
    from thub.fileio import write_text_atomic  # on a cache miss only: a warm start imports nothing more

    try:
        write_text_atomic(os.path.join(cache_dir(), name), json.dumps({"key": key, "value": value}), parents=True)
    except OSError:
        pass  # a read-only home only costs speed


@dataclass(frozen=True)
class PluginEntryPoint:
    """One ``thub`` entry point: what ``importlib.metadata.EntryPoint`` gives, minus its cost."""

    name: str
    value: str
    distribution: str | None
    version: str | None

    def load(self) -> Any:
        module_name, _, attribute = self.value.partition(":")
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def entry_points() -> list[PluginEntryPoint]:
    """Every installed ``thub`` entry point, from the cache when the environment is unchanged."""
    key = fingerprint()
    cached = read_cache("entry-points.json", key)
    if isinstance(cached, list):
        try:
            return [PluginEntryPoint(*item) for item in cached]
        except TypeError:
            pass
    from importlib import metadata

    from thub.installed import parsed  # each distribution's metadata is read once per process

    found = []
    for ep in metadata.entry_points(group=GROUP):
        dist = parsed(ep.dist) if ep.dist else None
        found.append(PluginEntryPoint(ep.name, ep.value, dist.name if dist else None, dist.version if dist else None))
    write_cache("entry-points.json", key, [[e.name, e.value, e.distribution, e.version] for e in found])
    return found
