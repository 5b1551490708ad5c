"""The rows a training run uses, from its parameters: one path or a mix of datasets.

Backends call :func:`training_rows` instead of reading ``data_path`` themselves, so that
``datasets``, ``mix_strategy`` and ``mix_probabilities`` mean the same on every backend that
honours them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thub.data.formats import DatasetSource
from thub.data.loading import load_sources
from thub.data.mixing import mix_loaded


def training_sources(params: Mapping[str, Any]) -> list[DatasetSource]:
    """``data_path`` (first, if set) and every entry of ``datasets`` as sources."""
    default_format = params.get("data_format") or "auto"
    document_column = params.get("document_column_name") or "document"
    sources = []
    if params.get("data_path"):
        sources.append(DatasetSource.from_dict({"path": params["data_path"], "format": default_format,
                                                "document_column": document_column}))
    for entry in params.get("datasets") or []:
        if isinstance(entry, str):
            sources.append(DatasetSource.parse(entry, default_format=default_format))
        else:
            sources.append(DatasetSource.from_dict({"format": default_format, **entry}))
    return sources


def training_rows(params: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Validated, normalised and mixed rows with their ``file:line`` locations.

    Bad data raises :class:`thub.errors.UsageError` naming every file and line at once.
    """
    loaded = load_sources(training_sources(params))
    return mix_loaded(loaded, params.get("mix_strategy") or "concat", params.get("mix_probabilities"),
                      int(params.get("seed", 42)))
