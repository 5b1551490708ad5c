"""The held-out rows of ``validation_data_path``: a separate file, checked as the training data is.

The parent's data gate (:func:`thub.data.training.validate_training_data`) calls
:func:`validate_validation_data`: the file exists and passes ``thub data check`` (every bad row
named by ``file:line``, exit 2), in rows of a kind the algorithm trains on and of the same kind as
the training rows (chat next to chat, documents next to documents), under the kind's own gate. The
training child reads the same rows with :func:`validation_data` (validated again there: a held-out
file is small, and it is never mixed or kept). Pure Python, no tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from thub.errors import UsageError

if TYPE_CHECKING:
    from thub.data.formats import DatasetSource
    from thub.data.training import TrainingData
    from thub.specs import AlgorithmSpec

__all__ = ["validate_validation_data", "validation_data", "validation_source"]


def validation_source(params: Mapping[str, Any]) -> DatasetSource | None:
    """``validation_data_path`` as a source read like ``data_path`` (its ``data_format`` and
    document column), or None when it is not set."""
    from thub.data.formats import DatasetSource

    path = params.get("validation_data_path")
    if not path:
        return None
    return DatasetSource.from_dict({"path": path, "format": params.get("data_format") or "auto",
                                    "document_column": params.get("document_column_name")})


def validate_validation_data(params: Mapping[str, Any], algorithm: AlgorithmSpec | None = None,
                             training_kind: str | None = None) -> TrainingData | None:
    """The validated rows of ``validation_data_path`` (None when it is not set).

    Raises :class:`UsageError` naming every bad ``file:line`` at once, a kind ``algorithm`` does
    not train on, or a kind other than ``training_kind`` (the training rows').
    """
    source = validation_source(params)
    if source is None:
        return None
    from thub.data.loading import load_sources
    from thub.data.training import TrainingData, kind_gate, source_hashes

    try:
        loaded = load_sources([source])[0]
    except UsageError as exc:
        raise UsageError(f"validation_data_path: {exc}") from None
    where = loaded.locations[0] if loaded.locations else f"{source.path}:1"
    if not loaded.rows:
        raise UsageError(f"validation_data_path: {source.path} has no valid row to evaluate on")
    if algorithm is not None:
        from thub.data.kinds import check_kind

        try:
            check_kind(algorithm, loaded.kind, loaded.format, where)
        except UsageError as exc:
            raise UsageError(f"validation_data_path: {exc}") from None
    if training_kind and loaded.kind != training_kind:
        raise UsageError(f"validation_data_path: `{where}` is a {loaded.kind} row; the training data is "
                         f"{training_kind} rows: the held-out rows must be of the same kind")
    if algorithm is not None:
        kind_gate(loaded.kind, loaded.rows, loaded.locations, params)
    files = source_hashes({"data_path": str(source.path)})
    return TrainingData(loaded.rows, loaded.locations, loaded.kind, "", files)


def validation_data(params: Mapping[str, Any]) -> TrainingData | None:
    """The held-out rows a backend evaluates on (in the training child), or None without
    ``validation_data_path``: the file as it is now, validated again (it was checked by the
    parent's data gate before the run started)."""
    return validate_validation_data(params)
