"""The unified metrics stream ``training_metrics.jsonl`` (see docs/outputs.md).

Every line is one JSON object with at least ``step``, ``max_steps``, ``epoch``, ``timestamp``,
``learning_rate`` and ``loss`` (or ``reward`` for GRPO); preference tuning adds
:data:`PREFERENCE_FIELDS`. Each line is written with a single
``write`` on an ``O_APPEND`` descriptor, so a reader never sees half a line from a live run.
A NaN/inf value is written as ``null`` and its name listed in ``non_finite`` (JSON has no NaN),
which is what the supervisor's divergence check reads.

The held-out loss (``validation_split`` / ``validation_data_path``) is a line of its own, the same
on every backend (:data:`EVAL_FIELDS`, :meth:`MetricsWriter.log_eval`): ``step`` (the optimizer
step it was measured after), ``max_steps``, ``epoch``, ``timestamp`` and ``eval_loss``, with the
library's other ``eval_*`` numbers; it has no ``loss`` or ``learning_rate`` (:func:`is_eval_line`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REQUIRED_FIELDS = ("step", "max_steps", "epoch", "timestamp", "learning_rate")
#: preference tuning (dpo, kto): the implicit rewards (beta x the policy/reference log-ratio) of the
#: chosen and rejected answers, their margin and the fraction of pairs where chosen scores higher,
#: under the names TRL, LLaMA-Factory and axolotl log them. The one set of ``/`` names the stream
#: keeps from a library's logs (GRPO's per-function ``rewards/{fn}/mean`` and the like stay out).
PREFERENCE_FIELDS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
#: every evaluation line has these (the held-out loss at ``step``); its other fields are ``eval_*``
EVAL_FIELDS = ("step", "max_steps", "epoch", "timestamp", "eval_loss")


def is_eval_line(line: Mapping[str, Any]) -> bool:
    """Whether a metrics line is an evaluation line (``eval_loss``, no training ``loss``)."""
    return "eval_loss" in line and "loss" not in line


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN/inf are not JSON
    return value


class MetricsWriter:
    """Appends metrics lines; only the main process of a run should hold one."""

    def __init__(self, path: str | Path, max_steps: int | None = None) -> None:
        self.path = Path(path)
        self.max_steps = max_steps

    def log(self, step: int, **values: Any) -> dict[str, Any]:
        """Write one line for ``step``; ``max_steps`` and ``timestamp`` are filled in."""
        line = {"step": int(step), "max_steps": values.pop("max_steps", self.max_steps)}
        line.update({k: _clean(v) for k, v in values.items()})
        non_finite = [k for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)]
        if non_finite:
            line["non_finite"] = non_finite
        pause = os.environ.get("THUB_TEST_STEP_SLEEP")
        if pause and not is_eval_line(line):
            # the test suite's brake (thub.testing.interrupt): a signal sent after line N reaches a
            # run that cannot have finished meanwhile, however busy the machine
            time.sleep(float(pause))
        line.setdefault("timestamp", time.time())
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return line

    def log_eval(self, step: int, eval_loss: float, *, epoch: float | None, max_steps: int | None = None,
                 timestamp: float | None = None, **extra: Any) -> dict[str, Any]:
        """Write the evaluation line of ``step`` (:data:`EVAL_FIELDS`; ``timestamp`` unset: now);
        ``extra`` are the library's other evaluation numbers, each written as ``eval_<name>`` (a
        name already so prefixed as it is)."""
        values = {name if name.startswith("eval_") else f"eval_{name}": value for name, value in extra.items()
                  if isinstance(value, (int, float)) and not isinstance(value, bool)}
        if timestamp is not None:
            values["timestamp"] = timestamp
        return self.log(step, max_steps=max_steps if max_steps is not None else self.max_steps, epoch=epoch,
                        eval_loss=float(eval_loss), **values)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete lines of a metrics file (a trailing partial line is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return lines


def truncate_after(path: str | Path, step: int) -> int:
    """Drop lines logged after ``step`` (work lost since the checkpoint a resume starts from).

    Returns the number of lines removed.
    """
    path = Path(path)
    lines = read_metrics(path)
    keep = [line for line in lines if line.get("step", 0) <= step]
    if len(keep) != len(lines):
        from thub.fileio import write_text_atomic

        write_text_atomic(path, "".join(json.dumps(line) + "\n" for line in keep))
    return len(lines) - len(keep)


# the values whose NaN/inf means the weights are being destroyed
DIVERGENCE_KEYS = ("loss", "grad_norm")


class DivergenceWatch:
    """Counts consecutive metrics lines whose loss or grad norm is NaN/inf.

    ``update`` returns the "diverged at step K: ..." message once ``limit`` lines in a row are
    non-finite (K is the first of them); ``limit`` 0 never triggers.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streak: list[tuple[int, list[str]]] = []

    @staticmethod
    def non_finite(line: dict[str, Any]) -> list[str]:
        marked = line.get("non_finite") or []
        return [key for key in DIVERGENCE_KEYS
                if key in marked or (isinstance(line.get(key), float) and not math.isfinite(line[key]))]

    def update(self, line: dict[str, Any]) -> str | None:
        if is_eval_line(line):
            return None  # between two training lines: neither ends nor extends a streak
        bad = self.non_finite(line)
        if not bad:
            self.streak = []
            return None
        self.streak.append((int(line.get("step", 0)), bad))
        if not self.limit or len(self.streak) < self.limit:
            return None
        keys = sorted({key for _, keys in self.streak for key in keys})
        first, last = self.streak[0][0], self.streak[-1][0]
        verb = "was" if len(keys) == 1 else "were"
        return (f"diverged at step {first}: {' and '.join(keys)} {verb} NaN/inf for {len(self.streak)} consecutive "
                f"logged steps ({first}-{last}); lower the learning rate (divergence_steps=0 turns this check off)")


class MetricsTail:
    """Follows a JSONL file as it grows, yielding each new complete line once.

    The one reader of growing JSONL files for thub and its plugins (thub's own metrics and
    events, a library's metrics file). A trailing partial line waits for its newline; a line that
    is not JSON is skipped. ``offset`` starts reading there (lines already handled). With
    ``follow_rewrites``, a file rewritten from its start (shorter than what was read, or another
    first line: verl reopens its file with ``wb`` on a resumed run) is read again from the start.
    """

    def __init__(self, path: str | Path, *, offset: int = 0, follow_rewrites: bool = False) -> None:
        self.path = Path(path)
        self.offset = offset  # bytes read so far (a partial last line included, held in buffer)
        self.buffer = b""
        self.follow_rewrites = follow_rewrites
        self.head = b""  # the file's first line, once read (follow_rewrites)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.poll()

    def read(self) -> list[dict[str, Any]]:
        """The new complete lines (``list(self.poll())``)."""
        return list(self.poll())

    def _rewritten(self, handle: Any) -> bool:
        if os.fstat(handle.fileno()).st_size < self.offset:
            return True
        return bool(self.head) and handle.read(len(self.head)) != self.head

    def poll(self) -> Iterator[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                if self.follow_rewrites and self._rewritten(handle):
                    self.offset, self.buffer, self.head = 0, b"", b""
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        started_at_zero = self.offset == len(self.buffer)  # the buffer holds the file from its start
        self.offset += len(chunk)
        data = self.buffer + chunk
        if self.follow_rewrites and not self.head and started_at_zero and b"\n" in data:
            self.head = data[: data.index(b"\n") + 1]
        *complete, self.buffer = data.split(b"\n")
        for raw in complete:
            if raw.strip():
                try:
                    yield json.loads(raw)
                except json.JSONDecodeError:
                    continue
