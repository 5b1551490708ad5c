"""Offline safety: a named task's dataset is read from the local cache when the Hugging Face Hub is
unreachable, and a dataset that is not there is a clear error naming the task and its data.

``datasets`` retries an unreachable Hub for about half a minute per dataset before it gives up; one
quick probe (a HEAD request, a few seconds at most) decides instead, and offline mode is then set
for the evaluation so a cached dataset loads at once and a missing one fails at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from thub.errors import UsageError

PROBE_TIMEOUT = 5.0  # seconds for the one HEAD request
_TRUE = ("1", "true", "yes", "on")
_FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def offline_by_choice() -> str | None:
    """The variable that already puts the Hub offline (``HF_HUB_OFFLINE=1``), or None."""
    for name in (*_FLAGS, "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return f"{name}=1"
    return None


def probe() -> str | None:
    """Why the Hub cannot be reached (None: it answered, whatever the HTTP status)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(endpoint() + "/api/datasets", method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=PROBE_TIMEOUT).close()  # noqa: S310 - the HF endpoint
    except urllib.error.HTTPError:
        return None  # it answered
    except Exception as exc:  # noqa: BLE001 - DNS, refused, timeout, TLS: all "unreachable"
        reason = getattr(exc, "reason", exc)
        return str(reason).splitlines()[0][:160] or type(exc).__name__
    return None


def cache_home() -> str:
    """``HF_HOME`` as the libraries resolve it, for messages."""
    if os.environ.get("HF_HOME"):
        return os.environ["HF_HOME"]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "huggingface")


@contextmanager
def offline_mode(reason: str | None) -> Iterator[None]:
    """Within: the Hub is offline for huggingface_hub and datasets (when ``reason`` is set),
    restored after. Already imported modules read their module-level flags at call time, so
    those are set too, not only the environment."""
    if reason is None:
        yield
        return
    saved_env = {name: os.environ.get(name) for name in _FLAGS}
    saved_attrs: list[tuple[object, str, object]] = []
    for module, names in (("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
                          ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))):
        loaded = sys.modules.get(module)
        for name in names:
            if loaded is not None and hasattr(loaded, name):
                saved_attrs.append((loaded, name, getattr(loaded, name)))
                setattr(loaded, name, True)
    os.environ.update({name: "1" for name in _FLAGS})
    try:
        yield
    finally:
        for obj, name, value in saved_attrs:
            setattr(obj, name, value)
        for name, env_value in saved_env.items():
            if env_value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = env_value


def missing_dataset(task: str, dataset: str, reason: str) -> UsageError:
    """The error for a named task whose data is neither reachable nor cached."""
    state = "set offline" if reason.endswith("=1") else "unreachable"
    return UsageError(
        f"{task} reads {dataset} from the Hugging Face Hub, which is {state} ({reason}) and not in the "
        f"local cache (HF_HOME={cache_home()}); download it where the network is (same HF_HOME), "
        "or give a local task file (.jsonl prompts/answers or a harness .yaml)")
