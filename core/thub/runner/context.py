"""What a backend runner receives in the training child: :class:`RunContext`."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.runner.metrics import MetricsWriter
from thub.runner.rundir import RunDirectory

if TYPE_CHECKING:
    from thub.data.prepare import PrepareResult
    from thub.data.training import TrainingData


@dataclass
class RunContext:
    """The run as seen by a backend's ``run(context)`` function.

    Attributes:
        algorithm, backend: names.
        params: the validated parameters (JSON-compatible dict).
        run_dir: the run directory layout.
        resume_from: checkpoint path to continue from, or None.
        record: ``thub_run.json`` as read once by the child (values redacted; use ``params``).
        metrics: the metrics writer (use it on the main process only).
        retention: thub's own ``save_total_limit`` for a library that has none (the translation's
            ``retention`` section, :func:`thub.backend.thub_retention`): set it, and each
            :meth:`checkpoint` reported prunes the older ones (:mod:`thub.runner.retention`).
        protected_checkpoints: paths retention never deletes; :meth:`checkpoint` keeps the best
            checkpoint by ``eval_loss`` so far (:meth:`best_checkpoint`) too.

    The data comes from one entry: :meth:`data` / :meth:`rows` for the rows, :meth:`prepare` for
    thub's tokenized file. Never read ``params["data_path"]`` yourself: the parent already
    validated and mixed the data (``datasets``, ``mix_*``, tags) and these return those rows.
    """

    algorithm: str
    backend: str
    params: dict[str, Any]
    run_dir: RunDirectory
    resume_from: str | None = None
    # thub_run.json as the child read it (secrets redacted): sources and versions, for the trackers
    record: dict[str, Any] = field(default_factory=dict, repr=False)
    retention: dict[str, Any] | None = None
    protected_checkpoints: set[str] = field(default_factory=set)
    metrics: MetricsWriter = field(init=False)
    _stop_signal: int | None = field(default=None, init=False)
    _data: TrainingData | None = field(default=None, init=False, repr=False)

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
        """Report a complete saved checkpoint (the parent fires a ``checkpoint`` event); with
        :attr:`retention` set, the older complete ones beside it beyond ``save_total_limit`` are
        deleted then (never this one, the final model or a protected one)."""
        if not self.is_main:
            return
        line = json.dumps({"event": "checkpoint", "path": str(path), "step": step, "timestamp": time.time()})
        with open(self.run_dir.events, "a") as handle:
            handle.write(line + "\n")
        if self.retention:
            from thub.runner.retention import prune

            protect = {*self.protected_checkpoints, str(self.run_dir.path / "final")}
            best = self.best_checkpoint()
            if best is not None:  # the lowest eval_loss so far (an earlier best is pruned as any other)
                protect.add(best["path"])
            prune(path, int(self.retention["save_total_limit"]), root=self.run_dir.path, protect=protect)

    def best_checkpoint(self) -> dict[str, Any] | None:
        """The best checkpoint reported so far (the lowest ``eval_loss`` at a checkpoint's step,
        :func:`thub.runner.best.best_checkpoint`), or None: the run does not validate, or no
        checkpoint was saved at an evaluated step yet."""
        from thub.runner.best import best_checkpoint
        from thub.runner.metrics import read_metrics

        checkpoints = [e for e in read_metrics(self.run_dir.events) if "path" in e]
        return best_checkpoint(read_metrics(self.run_dir.metrics), checkpoints)

    def data(self) -> TrainingData:
        """The rows this run trains on, validated, normalised and mixed, with their locations
        and kind: the parent's validation read back from the run directory (``thub_data/``), or,
        where it kept none for this data (a file's contents changed since), validated now. Read
        once per process; which copy it is goes into ``thub_run.json`` (``data.trained_on``, one
        entry per attempt: a SLURM restart says whether it trained on the submission's rows)."""
        if self._data is None:
            from thub.data.training import DATA_DIR, trained_data

            self._data, found = trained_data(self.params, self.run_dir.path / DATA_DIR)
            if self.is_main:
                self._note_data(found)
        return self._data

    def _note_data(self, found: dict[str, Any]) -> None:
        """Say which copy of the rows this attempt trains on, in the log and in ``thub_run.json``."""
        from thub.runner.rundir import read_json, write_json_atomic

        key = str(found.get("key", ""))[:12]
        said = {"kept": f"the rows validated at launch (thub_data/, key {key})",
                "validated now": f"the data files as they are now, validated again (key {key})"}[found["copy"]]
        why = [f"{path} was deleted since: the kept rows are the only copy" for path in found.get("missing", [])]
        why += [f"{path} changed since the rows were kept" for path in found.get("changed", [])]
        print(f"thub child: training on {said}" + "".join(f"; {line}" for line in why), flush=True)
        record = read_json(self.run_dir.record)
        if record is None:
            return
        entry = {"at": time.time(), **found}
        data = record.setdefault("data", {})
        data.setdefault("trained_on", []).append(entry)
        try:
            write_json_atomic(self.run_dir.record, record)
        except OSError:
            pass  # a full disk: the log line above says it

    def rows(self) -> list[dict[str, Any]]:
        """The canonical rows of :meth:`data` (see :mod:`thub.data.formats`)."""
        return self.data().rows

    def report_built(self, labels: Any = None, *, examples: int | None = None, by: str,
                     reason: str | None = None, samples_per_step: int | None = None) -> dict[str, Any]:
        """Report what the library built, before step 1: each example's labels as the library
        trains them (or, for a library that masks nothing, the number of ``examples``); thub
        compares it with what it validated and raises ``DataMismatch`` (exit 2) on a difference
        unless ``allow_data_mismatch`` is set. See :func:`thub.runner.built.report_built`.

        Trainer-based runners get this from :func:`thub.backend.metrics_callback` for free.
        """
        from thub.runner.built import report_built

        return report_built(self, labels, examples=examples, by=by, reason=reason, samples_per_step=samples_per_step)

    def prepare(self, tokenizer: Any, output: str | Path, **options: Any) -> PrepareResult:
        """Tokenize :meth:`data` into ``output`` with :func:`thub.data.prepare` (cached by content).

        ``options`` are prepare's tokenizing keywords (``max_seq_len``, ``overlong``, ``unmask``,
        ``num_proc``, ``use_cache``, ``output_format``); the sources and the mixing settings are
        the run's own.
        """
        from thub.data.prepare import prepare
        from thub.data.training import mix_settings, training_sources

        return prepare(training_sources(self.params), tokenizer, output, **mix_settings(self.params), **options,
                       validated=self.data())

    def prepare_validation(self, tokenizer: Any, output: str | Path, **options: Any) -> PrepareResult | None:
        """``validation_data_path``'s rows tokenized into ``output`` as :meth:`prepare` tokenizes
        the training rows (the same ``options``); None when the run has no such file."""
        from thub.data.prepare import prepare
        from thub.data.validation import validation_data, validation_source

        held_out = validation_data(self.params)
        source = validation_source(self.params)
        if held_out is None or source is None:
            return None
        return prepare([source], tokenizer, output, seed=int(self.params.get("seed", 42)), **options,
                       validated=held_out)
