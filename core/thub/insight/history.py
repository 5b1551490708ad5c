"""Run history: the thub runs under a directory, one run's record, and the difference of two.

Reads ``thub_run.json``, ``result.json``, ``training_metrics.jsonl`` and ``trackers.json`` only
(no backend import).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thub.errors import UsageError
from thub.redact import redact, redact_entries


def _read(path: Path) -> dict[str, Any] | None:
    return _read_why(path)[0]


def _read_why(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON object file's content, or (None, why it is unusable); (None, None): no such file."""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror}"
    except UnicodeDecodeError:
        return None, f"{path.name} is not UTF-8 text"
    except ValueError as exc:  # json.JSONDecodeError
        return None, f"{path.name} is not JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"{path.name} is not a JSON object"
    return value, None


def _last_metrics(run: Path) -> dict[str, Any] | None:
    from thub.runner.metrics import is_eval_line

    path = run / "training_metrics.jsonl"
    if not path.is_file():
        return None
    for raw in reversed(path.read_text(errors="replace").splitlines()):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and not is_eval_line(value):  # an evaluation line has no training loss
            return value
    return None


def _number(value: Any) -> float | None:
    """A finite number, else None (a hand-edited record may hold anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        return None
    return float(value)


def discover(root: str | Path, depth: int = 3) -> list[Path]:
    """Run directories (holding ``thub_run.json``) at or under ``root``, up to ``depth`` levels down."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such directory")
    found, frontier = [], [root]
    for _ in range(depth + 1):
        following = []
        for directory in frontier:
            if (directory / "thub_run.json").is_file():
                found.append(directory)
                continue  # a run's checkpoints are not runs
            try:
                following.extend(sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")))
            except OSError:
                continue
        frontier = following
    return found


def summarise(run: str | Path) -> dict[str, Any]:
    """Status, algorithm, backend, steps, final loss/reward, duration and start of one run."""
    run = Path(run)
    record, why = _read_why(run / "thub_run.json")
    if record is None:
        raise UsageError(f"{run}: not a thub run ({why or 'no thub_run.json'})")
    result = _read(run / "result.json")
    if isinstance(result, dict):  # its paths where the run directory is now (thub.runner.runpaths)
        from thub.runner.runpaths import rebased

        result = rebased(run, result)
    last = (result or {}).get("last_metrics")
    last = last if isinstance(last, dict) and last else _last_metrics(run) or {}
    if result:
        status = str(result.get("status", "unknown"))
    else:  # no result.json: in progress, or killed before writing it; the lock file says which
        live = _live_pids(run)
        status = "running" if live else "stopped"
    created, stamp = _number(record.get("created")), _number(last.get("timestamp"))
    duration = _number((result or {}).get("wall_seconds"))
    if duration is None and stamp and created:
        duration = round(stamp - created, 3)
    grpo = str(record.get("algorithm", "")).endswith("grpo")
    return {
        "name": run.name,
        "path": str(run),
        "status": status,
        "pids": _live_pids(run) if status == "running" else [],
        "algorithm": record.get("algorithm"),
        "backend": record.get("backend"),
        "step": last.get("step"),
        "max_steps": last.get("max_steps"),
        "final_metric": "reward" if grpo else "loss",
        "final_value": last.get("reward" if grpo else "loss"),
        "duration_seconds": duration,
        "started": created,
        "final_checkpoint": (result or {}).get("final_checkpoint"),
        "trackers": _trackers(run),
    }


def _live_pids(run: Path) -> list[int]:
    """The live processes the run directory's lock file names (thub, its training child)."""
    from thub.runner.lock import LOCK_NAME, pid_alive

    holder, _why = _read_why(run / LOCK_NAME)
    pids = [holder.get(name) for name in ("pid", "child")] if holder else []
    return [pid for pid in pids if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and pid_alive(pid)]


def summarise_all(root: str | Path, depth: int = 3) -> tuple[list[dict[str, Any]], list[tuple[Path, str]]]:
    """:func:`summarise` of every run under ``root`` (:func:`discover`), oldest first, and the
    runs skipped because a file of theirs is unreadable, each with why: one corrupt file never
    hides the other runs."""
    runs, skipped = [], []
    for path in discover(root, depth):
        try:
            runs.append(summarise(path))
        except UsageError as exc:
            skipped.append((path, str(exc).removeprefix(f"{path}: ")))
    return sorted(runs, key=lambda r: r["started"] or 0), skipped


def _trackers(run: Path) -> dict[str, Any]:
    """Where the run went in each experiment tracker (``trackers.json``; see thub.trackers)."""
    return _read(run / "trackers.json") or {}


def show(run: str | Path) -> dict[str, Any]:
    """Everything recorded about a run: configuration with sources, versions, result, checkpoints."""
    from thub.runner.runpaths import read_result

    run = Path(run)
    summary = summarise(run)
    record = _read(run / "thub_run.json") or {}
    checkpoints = sorted(str(p) for p in (run / "checkpoints").glob("checkpoint-*") if p.is_dir())
    # an older record (or a result's error text) may hold a URI password: never shown
    return redact({
        **summary,
        "parameters": redact_entries(record.get("parameters", {})),
        "ignored": record.get("ignored", []),
        "versions": record.get("versions", {}),
        "command_line": record.get("command_line"),
        "resume_from": record.get("resume_from"),
        "result": read_result(run),  # its paths where the run directory is now
        "checkpoints": checkpoints,
        "eval": _eval(run),
    })


def _eval(run: Path) -> dict[str, Any] | None:
    """The run's ``thub eval`` summary (base vs tuned per task), None when never evaluated."""
    from thub.evaluate.results import run_summary

    return run_summary(run)


def diff(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    """Parameters (and algorithm, backend, library versions) that differ between two runs."""
    records = []
    for run in (run_a, run_b):
        record = _read(Path(run) / "thub_run.json")
        if record is None:
            raise UsageError(f"{run}: not a thub run (no readable thub_run.json)")
        records.append(record)
    a, b = records
    params_a, params_b = a.get("parameters", {}), b.get("parameters", {})
    changed = []
    for name in sorted(set(params_a) | set(params_b)):
        pa, pb = params_a.get(name, {}), params_b.get(name, {})
        if pa.get("value") != pb.get("value"):
            changed.append({"name": name, "a": redact(pa.get("value"), name), "b": redact(pb.get("value"), name),
                            "source_a": pa.get("source"), "source_b": pb.get("source")})
    top = []
    for key in ("algorithm", "backend"):
        if a.get(key) != b.get(key):
            top.append({"name": key, "a": a.get(key), "b": b.get(key)})
    lib_a, lib_b = (r.get("versions", {}).get("library", {}) for r in (a, b))
    if lib_a != lib_b:
        top.append({"name": "library", "a": lib_a, "b": lib_b})
    return redact({"a": str(run_a), "b": str(run_b), "run": top, "parameters": changed})
