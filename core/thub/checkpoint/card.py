"""The model card ``thub checkpoint push`` writes as ``README.md`` into the pushed folder.

Built from the run the model came from (``thub_run.json``, ``result.json``,
``training_metrics.jsonl``) and the verify result: base model, algorithm, backend and versions,
every parameter with its source, each data file with its row count and the sha256 of its bytes,
the final and best metrics, the loss curve (a table, and ``thub_loss.png`` beside the card where
matplotlib is installed) and the checks ``thub checkpoint verify`` ran.

The YAML front matter is huggingface_hub's :class:`~huggingface_hub.ModelCardData` (``base_model``
only where the training input is a Hub id: the Hub refuses a local path there; ``license`` where
the base model's own card names one). Everything shown goes through :func:`thub.redact.redact`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thub.checkpoint.manifest import sha256_of
from thub.redact import redact, redact_entries

#: the loss plot's file name in the pushed folder (referenced from the card)
PLOT_NAME = "thub_loss.png"
#: rows of the loss table (the curve is sampled evenly, first and last step always shown)
LOSS_ROWS = 12
_HUB_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def count_rows(path: Path) -> int | None:
    """Rows of a data file: non-blank lines of JSON Lines, items of a JSON array, Parquet's own
    row count, CSV lines after the header; None for a format not read here."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            with path.open("rb") as handle:
                return sum(1 for line in handle if line.strip())
        if suffix == ".json":
            data = json.loads(path.read_text())
            return len(data) if isinstance(data, list) else None
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if suffix in (".csv", ".tsv"):
            import csv

            # records, not lines: a quoted cell may hold newlines (thub's CSV reader reads them so)
            with path.open(newline="", encoding="utf-8-sig") as handle:
                reader = csv.reader(handle, delimiter="\t" if suffix == ".tsv" else ",")
                return max(0, sum(1 for record in reader if any(cell.strip() for cell in record)) - 1)
    except (OSError, ValueError, ImportError):
        return None
    return None


def data_files(record: dict[str, Any], parameters: dict[str, Any]) -> list[dict[str, Any]]:
    """Each training data file: ``path``, ``rows``, ``sha256``, ``exists`` (and ``changed``).

    The files are those ``thub_run.json`` recorded as validated (``data.files``), each with the
    sha256 of its bytes recorded when training read it (``data.sha256``): the card says what
    trained, not what the file holds at push time. A file that changed since is marked
    ``changed: true`` with ``sha256_now`` (its rows are not counted: they are not the rows that
    trained). A record of an older thub (no ``data.sha256``) is compared through its content key: a
    changed file's trained sha256 is then unknown (None). Without a record, the ``data_path``
    parameter, hashed now. A file no longer there is listed with ``exists: false``.
    """
    data: dict[str, Any] = record["data"] if isinstance(record.get("data"), dict) else {}
    recorded: dict[str, Any] = data["files"] if isinstance(data.get("files"), dict) else {}
    trained_sha: dict[str, Any] | None = data["sha256"] if isinstance(data.get("sha256"), dict) else None
    paths = list(recorded)
    if not paths and parameters.get("data_path"):
        value = parameters["data_path"]
        paths = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    from thub.data.hub import is_dataset_id

    launched = record.get("working_dir") if isinstance(record.get("working_dir"), str) else None
    found = []
    for name in paths:
        path = Path(name)
        if not path.is_absolute() and not path.exists() and launched:
            path = Path(launched) / name  # relative to where training ran (thub_run.json working_dir)
        if path.is_file():
            now = sha256_of(path)
            if trained_sha is not None:
                trained = trained_sha.get(name) if isinstance(trained_sha.get(name), str) else None
                changed = trained is not None and trained != now
            else:  # an older record: its content key (path and bytes) tells whether the file changed
                changed = name in recorded and recorded[name] is not None and _content_key(path, name) != recorded[name]
                trained = None if changed else now
            entry = {"path": name, "rows": None if changed else count_rows(path), "sha256": trained,
                     "exists": True}
            if changed:
                entry.update(changed=True, sha256_now=now)
            found.append(entry)
        elif is_dataset_id(name) and not isinstance((trained_sha or {}).get(name), str):  # the hub or its cache
            found.append({"path": name, "rows": None, "sha256": None, "exists": False, "dataset": True})
        else:
            trained = (trained_sha or {}).get(name)
            found.append({"path": name, "rows": None, "sha256": trained if isinstance(trained, str) else None,
                          "exists": False})
    return found


def _content_key(path: Path, name: str) -> str:
    """The content key training recorded for the data file ``name`` (thub.data.training.source_hashes:
    ``hash_contents(names="full")`` of a file is its name as given, NUL, its bytes), read from ``path``."""
    import hashlib

    digest = hashlib.sha256(name.encode() + b"\0")
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def loss_curve(run_dir: Path | None) -> list[tuple[float, float]]:
    """The run's loss by step (thub's metrics reader: ``training_metrics.jsonl`` or trainer_state)."""
    if run_dir is None:
        return []
    from thub.errors import ThubError
    from thub.insight.plotting import load_series

    try:
        series = load_series([str(run_dir)], metric="loss")
    except ThubError:
        return []
    return list(zip(series[0].xs, series[0].ys)) if series and series[0].ys else []


def write_plot(run_dir: Path, out: Path) -> Path | None:
    """The loss curve as a PNG (thub plot's drawing); None when matplotlib is missing or nothing was logged."""
    from thub.errors import ThubError
    from thub.insight.plotting import load_series, write_image

    try:
        series = load_series([str(run_dir)], metric="loss")
        if not series or not series[0].ys:
            return None
        return write_image(series, out, title="training loss")
    except ThubError:
        return None


def _sampled(points: list[tuple[float, float]], rows: int = LOSS_ROWS) -> list[tuple[float, float]]:
    if len(points) <= rows:
        return points
    picks = sorted({round(i * (len(points) - 1) / (rows - 1)) for i in range(rows)})
    return [points[i] for i in picks]


def _hub_id(name: str | None) -> str | None:
    """``name`` where it reads as a Hub model id (``org/name`` or ``name``) and is no local folder."""
    if not name or Path(name).exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        return None
    return name if all(c in _HUB_ID_CHARS or c == "/" for c in name) else None


def _base_license(model_path: str | None) -> str | None:
    """The license the base model's own card declares (a local folder's README.md front matter)."""
    if not model_path or not (Path(model_path) / "README.md").is_file():
        return None
    try:
        from huggingface_hub import ModelCard

        license_ = ModelCard.load(Path(model_path) / "README.md", ignore_metadata_errors=True).data.license
    except Exception:  # noqa: BLE001 - a base card that does not parse gives no license, nothing else
        return None
    return str(license_) if license_ else None


def _cell(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def card_facts(run_dir: Path | None, verification: dict[str, Any] | None) -> dict[str, Any]:
    """What the card says, as data (also the ``card`` of ``--json`` and of the ``pushed`` event)."""
    from thub.runner.rundir import read_json

    record = (read_json(run_dir / "thub_run.json") if run_dir else None) or {}
    from thub.runner.runpaths import read_result

    result = (read_result(run_dir) if run_dir else None) or {}
    entries = redact_entries(record.get("parameters") or {})
    parameters = {n: e.get("value") for n, e in entries.items() if isinstance(e, dict)}
    metrics_points = loss_curve(run_dir)
    return {
        "run_dir": str(run_dir) if run_dir else None,
        "base_model": parameters.get("model_path"),
        "algorithm": record.get("algorithm"), "backend": record.get("backend"),
        "versions": record.get("versions") or {},
        "parameters": [{"name": n, "value": e.get("value"), "source": e.get("source")}
                       for n, e in entries.items() if isinstance(e, dict)],
        "data": data_files(record, parameters),
        "validated_rows": (record.get("data") or {}).get("rows"),
        "status": result.get("status"),
        "final_metrics": redact(result.get("last_metrics") or {}),
        "summary": redact(result.get("summary") or {}),
        "best_checkpoint": redact(result.get("best_checkpoint")),
        "loss": [{"step": x, "loss": y} for x, y in _sampled(metrics_points)],
        "loss_min": min((y for _, y in metrics_points), default=None),
        "verify": verification,
    }


def render(facts: dict[str, Any], plot: str | None = None) -> str:
    """The card's text: YAML front matter (huggingface_hub's ModelCardData) and the sections."""
    from huggingface_hub import ModelCard, ModelCardData

    base = facts.get("base_model")
    tags = ["thub", *[t for t in (facts.get("algorithm"), facts.get("backend")) if t]]
    data = ModelCardData(base_model=_hub_id(base), library_name="transformers", tags=tags,
                         license=_base_license(base))
    versions = facts.get("versions") or {}
    library = versions.get("library") or {}
    plugin = versions.get("plugin") or {}
    lines = [f"# {facts.get('algorithm') or 'model'} of {base or 'an unknown base'}", "",
             "Trained and pushed with thub (`thub checkpoint push`); this card is generated from the run's "
             "`thub_run.json`, `result.json` and `training_metrics.jsonl`.", "", "## Training", ""]
    lines += _table(["what", "value"], [
        ["base model", base or "-"], ["algorithm", facts.get("algorithm") or "-"],
        ["backend", f"{facts.get('backend') or '-'} ({library.get('name', '-')} {library.get('version', '')})"],
        ["plugin", f"{plugin.get('name', '-')} {plugin.get('version', '')}"],
        ["thub", versions.get("thub", "-")], ["python", versions.get("python", "-")],
        ["run status", facts.get("status") or "-"]])
    lines += ["", "## Parameters", "", "Every parameter of the run with where its value came from "
              "(secrets redacted).", ""]
    lines += _table(["parameter", "value", "source"],
                    [[p["name"], p["value"], p["source"]] for p in facts.get("parameters") or []])
    lines += ["", "## Data", ""]
    missing = "(not found from the folder push ran in)"
    rows = [[d["path"], "-" if d["rows"] is None else d["rows"],
             (d["sha256"] or ("(a Hugging Face dataset: no file to hash)" if d.get("dataset")
                              else "(not recorded)" if d.get("changed") else missing))
             + (" (as trained; the file has changed since)" if d.get("changed") else "")]
            for d in facts.get("data") or []]
    lines += _table(["file", "rows", "sha256 when trained"], rows) if rows else ["No data file recorded."]
    if facts.get("validated_rows") is not None:
        lines += ["", f"Rows validated by thub before training: {facts['validated_rows']}."]
    lines += ["", "## Metrics", ""]
    final = facts.get("final_metrics") or {}
    lines += _table(["final metric", "value"], [[k, v] for k, v in final.items()]) if final else ["No metrics."]
    if facts.get("loss_min") is not None:
        lines += ["", f"Lowest training loss: {facts['loss_min']:.6g}."]
    best = facts.get("best_checkpoint")
    if isinstance(best, dict):
        lines += ["", "Best checkpoint: " + ", ".join(f"{k} {_cell(v)}" for k, v in best.items()) + "."]
    if facts.get("loss"):
        lines += ["", "### Loss curve", ""]
        if plot:
            lines += [f"![training loss]({plot})", ""]
        lines += _table(["step", "loss"], [[f"{p['step']:g}", f"{p['loss']:.6g}"] for p in facts["loss"]])
    lines += ["", "## Verification", ""]
    verification = facts.get("verify") or {}
    if verification.get("checks"):
        lines += [f"`thub checkpoint verify` ({verification.get('by')}): "
                  f"{'passed' if verification.get('ok') else 'NOT passed (pushed with --force)'}.", ""]
        marks = {True: "ok", False: "FAILED", None: "skipped"}
        lines += _table(["check", "result", "detail"], [[c["check"], marks.get(c.get("ok"), "-"),
                                                         c.get("message", "")] for c in verification["checks"]])
    else:
        lines += [f"Not verified ({verification.get('by') or 'no verify result'})."]
    if facts.get("files"):
        lines += ["", "## Files", "", "Every file sent with its sha256 (also in `thub_manifest.json`: "
                  "`thub checkpoint verify` checks a folder against it).", ""]
        lines += _table(["file", "bytes", "sha256"], [[f["path"], f["bytes"], f["sha256"]] for f in facts["files"]])
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n"))
