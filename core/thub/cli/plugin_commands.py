"""The ``thub`` subcommands (``thub_register_commands``) for ``thub --help`` without loading any plugin.

Every command, the built-in ones included (``thub_builtins.commands``), is registered through
the hook as a :class:`~thub.specs.CommandSpec`: name, import string, short help. Knowing them
means importing every plugin, which costs more than the whole of ``thub --help``
(docs/performance.md). So they are cached with :mod:`thub.discovery` (same fingerprint of the
installed distributions), plus the modification times of the source files of the plugins that
could register commands. Any change means one slow listing that loads the registry (every hook
isolated, failures recorded for ``thub plugins``/``thub doctor``) and rewrites the cache.
"""

from __future__ import annotations

import sys
from typing import Any

from thub.discovery import fingerprint, mtime, read_cache, unchanged, write_cache

CACHE_NAME = "plugin-commands.json"


def _loaded_registry() -> Any | None:
    """The registry this process already loaded (tests, ``thub.api``), if any; imports nothing."""
    manager = sys.modules.get("thub.manager")
    return getattr(manager, "_registry", None) if manager is not None else None


def listing() -> dict[str, dict[str, str]]:
    """Command name -> ``{"target": import string, "short_help": ...}``, from the loaded
    registry, the cache, or a fresh load (which rewrites the cache)."""
    registry = _loaded_registry()
    if registry is not None:
        return _entries(registry)
    key = fingerprint()
    cached = read_cache(CACHE_NAME, key)
    try:
        if cached is not None and unchanged(cached["files"]):
            return {str(name): {"target": str(entry["target"]), "short_help": str(entry["short_help"]),
                                **({"group": str(entry["group"])} if entry.get("group") else {})}
                    for name, entry in cached["commands"].items()}
    except (KeyError, TypeError, AttributeError):
        pass  # unreadable or of an older layout: list afresh
    from thub.manager import get_registry

    registry = get_registry()
    found = _entries(registry)
    write_cache(CACHE_NAME, key, {"files": plugin_files(registry), "commands": found})
    return found


def _entries(registry: Any) -> dict[str, dict[str, str]]:
    return {name: {"target": spec.target, "short_help": spec.short_help,
                   **({"group": spec.group} if spec.group else {})} for name, spec in registry.commands.items()}


def plugin_files(registry: Any) -> dict[str, int | None]:
    """Source files of the external plugins and of the built-in ones that register commands:
    editing one (say, adding a command) invalidates."""
    files: dict[str, int | None] = {}
    for info in registry.plugins.values():
        if info.builtin and "thub_register_commands" not in info.hooks:
            continue
        plugin = registry.pm.get_plugin(info.name)
        path = getattr(plugin, "__file__", None) or getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
        if path:
            files[path] = mtime(path)
    return files
