"""A Hugging Face dataset name as training data (``data_path: org/name``), as Training Hub reads it.

Training Hub 0.11.2 (``training_hub.utils.load_training_dataset``) passes a ``data_path`` that is
not a local file to ``datasets.load_dataset(data_path, split="train")``; thub does the same, with
no other form (no ``:split`` suffix, no configuration name): a dataset id ``namespace/name``, its
``train`` split.

Offline safety: ``datasets`` retries an unreachable Hub for about half a minute per dataset before
it gives up. One quick probe (a HEAD request, a few seconds at most, once per process) decides
instead; offline mode is then set while the dataset is loaded, so a cached copy (the local
``datasets`` cache, ``HF_DATASETS_CACHE`` or ``HF_HOME/datasets``) loads at once and a missing one
fails at once with a clear error (exit 2) naming the dataset, the cache and how to export it to a
local file. The helpers here (:func:`offline_by_choice`, :func:`probe`, :func:`offline_mode`) are
the ones thub-plugin-lmeval's ``hub`` module keeps for its named tasks, in core for every user.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from thub.errors import UsageError

PROBE_TIMEOUT = 5.0  # seconds for the one HEAD request
_TRUE = ("1", "true", "yes", "on")
_FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
#: ``namespace/name`` (huggingface_hub's repo id rule: word characters, ``-`` and ``.``, no
#: ``--`` or ``..``, a part never starting or ending with ``-`` or ``.``). A bare ``name`` is not
#: taken for a dataset: a missing local file named ``train`` is far likelier than a canonical
#: dataset without a namespace.
_DATASET_ID = re.compile(r"^[\w\-.]{1,96}/[\w\-.]{1,96}$")


def is_dataset_id(value: str) -> bool:
    """Whether ``value`` has the form of a Hub dataset id ``namespace/name``."""
    if not _DATASET_ID.match(value) or "--" in value or ".." in value:
        return False
    return not any(part.startswith(("-", ".")) or part.endswith(("-", ".")) for part in value.split("/"))


def endpoint() -> str:
    """The Hub's address (``HF_ENDPOINT`` as the libraries read it)."""
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


@functools.lru_cache(maxsize=4)
def _probe_once(address: str) -> str | None:
    # once per process and endpoint: the data is read several times before a run (the chat
    # template check, the data check), each would otherwise wait for an unreachable Hub again
    return probe()


def hub_unreachable() -> str | None:
    """Why the Hub is not to be asked (an offline variable, or the probe's reason); None: online."""
    return offline_by_choice() or _probe_once(endpoint())


def cache_home() -> str:
    """``HF_HOME`` as the libraries resolve it, for messages."""
    if os.environ.get("HF_HOME"):
        return os.environ["HF_HOME"]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "huggingface")


def datasets_cache() -> str:
    """Where ``datasets`` keeps prepared datasets (``HF_DATASETS_CACHE`` > ``HF_HOME/datasets``)."""
    return os.environ.get("HF_DATASETS_CACHE") or str(Path(cache_home()) / "datasets")


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


def export_hint(name: str) -> str:
    """How to turn the dataset into a local file, on a machine where the Hub is reachable."""
    stem = name.split("/")[-1]
    return (f"python -c \"import datasets; datasets.load_dataset('{name}', split='train')"
            f".to_json('{stem}.jsonl')\" and give data_path={stem}.jsonl")


def load_hub_dataset(name: str) -> Any:
    """``datasets.load_dataset(name, split="train")``, offline when the Hub is unreachable.

    Raises :class:`UsageError` (exit 2) for a dataset that is neither reachable nor cached, one
    the Hub does not have, and one without a ``train`` split.
    """
    reason = hub_unreachable()
    import datasets  # lazy: heavy, only for Hub datasets

    verbosity = datasets.logging.get_verbosity()
    if reason is not None:  # "Using the latest cached version ... (offline mode is enabled)": we set it
        datasets.logging.set_verbosity_error()
    with offline_mode(reason):
        try:
            return datasets.load_dataset(name, split="train")
        except ValueError as exc:
            if str(exc).startswith("Unknown split"):  # datasets: 'Unknown split "train". Should be one of [...]'
                raise UsageError(f"{name}: split: expected a 'train' split (the one Training Hub trains "
                                 f"on): {_first_line(exc)}") from None
            raise _not_read(name, reason, exc) from None
        except Exception as exc:  # noqa: BLE001 - ConnectionError, FileNotFoundError, DatasetNotFoundError, HTTP
            raise _not_read(name, reason, exc) from None
        finally:
            datasets.logging.set_verbosity(verbosity)


def _not_read(name: str, reason: str | None, exc: BaseException) -> UsageError:
    local = f"{name}: no such local file or directory, and"
    if reason is not None:
        state = "set offline" if reason.endswith("=1") else "unreachable"
        # datasets says "not cached" with these; anything else (several cached configurations, a
        # damaged cache) is its own message
        missing = isinstance(exc, (ConnectionError, FileNotFoundError))  # DatasetNotFoundError is one too
        found = "is not in" if missing else f"could not be read from ({_first_line(exc)})"
        return UsageError(
            f"{local} the Hugging Face dataset {name!r} {found} the local datasets cache "
            f"({datasets_cache()}) while the Hub is {state} ({reason}); where the network is (same HF_HOME), "
            f"load it once, or export it to a local file: {export_hint(name)}")
    return UsageError(f"{local} the Hugging Face Hub could not serve the dataset {name!r} ({_first_line(exc)}); "
                      f"check the name and your access (hf auth login), or export it to a local file: "
                      f"{export_hint(name)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def identity(name: str) -> str:
    """What identifies the dataset's ``train`` split as it would be read now, for cache keys: its
    cache files (their folder names the Hub revision) and row count."""
    loaded = load_hub_dataset(name)
    files = sorted(str(item.get("filename", "")) for item in loaded.cache_files)
    return f"{name}\0{loaded.num_rows}\0" + "\0".join(files)


def iter_hub(name: str) -> Iterator[tuple[str, Any]]:
    """``(location, record)`` for each row of the dataset's ``train`` split; locations are
    ``org/name:row N`` (1-based), as for a saved dataset."""
    loaded = load_hub_dataset(name)
    for row, record in enumerate(loaded, start=1):
        yield f"{name}:row {row}", record
