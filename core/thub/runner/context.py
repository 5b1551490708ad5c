"""What a backend runner receives in the training child: :class:`RunContext`."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thub.runner.metrics import MetricsWriter
from thub.runner.rundir import RunDirectory


@dataclass
class RunContext:
    """The run as seen by a backend's ``run(context)`` function.

    Attributes:
        algorithm, backend: names.
        params: the validated parameters (JSON-compatible dict).
        run_dir: the run directory layout.
        resume_from: checkpoint path to continue from, or None.
        metrics: the metrics writer (use it on the main process only).
    """

    algorithm: str
    backend: str
    params: dict[str, Any]
    run_dir: RunDirectory
    resume_from: str | None = None
    metrics: MetricsWriter = field(init=False)
    _stop_signal: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.metrics = MetricsWriter(self.run_dir.metrics)

    @property
    def rank(self) -> int:
        return int(os.environ.get("RANK", "0"))

    @property
    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def stop_requested(self) -> bool:
        """True once SIGTERM/SIGINT arrived: save a checkpoint and return."""
        return self._stop_signal is not None

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self._stop_signal = signum

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def checkpoint(self, path: str | Path, step: int) -> None:
        """Report a saved checkpoint (the parent fires a ``checkpoint`` event)."""
        if not self.is_main:
            return
        line = json.dumps({"event": "checkpoint", "path": str(path), "step": step, "timestamp": time.time()})
        with open(self.run_dir.events, "a") as handle:
            handle.write(line + "\n")
