"""The rows a training run uses, from its parameters: one path or a mix of datasets.

One data entry for every backend: the parent (``thub train``, ``thub.train()``, a SLURM
submission) validates, normalises and mixes the data once, before anything starts
(:func:`validate_training_data`), and keeps the result in the run directory (``thub_data/``,
:func:`save_training_data`). The training child reads it back through
:meth:`thub.runner.context.RunContext.data` / ``rows()`` / ``prepare()`` (:func:`training_data`),
so a backend trains on exactly the rows the parent validated: ``datasets``, ``mix_strategy``,
``mix_probabilities``, ``data_format`` and the ShareGPT tags are applied once, in one place.

The kept rows are keyed by the data settings and each source file's contents (a SHA-256 per
file, whatever its size and modification time say), checked again whenever they are read back
(:func:`read_training_data`; a SLURM restart hours later included): a file whose contents changed
since the parent validated it is validated again, never read stale; a file deleted since is no
reason to fail, the kept rows are then the only copy and are trained on. Which copy a run trained
on is said in ``thub_run.json`` (``data``, :func:`thub.runner.context.RunContext.data`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.data.formats import DatasetSource
from thub.data.loading import load_sources
from thub.data.mixing import mix_loaded
from thub.data.problems import no_gc

if TYPE_CHECKING:
    from thub.specs import AlgorithmSpec

#: the run directory's folder holding the validated rows (``rows.json`` + ``rows.thub.json``)
DATA_DIR = "thub_data"
CACHE_VERSION = 2  # 2: per-file content hashes in the meta file
# the parameters that decide which rows a run trains on (the key of the kept rows)
_SETTINGS = ("data_path", "datasets", "data_format", "document_column_name", "mix_strategy", "mix_probabilities",
             "seed")


@dataclass
class TrainingData:
    """Validated, normalised and mixed rows, with where each came from.

    Attributes:
        rows: canonical rows of their data kind (docs/data.md; thub's own: ``{"messages",
            "unmask"?}``, ``{"document"}``, ``{"prompt", "ground_truth"}`` or ``{"input_ids", "labels"}``).
        locations: ``file:line`` of each row, for messages that name the row.
        kind: the rows' data kind (a registered ``DataKindSpec`` name; one kind per run).
        key: the data settings and files these rows were read from (see :func:`data_key`).
    """

    rows: list[dict[str, Any]]
    locations: list[str]
    kind: str
    key: str
    #: each source file's SHA-256 when the rows were read (None: missing), by path
    files: dict[str, str | None] = field(default_factory=dict)
    #: each source file's plain sha256 of its bytes when the rows were read (None: a folder, or missing),
    #: what the model card shows as the data that trained (``files`` hashes the path with the bytes)
    sha256: dict[str, str | None] = field(default_factory=dict)


def training_sources(params: Mapping[str, Any]) -> list[DatasetSource]:
    """``data_path`` (first, if set) and every entry of ``datasets`` as sources."""
    default_format = params.get("data_format") or "auto"
    document_column = params.get("document_column_name")  # None: the document format's default
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


def mix_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """The mixing keywords of :func:`thub.data.prepare.prepare` for a run's parameters."""
    return {"strategy": params.get("mix_strategy") or "concat", "probabilities": params.get("mix_probabilities"),
            "seed": int(params.get("seed", 42))}


def validate_training_data(params: Mapping[str, Any], algorithm: AlgorithmSpec | None = None) -> TrainingData:
    """Read, validate, normalise and mix the run's data (no tokenizer, no heavy import).

    Bad data raises :class:`thub.errors.UsageError` naming every file and line at once. With
    ``algorithm``, the data gate too: rows of a kind it does not train on (``AlgorithmSpec.data_kinds``)
    are refused, naming the first row (``sft expects chat, ... rows; `x.jsonl:1` is a grpo row``), and
    so is a ``validation_data_path`` that would be refused as data (:mod:`thub.data.validation`).
    """
    # before reading: a file changed while it is read gets another key
    files, sha256 = source_digests(params)
    loaded = load_sources(training_sources(params))
    if algorithm is not None:
        from thub.data.kinds import check_kind

        first = next((item for item in loaded if item.locations), loaded[0])
        where = first.locations[0] if first.locations else f"{first.source.path}:1"
        check_kind(algorithm, first.kind, first.format, where)
    mixing = mix_settings(params)
    rows, locations = mix_loaded(loaded, mixing["strategy"], mixing["probabilities"], mixing["seed"])
    if algorithm is not None:
        kind_gate(loaded[0].kind, rows, locations, params)
        from thub.data.validation import validate_validation_data

        validate_validation_data(params, algorithm, loaded[0].kind)  # validation_data_path: the same gate
    return TrainingData(rows, locations, loaded[0].kind, data_key(params, files), files, sha256)


def kind_gate(kind: str, rows: list[dict[str, Any]], locations: list[str], params: Mapping[str, Any]) -> None:
    """The data kind's own gate over the mixed rows (``DataKindSpec.gate``: e.g. preference pairs
    held to ``max_seq_len``); its warnings are printed, its refusal raised."""
    from thub.data.kinds import kind_spec, loaded

    spec = kind_spec(kind)
    if spec.gate is None:
        return
    from rich.markup import escape

    from thub.ui.output import console

    for warning in loaded(spec.gate)(rows, locations, params):
        console().print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)


def training_rows(params: Mapping[str, Any], algorithm: AlgorithmSpec | None = None
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """Validated, normalised and mixed rows with their ``file:line`` locations (with
    ``algorithm``: and the data gate, :func:`validate_training_data`).

    What ``thub data check`` and the dry run use; a backend reads its data through the run
    context instead (``context.rows()``), which reuses the parent's validation.
    """
    data = validate_training_data(params, algorithm)
    return data.rows, data.locations


def source_hashes(params: Mapping[str, Any]) -> dict[str, str | None]:
    """Each source file's (or saved dataset directory's) SHA-256 of its contents, by path; None
    for one that does not exist (now)."""
    return source_digests(params)[0]


def source_digests(params: Mapping[str, Any]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(:func:`source_hashes`, each source file's plain sha256 of its bytes), from one read of each
    file; the plain one is None for a folder or a missing file."""
    from thub.fileio import hash_contents

    found: dict[str, str | None] = {}
    plain: dict[str, str | None] = {}
    for source in training_sources(params):
        digest, path = hashlib.sha256(), Path(source.path)
        bytes_only = hashlib.sha256() if path.is_file() else None
        try:
            # the path too: the rows' locations name it
            hash_contents(digest, source.path, names="full", also=bytes_only)
        except OSError:
            found[str(source.path)] = plain[str(source.path)] = None
            continue
        found[str(source.path)] = digest.hexdigest()
        plain[str(source.path)] = bytes_only.hexdigest() if bytes_only is not None else None
    return found, plain


def data_key(params: Mapping[str, Any], files: Mapping[str, str | None] | None = None) -> str:
    """Hash of the data settings and each source file's path and contents (not its size and
    modification time: a same-size edit with the time set back must not reuse the kept rows).
    ``files``: :func:`source_hashes` already computed."""
    files = source_hashes(params) if files is None else files
    digest = hashlib.sha256(f"thub-rows-{CACHE_VERSION}".encode())
    digest.update(json.dumps({name: params.get(name) for name in _SETTINGS}, sort_keys=True, default=str).encode())
    for path, content in files.items():
        digest.update(f"{path}\0{content or 'missing'}\n".encode())
    return digest.hexdigest()


def _paths(directory: str | Path) -> tuple[Path, Path]:
    return Path(directory) / "rows.json", Path(directory) / "rows.thub.json"


def save_training_data(data: TrainingData, directory: str | Path) -> bool:
    """Keep validated rows in ``directory`` (atomically) for the training child to read back.

    Returns False, keeping nothing, for rows JSON cannot hold exactly (the child then validates
    the data itself, as it would without this copy).
    """
    from thub.fileio import write_text_atomic

    rows_file, meta_file = _paths(directory)
    try:  # one document: read back with one json.loads, faster than validating again
        text = json.dumps({"locations": data.locations, "rows": data.rows}, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return False
    meta_file.unlink(missing_ok=True)  # no key names the old rows while the new ones are written
    write_text_atomic(rows_file, text, parents=True)
    meta = {"version": CACHE_VERSION, "key": data.key, "kind": data.kind, "count": len(data.rows),
            "files": data.files, "sha256": data.sha256}
    write_text_atomic(meta_file, json.dumps(meta, indent=2) + "\n")
    return True


def load_training_data(params: Mapping[str, Any], directory: str | Path) -> TrainingData | None:
    """The rows kept in ``directory`` when they were read from ``params``'s data as it is now; else None."""
    return read_training_data(params, directory)[0]


def read_training_data(params: Mapping[str, Any], directory: str | Path) -> tuple[TrainingData | None, dict[str, Any]]:
    """The rows kept in ``directory`` if they may be trained on, and what was found (``copy``:
    ``kept``, or ``none kept`` / ``changed`` when they may not; ``missing``/``changed``: files).

    Every source file is hashed again: the kept rows are used when each file still has the
    contents they were read from, or is gone (the kept rows are then the only copy); a file
    whose contents changed means the rows must be validated again."""
    rows_file, meta_file = _paths(directory)
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, {"copy": "none kept"}
    if not isinstance(meta, dict) or meta.get("version") != CACHE_VERSION or not isinstance(meta.get("files"), dict):
        return None, {"copy": "none kept"}
    now = source_hashes(params)
    if list(now) != list(meta["files"]):  # other sources (another run's rows): not ours
        return None, {"copy": "none kept"}
    changed = [path for path, content in now.items() if content is not None and content != meta["files"][path]]
    missing = [path for path, content in now.items() if content is None and meta["files"][path] is not None]
    if changed:
        return None, {"copy": "changed", "changed": changed}
    if meta.get("key") != data_key(params, meta["files"]):  # other settings
        return None, {"copy": "none kept"}
    try:
        with no_gc():  # millions of acyclic objects: no collection passes while they are built
            kept = json.loads(rows_file.read_text(encoding="utf-8"))
        rows, locations = kept["rows"], kept["locations"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None, {"copy": "none kept"}  # missing, unreadable or foreign: validate again
    if not isinstance(rows, list) or not isinstance(locations, list) or not len(rows) == len(locations) == meta.get(
            "count"):
        return None, {"copy": "none kept"}
    found: dict[str, Any] = {"copy": "kept", "key": meta["key"]}
    if missing:
        found["missing"] = missing
    sha256: dict[str, str | None] = meta["sha256"] if isinstance(meta.get("sha256"), dict) else {}
    return TrainingData(rows, locations, meta["kind"], meta["key"], meta["files"], sha256), found


def training_data(params: Mapping[str, Any], directory: str | Path | None = None) -> TrainingData:
    """The rows the run trains on: those the parent validated (kept in ``directory``), or, where
    none were kept for this data, validated now."""
    return trained_data(params, directory)[0]


def trained_data(params: Mapping[str, Any], directory: str | Path | None = None
                 ) -> tuple[TrainingData, dict[str, Any]]:
    """:func:`training_data` and which copy it is (:func:`read_training_data`'s finding; a copy
    validated now is ``validated now``, with the files that ``changed`` since they were kept)."""
    found: dict[str, Any] = {"copy": "none kept"}
    if directory is not None:
        kept, found = read_training_data(params, directory)
        if kept is not None:
            return kept, found
    data = validate_training_data(params)
    return data, {**found, "copy": "validated now", "key": data.key}
