"""verl's outputs turned into thub's: metrics lines and checkpoints. Pure Python.

verl's ``file`` logger (``trainer.logger`` contains ``file``) writes one JSON line per step to
``$VERL_FILE_LOGGER_PATH``: ``{"step": N, "data": {"critic/score/mean": ..., "actor/pg_loss": ...}}``.
It opens the file with mode ``wb``, so a resumed run truncates it: the follower notices and reads
from the start again, never repeating a step it already emitted. Checkpoints go to
``{default_local_dir}/global_step_N/actor/``; ``latest_checkpointed_iteration.txt`` is written
once a save is complete.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thub.backend import MetricsTail, PollingFollower

# verl metric -> thub metric
RENAMES = {
    "critic/score/mean": "mean_reward",
    "critic/score/max": "max_reward",
    "critic/score/min": "min_reward",
    "critic/rewards/mean": "reward",
    "actor/pg_loss": "loss",
    "actor/lr": "learning_rate",
    "actor/grad_norm": "grad_norm",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl_loss",
    "actor/pg_clipfrac": "clip_fraction",
    "response_length/mean": "response_length_mean",
    "response_length/clip_ratio": "response_clip_ratio",
    "prompt_length/mean": "prompt_length_mean",
    "timing_s/step": "step_time_s",
    "perf/throughput": "tokens_per_second_per_gpu",
    "perf/max_memory_allocated_gb": "peak_memory_gb",
}
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsConverter:
    """One verl file-logger line -> one thub metrics line (or None for a step already seen)."""

    def __init__(self, max_steps: int | None) -> None:
        self.max_steps = max_steps
        self.last_step = 0
        self.last: dict[str, Any] | None = None

    def convert(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        data = raw.get("data")
        if not isinstance(data, dict) or not isinstance(raw.get("step"), int):
            return None
        step = raw["step"]
        if step <= self.last_step:
            return None  # a resumed run re-logs nothing new before its first new step
        self.last_step = step
        line: dict[str, Any] = {"step": step, "max_steps": self.max_steps}
        epoch = _number(data.get("training/epoch"))
        line["epoch"] = epoch
        for key, target in RENAMES.items():
            value = _number(data.get(key))
            if value is not None:
                line[target] = value
        if self.max_steps is not None and step > self.max_steps:
            self.max_steps = line["max_steps"] = step
        line["timestamp"] = time.time()
        self.last = line
        return line


def latest_step(checkpoints_dir: str | Path) -> int | None:
    """The step of the last complete verl checkpoint (``latest_checkpointed_iteration.txt``)."""
    marker = Path(checkpoints_dir) / "latest_checkpointed_iteration.txt"
    try:
        return int(marker.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def checkpoint_dirs(checkpoints_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, global_step_N)`` of complete checkpoints, oldest first (none after the marker's step)."""
    root = Path(checkpoints_dir)
    complete = latest_step(root)
    if complete is None or not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / "actor").is_dir() and int(match.group(1)) <= complete:
            found.append((int(match.group(1)), child))
    return sorted(found)


class OutputFollower(PollingFollower):
    """Follows the file logger and the checkpoint directory while verl trains (a daemon thread).

    ``emit(line)`` gets each thub metrics line, ``on_checkpoint(path, step)`` each new complete
    checkpoint (its ``actor/`` directory). :meth:`stop` does a last pass.
    """

    def __init__(self, metrics_path: str | Path, checkpoints_dir: str | Path, converter: MetricsConverter,
                 emit: Callable[[dict[str, Any]], Any], on_checkpoint: Callable[[Path, int], Any],
                 interval: float = 1.0) -> None:
        self.path = Path(metrics_path)
        self.checkpoints_dir = Path(checkpoints_dir)
        self.converter = converter
        self.emit = emit
        self.on_checkpoint = on_checkpoint
        # verl reopens the file with ``wb`` on a resumed run: read a rewritten file from its start
        self.tail = MetricsTail(self.path, follow_rewrites=True)
        self.seen = {step for step, _ in checkpoint_dirs(self.checkpoints_dir)}
        self._lock = threading.Lock()
        super().__init__(interval, "thub-verl-follower")

    def poll(self) -> None:
        with self._lock:
            for raw in self.tail.read():
                line = self.converter.convert(raw)
                if line is not None:
                    self.emit(line)
            for step, path in checkpoint_dirs(self.checkpoints_dir):
                if step not in self.seen:
                    self.seen.add(step)
                    self.on_checkpoint(path / "actor", step)
