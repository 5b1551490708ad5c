"""mini-trainer's ``training_metrics_{node_rank}.jsonl`` -> thub's ``training_metrics.jsonl``, live.

Pure Python (no torch): the runner polls :class:`MetricsConverter` while mini-trainer trains.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from thub.backend import MetricsTail, MetricsWriter

# mini-trainer field -> thub field; other numeric fields are kept under their own names
RENAMED = {"lr": "learning_rate", "peak_memory_usage_GB": "peak_memory_gb"}
DROPPED = {"step", "epoch", "timestamp"}

_SAMPLES = re.compile(r"^samples_(\d+(?:\.\d+)?)(_best_val_loss)?$")


def estimate_max_steps(num_train: int, batch_size: int, training_mode: str, max_epochs: int, max_steps: int) -> int:
    """Optimizer steps mini-trainer will take: ``ceil(samples / batch_size)`` per epoch (drop_last=False)."""
    if training_mode == "step":
        return max_steps
    return math.ceil(num_train / batch_size) * max_epochs if num_train else 0


def _timestamp(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp()  # mini-trainer: local datetime.now().isoformat()
    except ValueError:
        import time

        return time.time()


def convert_line(line: dict[str, Any], max_steps: int | None, training_mode: str = "epoch",
                 max_epochs: int = 1) -> dict[str, Any]:
    """One mini-trainer metrics line as thub fields (without writing it)."""
    step = int(line["step"])
    per_epoch = line.get("steps_per_epoch")
    if training_mode == "epoch" and per_epoch:
        max_steps = int(per_epoch) * max_epochs  # exact: len(data_loader) x epochs
    out: dict[str, Any] = {"step": step, "max_steps": max_steps}
    # mini-trainer's epoch is the 0-based epoch counter; thub's is fractional progress like HF Trainer's
    out["epoch"] = round(step / per_epoch, 4) if per_epoch else line.get("epoch")
    for key, value in line.items():
        if key in DROPPED or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[RENAMED.get(key, key)] = value
    out["timestamp"] = _timestamp(line.get("timestamp"))
    return out


class MetricsConverter:
    """Follows mini-trainer's metrics file and appends converted lines to thub's stream.

    ``start_offset`` skips lines already there (a resumed run appends to the same file);
    ``logging_steps`` keeps every N-th step (and the last one).
    """

    def __init__(self, source: str | Path, writer: MetricsWriter, *, max_steps: int | None,
                 training_mode: str = "epoch", max_epochs: int = 1, logging_steps: int = 1,
                 start_offset: int = 0) -> None:
        self.tail = MetricsTail(source)
        self.tail.offset = start_offset
        self.writer = writer
        self.max_steps = max_steps
        self.training_mode = training_mode
        self.max_epochs = max_epochs
        self.logging_steps = max(1, logging_steps)
        self.samples_to_step: dict[int, int] = {}
        self.last: dict[str, Any] | None = None

    def poll(self) -> list[dict[str, Any]]:
        written = []
        for raw in self.tail.poll():
            if "step" not in raw or "loss" not in raw:
                continue  # not a training-step line
            line = convert_line(raw, self.max_steps, self.training_mode, self.max_epochs)
            self.max_steps = line["max_steps"]
            if raw.get("total_samples_accumulated") is not None:
                self.samples_to_step[int(raw["total_samples_accumulated"])] = line["step"]
            # mini-trainer puts a step's validation (val_loss, val_num_samples, ...) in its training
            # line: thub's stream has it as an evaluation line of its own at that step (issue 28)
            validation = {key: line.pop(key) for key in [k for k in line if k.startswith("val_")]}
            self.last = line
            if line["step"] % self.logging_steps == 0 or line["step"] == line["max_steps"]:
                written.append(self.writer.log(**line))
            if isinstance(validation.get("val_loss"), (int, float)):
                extra = {"eval_" + key.removeprefix("val_"): value for key, value in validation.items()
                         if key != "val_loss"}
                written.append(self.writer.log_eval(line["step"], validation["val_loss"], epoch=line["epoch"],
                                                    max_steps=line["max_steps"], timestamp=line["timestamp"],
                                                    **extra))
        return written


def hf_checkpoints(output_dir: str | Path) -> list[tuple[Path, int, bool]]:
    """Finished ``hf_format/samples_N[_best_val_loss]`` checkpoints: ``(path, samples, best_val_loss)``.

    A directory counts once its config and tokenizer are written (mini-trainer writes the weights,
    then the config, then the tokenizer), sorted by samples.
    """
    root = Path(output_dir) / "hf_format"
    found = []
    if root.is_dir():
        for child in root.iterdir():
            match = _SAMPLES.match(child.name)
            if not (match and child.is_dir() and (child / "config.json").exists()):
                continue
            if not any((child / name).exists() for name in ("tokenizer_config.json", "tokenizer.json")):
                continue
            found.append((child, int(float(match.group(1))), bool(match.group(2))))
    return sorted(found, key=lambda item: (item[1], item[2]))


def latest_full_state(output_dir: str | Path) -> tuple[Path, int] | None:
    """The newest ``full_state_checkpoints/step_N`` with its ``training_state.pt`` (as mini-trainer finds it)."""
    root = Path(output_dir) / "full_state_checkpoints"
    found = []
    if root.is_dir():
        for child in root.iterdir():
            step = _full_state_step(child.name)
            if step is not None and (child / "training_state.pt").exists():
                found.append((step, child))
    if not found:
        return None
    step, path = max(found)
    return path, step


def _full_state_step(name: str) -> int | None:
    suffix = name.removeprefix("step_")
    return int(suffix) if name.startswith("step_") and suffix.isdigit() else None


def full_state_problem(path: Path) -> str | None:
    """Why a ``full_state_checkpoints/step_N`` cannot be resumed from (None: complete): mini-trainer's
    FullStateCheckpointer writes the model shards (``distributed/``), each rank's optimizer and RNG
    state, then ``training_state.pt``; a kill in between leaves some of them out."""
    from thub.backend import saved_file_problem

    if not (path / "distributed" / ".metadata").is_file():
        return "no distributed/.metadata (the model shards)"
    problem = saved_file_problem(path / "training_state.pt")
    if problem:
        return problem
    ranks = {kind: sorted(int(f.name.split("_rank_")[1].split(".")[0]) for f in path.glob(f"{kind}_rank_*.pt"))
             for kind in ("optimizer", "rng_state")}
    if not ranks["optimizer"] or ranks["optimizer"] != list(range(len(ranks["optimizer"]))):
        return f"optimizer state of ranks {ranks['optimizer']} (expected 0..N-1)"
    if ranks["rng_state"] != ranks["optimizer"]:
        return f"RNG state of ranks {ranks['rng_state']}, optimizer state of ranks {ranks['optimizer']}"
    for rank in ranks["optimizer"]:
        problem = saved_file_problem(path / f"optimizer_rank_{rank}.pt")
        if problem:
            return problem
    return None


def resume_point(output_dir: str | Path) -> tuple[Path, int] | None:
    """thub's decision: the newest complete full-state checkpoint (newer incomplete ones moved aside,
    so mini-trainer's own auto-detection cannot pick them), passed to mini-trainer explicitly."""
    from thub.backend import library_resume_point

    return library_resume_point(Path(output_dir) / "full_state_checkpoints", _full_state_step, full_state_problem,
                                "mini-trainer")
