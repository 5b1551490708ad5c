"""Plugin commands (``thub_register_commands``) for ``thub --help`` without loading any plugin.

Knowing which commands plugins add means importing every plugin, which costs more than the
whole of ``thub --help`` (docs/performance.md). So their names and short help are cached with
:mod:`thub.discovery` (same fingerprint of the installed distributions), plus the modification
times of the external plugins' source files. Any change means one slow listing that loads the
registry (every hook isolated, failures recorded for ``thub plugins``/``thub doctor``) and
rewrites the cache. Running a plugin command always loads the real registry.
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


def listing() -> dict[str, str]:
    """Plugin command name -> short help, from the loaded registry, the cache, or a fresh load."""
    registry = _loaded_registry()
    if registry is not None:
        return _short_helps(registry)
    key = fingerprint()
    cached = read_cache(CACHE_NAME, key)
    try:
        if cached is not None and unchanged(cached["files"]):
            return {str(name): str(text) for name, text in cached["commands"].items()}
    except (KeyError, TypeError, AttributeError):
        pass
    from thub.manager import get_registry

    registry = get_registry()
    found = _short_helps(registry)
    write_cache(CACHE_NAME, key, {"files": plugin_files(registry), "commands": found})
    return found


def _short_helps(registry: Any) -> dict[str, str]:
    return {name: command.get_short_help_str(limit=300) for name, command in registry.commands.items()}


def plugin_files(registry: Any) -> dict[str, int | None]:
    """Source files of the external plugins: editing one (say, adding a command) invalidates."""
    files: dict[str, int | None] = {}
    for info in registry.plugins.values():
        if info.builtin:
            continue
        plugin = registry.pm.get_plugin(info.name)
        path = getattr(plugin, "__file__", None) or getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
        if path:
            files[path] = mtime(path)
    return files
