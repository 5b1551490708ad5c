"""``thub data prepare``: validated, mixed, tokenized data in the files backends read.

Output: JSONL with ``input_ids``, ``labels``, ``len`` and ``num_loss_counted_tokens`` per line
(what mini-trainer and instructlab-training read) or Parquet with the same columns, plus a
sidecar ``<output>.thub.json`` holding the cache key and the counts.

* Nothing half-written: everything is validated before tokenizing, samples are written to a
  temporary file next to the output and renamed into place only when all went well.
* Cached: the key hashes the data files' bytes, the tokenizer (vocabulary, template, special
  tokens) and every setting; an output whose sidecar has the same key is reused.
* Parallel: ``num_proc`` worker processes each tokenize and serialise one contiguous shard to
  a part file (so no token lists cross process boundaries), concatenated in order.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thub.data.formats import DatasetSource
from thub.data.kinds import kind_spec, loaded
from thub.data.loading import load_sources
from thub.data.mixing import mix_loaded
from thub.data.readers import hash_source
from thub.data.tokenize import IGNORE, Sample, TokenizeStats
from thub.data.training import TrainingData
from thub.errors import UsageError

CACHE_VERSION = 1


@dataclass
class PrepareResult:
    """Where the prepared data is and what preparing it did."""

    output: str
    stats: TokenizeStats
    cached: bool
    key: str


def load_tokenizer(model_path: str, *, trust_remote_code: bool = False) -> Any:
    """Load a model's tokenizer (transformers imported here, never at thub import).

    A local directory with a ``tokenizer.json`` loads as ``PreTrainedTokenizerFast``: the same Rust
    tokenizer, special tokens and chat template as ``AutoTokenizer`` gives, without the
    configuration machinery that imports torch (1-4 s, more than tokenizing 10k conversations).
    """
    local = Path(model_path).expanduser()
    if not trust_remote_code and (local / "tokenizer.json").is_file():
        from thub.data.light_tokenizer import load_light

        light = load_light(local)  # generic fast tokenizers: not even transformers is imported
        if light is not None:
            return light
        try:
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(str(local))
        except Exception:  # noqa: BLE001 - anything unusual: let AutoTokenizer decide (and explain)
            pass
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover - depends on the environment
        raise UsageError("tokenizer: expected transformers to be installed (pip install transformers)") from None
    try:
        return AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{model_path}: expected a model or tokenizer directory, found none ({exc})") from None


def cache_key(sources: Sequence[DatasetSource], tokenizer: Any, settings: dict[str, Any]) -> str:
    """Content hash of data + tokenizer + settings (paths and mtimes do not matter)."""
    digest = hashlib.sha256(f"thub-prepare-{CACHE_VERSION}".encode())
    for source in sources:
        hash_source(digest, source.path)  # a file's bytes, a Hub dataset's revision
        digest.update(json.dumps({k: v for k, v in asdict(source).items() if k != "path"}, sort_keys=True).encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    digest.update((backend.to_str() if backend is not None else repr(tokenizer)).encode())
    digest.update(str(getattr(tokenizer, "chat_template", "")).encode())
    digest.update(json.dumps(getattr(tokenizer, "special_tokens_map", {}), sort_keys=True, default=str).encode())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()


def _sidecar(output: Path) -> Path:
    return output.with_name(output.name + ".thub.json")


def _tokenize(rows: Sequence[dict[str, Any]], kind: str, tokenizer: Any, settings: dict[str, Any],
              locations: Sequence[str], template: Any, sink: Any = None,
              ) -> tuple[list[Sample | dict[str, list[int]]], TokenizeStats]:
    """Samples of one shard, by the data kind's ``tokenize``: ``(ids, trained ranges)`` pairs or
    ``{"input_ids", "labels"}`` dicts; samples already handed to ``sink`` are not returned."""
    # overlong="error" runs as "drop" per shard so the final error counts every offender.
    overlong = "drop" if settings["overlong"] == "error" else settings["overlong"]
    spec = kind_spec(kind)
    if spec.tokenize is None:
        raise UsageError(f"data: {kind} rows ({spec.summary}) are not tokenized ahead of training")
    shard_settings = {"max_seq_len": settings["max_seq_len"], "overlong": overlong, "unmask": settings["unmask"]}
    samples, stats = loaded(spec.tokenize)(rows, tokenizer, shard_settings, locations, template, sink)
    return samples, stats


def _masked(count: int) -> str:
    """``count`` ignored labels as JSON list items (without brackets)."""
    return "-100, " * (count - 1) + "-100"


def _write_jsonl(handle: Any, samples: Sequence[Sample | dict[str, list[int]]]) -> None:
    # num_loss_counted_tokens as mini-trainer counts it: labels[1:], since the first token is
    # never predicted. `str(list)` of ints is valid JSON and the fastest way to write it; the
    # labels of a (ids, ranges) sample are assembled from slices of ids and runs of -100 in the
    # same format, without a labels list.
    lines = []
    for sample in samples:
        if isinstance(sample, dict):
            ids, labels = sample["input_ids"], sample["labels"]
            counted = len(labels) - labels.count(IGNORE) - (labels[0] != IGNORE)
            labels_text = str(labels)
        else:
            ids, ranges = sample
            if ranges is None:
                labels_text, counted = None, len(ids) - 1
            else:
                pieces, pos, counted = [], 0, 0
                for a, b in ranges:
                    if a > pos:
                        pieces.append(_masked(a - pos))
                    pieces.append(str(ids[a:b])[1:-1])
                    counted += b - a
                    pos = b
                if pos < len(ids):
                    pieces.append(_masked(len(ids) - pos))
                labels_text = "[" + ", ".join(pieces) + "]"
                counted -= bool(ranges) and ranges[0][0] == 0
        ids_text = str(ids)
        lines.append(f'{{"input_ids": {ids_text}, "labels": {labels_text or ids_text}, "len": {len(ids)}, '
                     f'"num_loss_counted_tokens": {counted}}}\n')
    handle.write("".join(lines))


# Worker state, inherited through fork (the tokenizer and rows are never pickled).
_SHARED: dict[str, Any] = {}


def _run_shard(index: int, start: int, stop: int, part: str) -> TokenizeStats:
    """Tokenize rows[start:stop] into the JSONL file ``part``; returns the counts."""
    rows, locations = _SHARED["rows"], _SHARED["locations"]
    tokenizer, kind, settings = _SHARED["tokenizer"], _SHARED["kind"], _SHARED["settings"]
    template = _SHARED["template"]
    # The kind's tokenize gets the whole shard and streams samples to the file batch by batch
    # (memory stays bounded in one pass, no pipeline drain and restart every few thousand rows).
    with open(part, "w", encoding="utf-8") as handle:
        samples, stats = _tokenize(rows[start:stop], kind, tokenizer, settings, locations[start:stop], template,
                                   sink=lambda batch: _write_jsonl(handle, batch))
        _write_jsonl(handle, samples)
    return stats


def _byte_table_before_fork(tokenizer: Any) -> None:
    """Import numpy and build the byte-length table once, for every worker (byte_offsets.py)."""
    from thub.data.byte_offsets import byte_locator

    backend = getattr(tokenizer, "backend_tokenizer", None)
    locator = byte_locator(backend) if backend is not None else None
    if locator is not None:
        locator.ready()


def _template_for(kind: str, tokenizer: Any) -> Any:
    if not kind_spec(kind).chat_template:
        return None
    from thub.data.templates import ChatTemplate

    return ChatTemplate(tokenizer)


def prepare(sources: Sequence[DatasetSource], tokenizer: Any, output: str | os.PathLike[str], *,
            max_seq_len: int | None = None, overlong: str = "truncate", strategy: str = "concat",
            probabilities: Sequence[float] | None = None, seed: int = 42, unmask: bool = False, num_proc: int = 1,
            use_cache: bool = True, output_format: str | None = None,
            validated: TrainingData | None = None) -> PrepareResult:
    """Validate, mix and tokenize ``sources`` into ``output`` (JSONL, or Parquet by suffix/format).

    ``tokenizer`` is a loaded tokenizer or a model path. ``validated``: the rows already
    validated and mixed from ``sources`` with these mixing settings (the run context passes
    the parent's), so they are not read again. Raises :class:`UsageError` (nothing
    written) on bad data, a template that does not fit the tokenizer, a dataset with no trained
    token, or overlong samples under ``overlong="error"``.
    """
    out = Path(output)
    fmt = output_format or ("parquet" if out.suffix.lower() in (".parquet", ".pq") else "jsonl")
    if fmt not in ("jsonl", "parquet"):
        raise UsageError(f"output format: expected jsonl or parquet, found {fmt!r}")
    if validated is None:
        loaded = load_sources(list(sources))
        validated = TrainingData(*mix_loaded(loaded, strategy, probabilities, seed), loaded[0].kind, "")
    kind = validated.kind
    spec = kind_spec(kind)
    if spec.tokenize is None:
        raise UsageError(f"data: {kind} rows ({spec.summary}) are not tokenized ahead of training; backends read "
                         "them as they are (use `thub data check` to validate them)")
    rows, locations = validated.rows, validated.locations
    if isinstance(tokenizer, str):
        tokenizer = load_tokenizer(tokenizer)
    settings = {"max_seq_len": max_seq_len, "overlong": overlong, "strategy": strategy, "seed": seed,
                "probabilities": list(probabilities) if probabilities else None, "unmask": unmask, "format": fmt}
    key = cache_key(sources, tokenizer, settings)
    sidecar = _sidecar(out)
    if use_cache and out.exists() and sidecar.exists():
        try:
            meta = json.loads(sidecar.read_text())
            if meta.get("key") == key:
                cached = TokenizeStats(**{k: v for k, v in meta["stats"].items()
                                          if k in TokenizeStats.__dataclass_fields__})
                return PrepareResult(str(out), cached, True, key)
        except (OSError, ValueError, TypeError):
            pass  # unreadable sidecar: prepare again
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    parts: list[str] = []
    try:
        stats = _prepare_into(tmp, parts, rows, locations, kind, tokenizer, settings, num_proc)
        _check_stats(stats, settings, max_seq_len)
        if fmt == "parquet":
            _jsonl_to_parquet(tmp)
        os.replace(tmp, out)
    finally:
        for path in [*parts, str(tmp)]:
            if os.path.exists(path):
                os.unlink(path)
    meta = {"key": key, "settings": settings, "sources": [asdict(s) for s in sources], "stats": stats.as_dict()}
    meta["stats"].pop("length_percentiles", None)
    sidecar.write_text(json.dumps(meta, indent=2) + "\n")
    return PrepareResult(str(out), stats, False, key)


def _prepare_into(tmp: Path, parts: list[str], rows: list[dict[str, Any]], locations: list[str], kind: str,
                  tokenizer: Any, settings: dict[str, Any], num_proc: int) -> TokenizeStats:
    """Tokenize into ``tmp`` (JSONL), in-process or through ``num_proc`` forked workers."""
    # compiled once, inherited by forked workers
    _SHARED.update(rows=rows, locations=locations, tokenizer=tokenizer, kind=kind, settings=settings,
                   template=_template_for(kind, tokenizer))
    try:
        n = len(rows)
        workers = max(1, min(num_proc, n // 256 or 1))
        if workers > 1 and kind_spec(kind).chat_template:  # rendered text: tokens located by byte offsets
            _byte_table_before_fork(tokenizer)
        if workers == 1 or sys.platform == "win32" or "fork" not in _mp_methods():
            parts.append(str(tmp))  # one shard: written straight into the output's temporary file
            stats = _run_shard(0, 0, n, parts[0])
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            bounds = [n * k // workers for k in range(workers + 1)]
            parts.extend([str(tmp)] + [f"{tmp}.part{k}" for k in range(1, workers)])  # shard 0 into tmp
            # One tokenizer thread per worker: the processes already share the cores, and a Rust
            # thread pool inherited through fork could deadlock (tokenizers warns about it).
            previous = os.environ.get("TOKENIZERS_PARALLELISM")
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
            try:
                with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                    futures = [pool.submit(_run_shard, k, bounds[k], bounds[k + 1], parts[k])
                               for k in range(workers)]
                    stats = TokenizeStats()
                    for future in futures:
                        stats.merge(future.result())
            finally:
                if previous is None:
                    os.environ.pop("TOKENIZERS_PARALLELISM", None)
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = previous
        stats.samples_in = n
        for part in parts[1:]:  # the other shards after shard 0, in order
            _append(str(tmp), part)
        return stats
    finally:
        _SHARED.clear()


def _append(target: str, part: str) -> None:
    """Append the file ``part`` to the file ``target``, in the kernel where it can (no copy through Python)."""
    out = os.open(target, os.O_WRONLY)  # not O_APPEND: copy_file_range refuses it
    try:
        os.lseek(out, 0, os.SEEK_END)
        with open(part, "rb") as source:
            left = os.fstat(source.fileno()).st_size
            try:
                while left > 0:
                    sent = os.copy_file_range(source.fileno(), out, left)
                    if sent == 0:
                        break
                    left -= sent
            except (AttributeError, OSError):  # no copy_file_range on this system: through memory
                pass
            while block := os.read(source.fileno(), 1 << 22):  # what is left (the position followed the copies)
                view = memoryview(block)
                while view:
                    view = view[os.write(out, view):]
    finally:
        os.close(out)


def _mp_methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()


def _check_stats(stats: TokenizeStats, settings: dict[str, Any], max_seq_len: int | None) -> None:
    if settings["overlong"] == "error" and stats.dropped_overlong:
        first = ", ".join(stats.examples.get("dropped_overlong", []))
        raise UsageError(f"{stats.dropped_overlong} sample(s) longer than max_seq_len={max_seq_len} tokens "
                         f"(first: {first}); use --overlong truncate or drop, or raise --max-seq-len")
    if stats.trained_tokens == 0:
        raise UsageError("data: expected trained tokens, found 0 after the chat template and loss mask "
                         f"({stats.samples_in} samples in, {stats.samples_out} out); check roles and the template")


def _jsonl_to_parquet(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    table = pj.read_json(path)
    pq.write_table(table.cast(pa.schema([(f.name, f.type) for f in table.schema])), str(path) + ".pq")
    os.replace(str(path) + ".pq", path)
