"""instructlab-training's outputs turned into thub's: metrics lines and checkpoints. Pure Python.

instructlab-training writes ``{ckpt_output_dir}/training_params_and_metrics_global{rank}.jsonl``:
hparams lines (``vars(args)``, then one with ``num_batches``/``total_samples``), one line per
optimizer step (``epoch``, ``step``, ``lr``, ``avg_loss``, ``samples_seen``, ``num_epoch_steps``,
``gradnorm``, ... and an ISO ``timestamp``), and validation lines (``val_loss``, with ``step``).
Checkpoints go to ``{ckpt_output_dir}/hf_format/samples_{N}`` (or ``last_epoch``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from thub.backend import MetricsTail, PollingFollower

# instructlab field -> thub field (the rest of the numeric fields are kept under their own names)
_RENAMES = {"avg_loss": "loss", "lr": "learning_rate", "gradnorm": "grad_norm",
            "overall_throughput": "samples_per_second"}
_DROP = {"rank", "timestamp", "step", "epoch"}
_SAMPLES_DIR = re.compile(r"^samples_(\d+)$")


def metrics_file(ckpt_output_dir: str | Path, rank: int = 0) -> Path:
    return Path(ckpt_output_dir) / f"training_params_and_metrics_global{rank}.jsonl"


def expected_max_steps(num_samples: int, effective_batch_size: int, num_epochs: int,
                       validation_split: float = 0.0) -> int:
    """Optimizer steps instructlab-training will take: ceil(train samples / batch) x epochs.

    Its loader batches ``effective_batch_size`` samples with ``drop_last=False``; the validation
    split (``datasets.train_test_split``) takes ``ceil(split x n)`` samples.
    """
    train = num_samples - (math.ceil(validation_split * num_samples) if validation_split else 0)
    return max(1, math.ceil(max(train, 0) / effective_batch_size)) * num_epochs


def _timestamp(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


class MetricsConverter:
    """Turns instructlab metrics lines into thub metrics lines (``None`` for lines that are not steps).

    ``max_steps`` starts from thub's estimate and becomes exact once instructlab reports
    ``num_epoch_steps`` (steps per epoch) or its ``num_batches`` hparams line.

    Each attempt (a run, then each ``--resume``) appends to instructlab's file, starting with its
    hparams lines. An attempt resumed from an epoch-boundary ``full_state/epoch_E`` counts steps
    from 1 again while its ``epoch`` is E+1 (``main_ds.py``: ``global_step = 1``, ``last_step`` 0),
    so the steps of an attempt are shifted to start at ``epoch × num_epoch_steps + 1``.
    :meth:`replay` reads the earlier attempts' lines back; :meth:`release` hands back those before
    the first step of this attempt, so every step is logged once, the redone ones from this attempt.
    """

    def __init__(self, max_steps: int | None, num_epochs: int) -> None:
        self.max_steps = max_steps
        self.num_epochs = num_epochs
        self.hparams: list[dict[str, Any]] = []
        self.step_for_samples: dict[int, int] = {}
        self.last: dict[str, Any] | None = None
        self._offset: int | None = None  # of this attempt's step numbers; None until its first step
        # earlier attempts' lines, by (step, is an evaluation line): a step's training line comes first
        self._held: dict[tuple[int, bool], dict[str, Any]] = {}

    def replay(self, raw: dict[str, Any]) -> None:
        """An earlier attempt's line: converted and held; a later attempt's steps replace it."""
        line = self.convert(raw)
        if line is not None:
            self._held[(line["step"], "eval_loss" in line)] = line

    def release(self, before: int | None = None) -> list[dict[str, Any]]:
        """The held lines of steps before ``before`` (all of them when None), oldest first; the
        others are dropped (this attempt redoes them)."""
        held, self._held = self._held, {}
        return [held[key] for key in sorted(held) if before is None or key[0] < before]

    def convert(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        if "avg_loss" not in raw:
            if isinstance(raw.get("val_loss"), (int, float)) and isinstance(raw.get("step"), int):
                return self._evaluation(raw)
            if "step" not in raw:
                self.hparams.append(raw)
                self._offset = None  # a new attempt starts with its hparams
                if isinstance(raw.get("num_batches"), int):
                    self.max_steps = raw["num_batches"] * self.num_epochs
            return None
        if isinstance(raw.get("num_epoch_steps"), int):
            self.max_steps = raw["num_epoch_steps"] * self.num_epochs
        step = int(raw["step"])
        if self._offset is None:
            epoch, per_epoch = raw.get("epoch"), raw.get("num_epoch_steps")
            first = epoch * per_epoch + 1 if isinstance(epoch, int) and isinstance(per_epoch, int) else step
            self._offset = max(0, first - step)
            # a later attempt redoes its steps: drop the held lines from its first step on
            self._held = {key: line for key, line in self._held.items() if key[0] < step + self._offset}
        step += self._offset
        line: dict[str, Any] = {"step": step, "max_steps": self.max_steps, "epoch": raw.get("epoch")}
        for key, value in raw.items():
            if key in _DROP or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            line[_RENAMES.get(key, key)] = value
        timestamp = _timestamp(raw.get("timestamp"))
        if timestamp is not None:
            line["timestamp"] = timestamp
        if isinstance(raw.get("samples_seen"), int):
            self.step_for_samples[raw["samples_seen"]] = step
        self.last = line
        return line

    def _evaluation(self, raw: dict[str, Any]) -> dict[str, Any]:
        """instructlab's validation line (``val_loss`` after optimizer step ``step``) as thub's
        evaluation line (``thub.backend.MetricsWriter.log_eval``'s fields: ``eval_loss`` at its step)."""
        step = int(raw["step"]) + (self._offset or 0)
        line: dict[str, Any] = {"step": step, "max_steps": self.max_steps,
                                "epoch": self.last.get("epoch") if self.last else None,
                                "eval_loss": float(raw["val_loss"])}
        for key, value in raw.items():
            if key.startswith("val_") and key != "val_loss" and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                line["eval_" + key.removeprefix("val_")] = value
        timestamp = _timestamp(raw.get("timestamp"))
        if timestamp is not None:
            line["timestamp"] = timestamp
        return line

    def step_of_checkpoint(self, path: Path) -> int | None:
        """The optimizer step at which ``hf_format/samples_N`` was saved, when known."""
        match = _SAMPLES_DIR.match(path.name)
        if match:
            return self.step_for_samples.get(int(match.group(1)))
        return self.last["step"] if self.last else None


def checkpoint_dirs(ckpt_output_dir: str | Path) -> list[Path]:
    """Complete HF checkpoints under ``hf_format/`` (config plus weights written), oldest first."""
    root = Path(ckpt_output_dir) / "hf_format"
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        if not child.is_dir() or not (child / "config.json").exists():
            continue
        if not any(child.glob("*.safetensors")) and not any(child.glob("*.bin")):
            continue
        match = _SAMPLES_DIR.match(child.name)
        found.append((int(match.group(1)) if match else math.inf, child.stat().st_mtime, child))
    return [path for *_, path in sorted(found, key=lambda item: (item[0], item[1]))]


class OutputFollower(PollingFollower):
    """Follows instructlab's metrics file and ``hf_format/`` while it trains (a daemon thread).

    ``emit(line)`` receives each thub metrics line; ``on_checkpoint(path, step)`` each new
    checkpoint directory. :meth:`stop` does a last pass, so nothing written before the end is lost.
    """

    def __init__(self, ckpt_output_dir: str | Path, converter: MetricsConverter,
                 emit: Callable[[dict[str, Any]], Any], on_checkpoint: Callable[[Path, int], Any],
                 rank: int = 0, interval: float = 0.5) -> None:
        self.ckpt_output_dir = Path(ckpt_output_dir)
        self.path = metrics_file(ckpt_output_dir, rank)
        self.converter = converter
        self.emit = emit
        self.on_checkpoint = on_checkpoint
        # a resumed run appends to the same file: the earlier attempts' lines are read back and
        # held; they are written before this attempt's first step (or at the end), up to that step
        self.tail = MetricsTail(self.path)
        for raw in self.tail.read():
            self.converter.replay(raw)
        self.seen = {str(p) for p in checkpoint_dirs(self.ckpt_output_dir)}
        super().__init__(interval, "thub-ilab-follower")

    def poll(self) -> None:
        for raw in self.tail.read():
            line = self.converter.convert(raw)
            if line is not None:
                for held in self.converter.release(before=line["step"]):
                    self.emit(held)
                self.emit(line)
        for path in checkpoint_dirs(self.ckpt_output_dir):
            if str(path) not in self.seen:
                self.seen.add(str(path))
                step = self.converter.step_of_checkpoint(path)
                self.on_checkpoint(path, step if step is not None else 0)

    def stop(self) -> None:
        super().stop()
        for held in self.converter.release():  # interrupted before this attempt's first step
            self.emit(held)
