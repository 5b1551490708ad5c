"""``model_path`` checked before anything is written or launched (exit 2, one clear line).

A training library given a mistyped local path takes it for a Hub id and retries for a minute;
a file, a directory without ``config.json`` or a tokenizer without a chat template fail only
after launch, leaving a run directory behind. :func:`check_model_path` finds these in the
parent, from metadata files only (no torch, no transformers):

* a value that exists must be a directory with ``config.json`` (or a PEFT adapter's
  ``adapter_config.json``);
* a value that does not exist and cannot be a Hub id (``./x``, ``/x``, ``~/x``, ``a/b/c``) is
  "no such model directory";
* a Hub id must be in the local Hugging Face cache when ``HF_HUB_OFFLINE=1``, or else the Hub
  must answer for its ``config.json`` (one HEAD request, ``huggingface_hub`` when installed);
* chat (and GRPO prompt) data needs a chat template: ``tokenizer_config.json``'s
  ``chat_template`` or a ``chat_template.jinja`` next to it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thub.errors import UsageError, did_you_mean_path

#: Hugging Face's repo id rule (huggingface_hub.utils.validate_repo_id): ``name`` or
#: ``namespace/name``, word characters, ``-`` and ``.``, no ``--`` or ``..``, at most 96 each.
_REPO_ID = re.compile(r"^(?:[\w\-.]{1,96}/)?[\w\-.]{1,96}$")
_TRUE = ("1", "true", "yes", "on")
HUB_TIMEOUT = 10.0  # seconds for the one HEAD request to the Hub


def _is_repo_id(value: str) -> bool:
    if not _REPO_ID.match(value) or "--" in value or ".." in value:
        return False
    return not any(part.startswith(("-", ".")) or part.endswith(("-", ".")) for part in value.split("/"))


def _offline(environ: Mapping[str, str]) -> bool:
    return any(environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where ``huggingface_hub`` keeps downloads, from the environment the child will get
    (``HF_HUB_CACHE`` > ``HF_HOME/hub`` > ``XDG_CACHE_HOME/huggingface/hub`` > ``~/.cache/...``)."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    base = Path(environ["XDG_CACHE_HOME"]).expanduser() if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def cached_snapshot(repo_id: str, environ: Mapping[str, str]) -> Path | None:
    """The cached snapshot of ``repo_id``'s main revision that holds ``config.json``, or None.

    The layout is huggingface_hub's documented cache: ``models--ORG--NAME/refs/main`` names the
    commit and ``snapshots/COMMIT/`` holds the files.
    """
    repo = hub_cache_dir(environ) / ("models--" + repo_id.replace("/", "--"))
    try:
        commit = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snapshot = repo / "snapshots" / commit
    return snapshot if (snapshot / "config.json").is_file() else None


def _probe_hub(repo_id: str, environ: Mapping[str, str]) -> str | None:
    """Why the Hub cannot serve ``repo_id``'s config.json (None: it can, or we cannot ask)."""
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
        )
    except ImportError:
        return None  # the child's environment has it; it will say what is wrong
    endpoint = (environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    token = environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN") or None
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json", endpoint=endpoint), token=token,
                             timeout=HUB_TIMEOUT, retry_on_errors=False)
    except GatedRepoError:
        return f"is gated on the Hub ({endpoint}): accept its terms and set HF_TOKEN"
    except RepositoryNotFoundError:
        return (f"no such model on the Hub ({endpoint}), and no such local directory "
                "(a private model needs HF_TOKEN)")
    except EntryNotFoundError:
        return f"has no config.json on the Hub ({endpoint}): not a transformers model"
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        return f"the Hub ({endpoint}) answered HTTP {status} for its config.json"
    except Exception as exc:  # noqa: BLE001 - connection refused, DNS, timeout, TLS: all "unreachable"
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return (f"the Hugging Face Hub ({endpoint}) is unreachable ({reason}) and the model is not in "
                f"the local cache ({hub_cache_dir(environ)})")
    return None


def has_chat_template(model_dir: Path) -> bool | None:
    """Whether the tokenizer files in ``model_dir`` define a chat template; None: no tokenizer
    files to judge by, or unreadable ones (the library decides)."""
    from thub.data.saved_template import has_tokenizer_files, read_chat_template

    if not has_tokenizer_files(model_dir):
        return None
    try:
        return read_chat_template(model_dir) is not None
    except (OSError, ValueError):
        return None


def _data_needs_template(params: Mapping[str, Any]) -> str | None:
    """The data kind of the run's data when its rows are rendered with the chat template (its
    ``DataKindSpec.chat_template``); None otherwise."""
    if params.get("is_pretraining"):
        return None
    from thub.data.kinds import detect_format, formats, uses_chat_template
    from thub.data.problems import Problems
    from thub.data.readers import iter_records
    from thub.data.training import training_sources

    known = formats()
    for source in training_sources(params):
        fmt = source.format
        if fmt == "auto":
            records = iter_records(source.path, Problems())
            try:
                first = next(records, None)  # (location, row): one row is enough to tell
            except Exception:  # noqa: BLE001 - unreadable data is the data check's business
                continue
            finally:
                records.close()
            row = first[1] if first else None
            fmt = detect_format(row)
        kind = known.kind_of(fmt)
        if kind and uses_chat_template([kind]):
            return kind
    return None


def check_model_path(params: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`UsageError` (exit 2) when ``model_path`` cannot be trained from.

    Call before the run directory is created; reads metadata files and asks the Hub at most one
    HEAD request. ``environ`` is the environment the child will get (default ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    if params.get("model_path") is None:
        return  # an algorithm without weights (gepa: its model is an LLM endpoint) has no model_path
    value = str(params["model_path"])
    path = Path(value).expanduser()
    where = f"model_path {value!r}"
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{where}: is a file; expected a model directory (with config.json) or a Hub id")
        # a PEFT adapter directory names its base model in adapter_config.json: transformers loads both
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            raise UsageError(f"{where}: no config.json in this directory; expected a Hugging Face model "
                             "directory (save_pretrained output) or a Hub id")
        model_dir: Path | None = path
    elif not _is_repo_id(value):
        raise UsageError(f"{where}: no such model directory{did_you_mean_path(value)}")
    else:
        model_dir = cached_snapshot(value, environ)
        # a folder next to a mistyped one (examples/tiy): said first, whatever the Hub answers
        hint = did_you_mean_path(value)
        if model_dir is None and _offline(environ):
            raise UsageError(f"{where}: no such local directory{hint}, and as a Hub id it is not in the local "
                             f"cache ({hub_cache_dir(environ)}) while HF_HUB_OFFLINE=1; download it first "
                             f"(hf download {value}) or fix the path")
        if model_dir is None:
            why = _probe_hub(value, environ)
            if why:
                raise UsageError(f"{where}{hint}: {why}")
    kind = _data_needs_template(params) if model_dir is not None else None
    if kind and has_chat_template(model_dir) is False:  # type: ignore[arg-type]
        from thub.data.kinds import kind_spec

        data = f"{kind} rows ({kind_spec(kind).summary})"
        raise UsageError(f"{where}: its tokenizer has no chat template (no chat_template in tokenizer_config.json, "
                         f"no chat_template.jinja), and {data} are rendered with it; use a chat/instruct model, "
                         "add a chat template, or train on documents (is_pretraining)")
