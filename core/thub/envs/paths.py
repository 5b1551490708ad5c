"""Where thub keeps managed environments.

The data directory is ``$THUB_DATA_DIR`` if set, else ``$XDG_DATA_HOME/thub``, else
``~/.local/share/thub`` (the XDG default). Managed environments live in ``<data>/envs/<name>``,
each holding the virtual environment itself, ``thub-env.json`` (the manifest),
``requirements.lock`` (the exported lock) and ``install.log``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

MANIFEST_NAME = "thub-env.json"
LOCK_NAME = "requirements.lock"
LOG_NAME = "install.log"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def data_dir() -> Path:
    """thub's data directory (not created)."""
    explicit = os.environ.get("THUB_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "thub"


def envs_dir() -> Path:
    """The directory holding one folder per managed environment."""
    return data_dir() / "envs"


def env_dir(name: str) -> Path:
    """The folder of managed environment ``name`` (the name is validated)."""
    check_name(name)
    return envs_dir() / name


def check_name(name: str) -> str:
    """``name`` if it is a valid environment name, else ValueError."""
    if not _NAME.match(name) or name in (".", ".."):
        raise ValueError(f"invalid environment name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def interpreter(env: Path) -> Path:
    """The Python interpreter of the virtual environment at ``env``."""
    if sys.platform == "win32":  # pragma: no cover - thub targets Linux
        return env / "Scripts" / "python.exe"
    return env / "bin" / "python"
