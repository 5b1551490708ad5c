"""Metric curves of one or more runs: read, smooth, summarise, draw (PNG/SVG) or sparkline.

Sources, first found wins (a path may also name a metrics file directly):

* thub's unified ``training_metrics.jsonl`` (every backend run through thub);
* TRL / HF Trainer ``trainer_state.json`` (``log_history``), newest ``checkpoint-N`` first;
* mini-trainer ``training_metrics_0.jsonl`` and instructlab ``training_params_and_metrics_global0.jsonl``.

The x-axis is the optimizer step recorded in the file (or tokens / wall time on request), never
the row index. matplotlib is imported only when an image is written.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thub.errors import ThubError, UsageError

# metric name -> keys tried in order on each line
METRIC_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "avg_loss", "train_loss", "avg_loss_backwards"),
    "reward": ("reward", "mean_reward", "rewards/mean", "train/reward"),
    "eval_loss": ("eval_loss", "val_loss", "validation_loss"),
    "learning_rate": ("learning_rate", "lr"),
    "grad_norm": ("grad_norm", "gradnorm", "total_norm"),
}
X_AXES = ("step", "tokens", "time")
_TOKEN_KEYS = ("num_tokens", "total_tokens", "tokens_seen")
_SPARK = "▁▂▃▄▅▆▇█"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


@dataclass
class Series:
    """One run's curve of one metric."""

    label: str
    run_dir: str
    source: str
    metric: str
    key: str
    x_axis: str
    xs: list[float]
    ys: list[float]
    smoothed: list[float] | None = None
    notes: list[str] = field(default_factory=list)
    #: what was left out of the file and why ("loss is not a finite number at step 2; skipped"):
    #: printed on stderr whatever the output
    warnings: list[str] = field(default_factory=list)
    #: whether larger is better (an eval metric says; None: guessed from the name)
    higher_is_better: bool | None = None

    def summary(self) -> dict[str, Any]:
        higher = self.higher_is_better
        if higher is None:
            higher = "reward" in self.metric or "accuracy" in self.metric
        best = max(self.ys) if higher else min(self.ys)
        return {
            "label": self.label, "run_dir": self.run_dir, "source": self.source, "metric": self.metric,
            "key": self.key, "x_axis": self.x_axis, "points": len(self.ys),
            "first_x": self.xs[0], "last_x": self.xs[-1], "first": self.ys[0], "last": self.ys[-1],
            "best": best, "last_smoothed": self.smoothed[-1] if self.smoothed else None, "notes": self.notes,
        }


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for raw in path.read_text(errors="replace").splitlines():
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a live run's partial last line, or a non-JSON log line
        if isinstance(value, dict):
            rows.append(value)
    return rows


def _read_trainer_state(path: Path) -> list[dict[str, Any]]:
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: unreadable trainer_state.json: {exc}") from None
    return [row for row in state.get("log_history", []) if isinstance(row, dict)]


def _newest_trainer_state(run_dir: Path) -> Path | None:
    found = []
    for parent in (run_dir, run_dir / "checkpoints"):
        if parent.is_dir():
            for child in parent.iterdir():
                match = _CHECKPOINT.search(child.name)
                if match and (child / "trainer_state.json").is_file():
                    found.append((int(match.group(1)), child / "trainer_state.json"))
    if found:
        return max(found)[1]
    return run_dir / "trainer_state.json" if (run_dir / "trainer_state.json").is_file() else None


def find_metrics(path: str | Path) -> tuple[list[dict[str, Any]], Path]:
    """The metric rows of a run directory (or a metrics file) and the file they came from."""
    path = Path(path)
    if path.is_file():
        rows = _read_trainer_state(path) if path.name.endswith(".json") else _read_jsonl(path)
        return rows, path
    if not path.is_dir():
        raise UsageError(f"{path}: no such run directory")
    candidates = [path / "training_metrics.jsonl"]
    state = _newest_trainer_state(path)
    if state:
        candidates.append(state)
    candidates += sorted(path.glob("training_metrics_0.jsonl"))
    candidates += sorted(path.glob("training_params_and_metrics_global0.jsonl"))
    candidates += sorted(path.glob("training_metrics_*.jsonl"))
    candidates += sorted(path.glob("training_params_and_metrics_global*.jsonl"))
    for candidate in candidates:
        if candidate.is_file():
            rows = _read_trainer_state(candidate) if candidate.suffix == ".json" else _read_jsonl(candidate)
            if rows:
                return rows, candidate
    raise UsageError(
        f"{path}: no metrics found (looked for training_metrics.jsonl, checkpoint-*/trainer_state.json, "
        "mini-trainer and instructlab metric files)"
    )


def run_record(path: str | Path) -> dict[str, Any] | None:
    """``thub_run.json`` of a run directory, if any."""
    record = Path(path) / "thub_run.json"
    try:
        return json.loads(record.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def default_label(path: str | Path) -> str:
    """``name (algorithm/backend)`` from thub_run.json, else the directory name."""
    path = Path(path)
    name = path.name if path.is_dir() else f"{path.parent.name}/{path.name}"
    record = run_record(path) if path.is_dir() else None
    if record:
        return f"{name} ({record.get('algorithm', '?')}/{record.get('backend', '?')})"
    return name


def default_metric(rows: list[dict[str, Any]], record: dict[str, Any] | None) -> str:
    """``reward`` for GRPO runs (or files with rewards but no loss), else ``loss``."""
    if record and str(record.get("algorithm", "")).endswith("grpo"):
        return "reward"
    has = {k for row in rows for k in row}
    if not has & set(METRIC_KEYS["loss"]) and has & set(METRIC_KEYS["reward"]):
        return "reward"
    return "loss"


def _number(value: Any) -> float | None:
    """A finite number, else None: a NaN or infinity (a foreign file's ``NaN``) is no point to draw."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _non_finite(rows: list[dict[str, Any]], key: str) -> list[str]:
    """Where ``key`` holds NaN or infinity: each row's step (or line number)."""
    return [str(row.get("step", row.get("global_step", index + 1))) for index, row in enumerate(rows)
            if isinstance(row.get(key), float) and not math.isfinite(row[key])]


def extract(rows: list[dict[str, Any]], metric: str, x_axis: str,
            where: str) -> tuple[list[float], list[float], str, list[str]]:
    """(xs, ys, key used, notes) for ``metric`` against ``x_axis``; lines without the metric are skipped."""
    keys = METRIC_KEYS.get(metric, (metric,))
    key = next((k for k in keys if any(_number(row.get(k)) is not None for row in rows)), None)
    if key is None:
        present = sorted({k for row in rows for k, v in row.items() if _number(v) is not None})
        raise UsageError(f"{where}: no {metric!r} values (tried {', '.join(keys)}); numeric keys: {', '.join(present)}")
    xs: list[float] = []
    ys: list[float] = []
    notes: list[str] = []
    start = next((_number(row.get("timestamp")) for row in rows if _number(row.get("timestamp")) is not None), None)
    for index, row in enumerate(rows):
        y = _number(row.get(key))
        if y is None:
            continue
        if x_axis == "step":
            x = _number(row.get("step", row.get("global_step")))
            if x is None:
                x = float(index + 1)
                if not notes:
                    notes.append("no step recorded: x is the line number")
        elif x_axis == "tokens":
            x = next((_number(row.get(k)) for k in _TOKEN_KEYS if _number(row.get(k)) is not None), None)
            if x is None:
                raise UsageError(f"{where}: no token counts ({', '.join(_TOKEN_KEYS)}) for --x tokens")
        else:
            ts = _number(row.get("timestamp"))
            if ts is None or start is None:
                raise UsageError(f"{where}: no timestamps for --x time")
            x = ts - start
        xs.append(x)
        ys.append(y)
    # a resumed run may repeat steps: keep the last value written for each x
    if x_axis == "step" and len(set(xs)) != len(xs):
        last = dict(zip(xs, ys, strict=True))
        xs, ys = sorted(last), [last[x] for x in sorted(last)]
        notes.append("repeated steps (resumed run): the last value of each step is shown")
    return xs, ys, key, notes


def ema(values: list[float], alpha: float) -> list[float]:
    """Exponential moving average: ``s_t = alpha * y_t + (1 - alpha) * s_{t-1}``, ``s_0 = y_0``."""
    if not 0 < alpha <= 1:
        raise UsageError(f"--ema {alpha}: expected a smoothing factor in (0, 1]")
    out: list[float] = []
    for value in values:
        out.append(value if not out else alpha * value + (1 - alpha) * out[-1])
    return out


def load_series(paths: list[str], *, metric: str | None = None, x_axis: str = "step",
                labels: list[str] | None = None, ema_alpha: float | None = None) -> list[Series]:
    """One :class:`Series` per path; the metric defaults per run (loss, reward for GRPO)."""
    if x_axis not in X_AXES:
        raise UsageError(f"--x {x_axis!r}: expected one of {', '.join(X_AXES)}")
    if labels and len(labels) != len(paths):
        raise UsageError(f"{len(labels)} --label value(s) for {len(paths)} run(s): give one per run or none")
    series = []
    for index, path in enumerate(paths):
        rows, source = find_metrics(path)
        record = run_record(path) if Path(path).is_dir() else None
        chosen = metric or default_metric(rows, record)
        xs, ys, key, notes = extract(rows, chosen, x_axis, str(source))
        item = Series(labels[index] if labels else default_label(path), str(path), str(source), chosen, key,
                      x_axis, xs, ys, notes=notes)
        bad = _non_finite(rows, key)
        if bad:
            item.warnings.append(f"{source}: {key} is not a finite number at step {', '.join(bad)}; skipped")
        if ema_alpha is not None:
            item.smoothed = ema(ys, ema_alpha)
        series.append(item)
    return series


def load_eval_series(paths: list[str], spec: str, labels: list[str] | None = None) -> list[Series]:
    """``thub plot --eval [TASK:]METRIC``: one :class:`Series` per run and task of ``thub eval``
    results (``RUN_DIR/eval/<task>.json``), the metric against the step each model was saved at
    (the base at 0; the final model at the run's last step). Without TASK: every task that has it."""
    from thub.evaluate.results import label_order, read_all, run_created

    task, _, metric = spec.rpartition(":")
    if not metric:
        raise UsageError(f"--eval {spec!r}: expected METRIC or TASK:METRIC")
    if labels and len(labels) != len(paths):
        raise UsageError(f"{len(labels)} --label value(s) for {len(paths)} run(s): give one per run or none")
    series = []
    for index, path in enumerate(paths):
        documents = read_all(Path(path) / "eval", run_created(path))  # not those of an earlier run here
        if not documents:
            raise UsageError(f"{path}: no eval results (RUN_DIR/eval/*.json); run `thub eval {path} --tasks ...`")
        chosen = [task] if task else [name for name, doc in documents.items()
                                      if any(metric in (m.get("metrics") or {}) for m in doc["models"].values())]
        if task and task not in documents:
            raise UsageError(f"{path}: no eval results for task {task!r}; evaluated: {', '.join(documents)}")
        if not chosen:
            raise UsageError(f"{path}: no evaluated task has a {metric!r} metric")
        for name in chosen:
            models = documents[name]["models"]
            points: dict[float, float] = {}
            higher = None
            for label, entry in sorted(models.items(), key=lambda kv: label_order(kv[0], kv[1].get("step"))):
                value = _number((entry.get("metrics") or {}).get(metric))
                step = 0 if label == "base" else entry.get("step")
                if value is None or not isinstance(step, int):
                    continue
                points[float(step)] = value  # the final model saved at a checkpoint's step: the later label
                higher = (entry.get("higher_is_better") or {}).get(metric, higher)
            if not points:
                raise UsageError(f"{path}: task {name!r} has no {metric!r} value of a model with a known step")
            base = labels[index] if labels else default_label(path)
            xs = sorted(points)
            source = str(Path(path) / "eval" / f"{name}.json")
            series.append(Series(f"{base} {name}", str(path), source, metric, metric, "step", xs,
                                 [points[x] for x in xs], notes=["eval: the base model is drawn at step 0"]
                                 if "base" in models else [], higher_is_better=higher))
    return series


def sparkline(values: list[float], width: int = 60) -> str:
    """A one-line bar chart of ``values`` resampled to at most ``width`` buckets (bucket means)."""
    if not values:
        return ""
    buckets = min(width, len(values))
    means = []
    for b in range(buckets):
        chunk = values[b * len(values) // buckets:(b + 1) * len(values) // buckets] or [values[-1]]
        means.append(sum(chunk) / len(chunk))
    low, high = min(means), max(means)
    if high == low:
        return _SPARK[len(_SPARK) // 2] * buckets
    return "".join(_SPARK[round((m - low) / (high - low) * (len(_SPARK) - 1))] for m in means)


def write_image(series: list[Series], output: str | Path, *, title: str | None = None,
                width: float = 8.0, height: float = 4.5, dpi: int = 100) -> Path:
    """Draw the curves with matplotlib (Agg) to PNG/SVG/PDF, chosen by the file suffix."""
    output = Path(output)
    if output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"-o {output}: the file must end in .png, .svg or .pdf")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ThubError(
            "matplotlib is not installed, so no image was written; install it with "
            "`pip install matplotlib`, or use --ascii / --json for a text summary"
        ) from None
    figure, axes = plt.subplots(figsize=(width, height), dpi=dpi)
    try:
        colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", [None])
        for index, item in enumerate(series):
            colour = colours[index % len(colours)]
            if item.smoothed is not None:
                axes.plot(item.xs, item.ys, color=colour, alpha=0.3, linewidth=1)
                axes.plot(item.xs, item.smoothed, color=colour, linewidth=1.8, label=f"{item.label} (EMA)")
            else:
                axes.plot(item.xs, item.ys, color=colour, linewidth=1.5, label=item.label,
                          marker="o" if len(item.xs) <= 20 else None, markersize=3)
        metrics = sorted({s.metric for s in series})
        x_label = {"step": "step", "tokens": "tokens", "time": "seconds since start"}[series[0].x_axis]
        axes.set_xlabel(x_label)
        axes.set_ylabel(", ".join(metrics))
        axes.set_title(title or f"{', '.join(metrics)} by {series[0].x_axis}")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small")
        figure.tight_layout()
        output.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(output, dpi=dpi)
    finally:
        plt.close(figure)
    return output
