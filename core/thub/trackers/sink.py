"""Writing a run to the trackers from thub's parent process (the ``thub`` route).

For a backend whose library has no hook for a tracker, the built-in plugin
``thub_builtins.trackers`` opens a :class:`ParentSink` on the ``started`` event and feeds it every
line of the unified metrics stream the supervisor already reads. Metric names follow HF Trainer's
integrations, so runs of every backend line up in one dashboard (:func:`hf_tag`); the step is
thub's ``step``. Each tracker's writer is its plugin's (``TrackerSpec.writer``).

Each tracker is written from its own thread through a bounded queue (:class:`_Worker`), so the
supervisor's poll loop never waits for a store; ``close`` flushes them at the end of the run. Each
writer (and its tracker's package) is imported only when it opens. A writer that fails is reported once on
stderr and dropped: a tracker never stops training.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from thub.specs import load_object
from thub.trackers import by_name, read_record, run_metadata, title, update_record

# fields of a metrics line that are bookkeeping, not metrics
SKIP_FIELDS = frozenset({"step", "max_steps", "timestamp"})


def hf_tag(name: str) -> str:
    """A metric's TensorBoard/W&B name as HF Trainer's integrations write it (``rewrite_logs``):
    ``eval_<x>`` (an evaluation line's numbers) as ``eval/<x>``, every other as ``train/<name>``."""
    return f"eval/{name.removeprefix('eval_')}" if name.startswith("eval_") else f"train/{name}"


def numeric_metrics(line: Mapping[str, Any]) -> dict[str, float]:
    """The metrics of one ``training_metrics.jsonl`` line (numbers only, bookkeeping left out)."""
    return {k: float(v) for k, v in line.items()
            if k not in SKIP_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def open_writer(tracker: str, params: Mapping[str, Any], metadata: Mapping[str, Any],
                previous: Mapping[str, Any] | None = None) -> Any:
    """The writer of ``tracker`` for a run (``TrackerSpec.writer``); ``previous`` (its
    ``trackers.json`` entry) resumes."""
    return load_object(by_name()[tracker].writer)(params, metadata, previous)


# lines a tracker may fall behind by before thub drops (and counts) further lines for it
QUEUE_LINES = 10_000
# at the end of a run, how long thub waits for each tracker to write what it still holds
FLUSH_SECONDS = 60.0
_CLOSE = object()


class _Worker:
    """One tracker's writer on its own thread, fed through a bounded queue.

    The supervisor's poll loop only enqueues: a slow or unreachable store (an MLflow server that
    does not answer, W&B starting) never delays progress, signals or other trackers. The first
    failure is reported once and the tracker stops; the run goes on.
    """

    def __init__(self, name: str, run_dir: str, params: Mapping[str, Any], metadata: Mapping[str, Any],
                 previous: Mapping[str, Any] | None) -> None:
        import queue
        import threading

        self.name = name
        self.dropped = 0
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_LINES)
        self.thread = threading.Thread(target=self._run, args=(run_dir, params, metadata, previous),
                                       name=f"thub-tracker-{name}", daemon=True)
        self.thread.start()

    def put(self, item: Any) -> None:
        import queue

        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def _run(self, run_dir: str, params: Mapping[str, Any], metadata: Mapping[str, Any],
             previous: Mapping[str, Any] | None) -> None:
        try:
            writer = open_writer(self.name, params, metadata, previous)
            update_record(run_dir, self.name, {"route": "thub", **writer.info()})
        except Exception as exc:  # noqa: BLE001 - a tracker never stops training
            _warn(self.name, "could not start", exc)
            self._discard()
            return
        while True:
            item = self.queue.get()
            try:
                if isinstance(item, tuple) and item[0] is _CLOSE:
                    writer.close(item[1])
                    return
                writer.log(*item)
            except Exception as exc:  # noqa: BLE001
                _warn(self.name, "could not close its run" if item[0] is _CLOSE else "stopped logging", exc)
                self._discard()
                return

    def _discard(self) -> None:
        """Take what is queued and what comes later without writing it (the tracker has failed)."""
        while True:
            item = self.queue.get()
            if isinstance(item, tuple) and item[0] is _CLOSE:
                return

    def close(self, status: str, timeout: float) -> None:
        import queue

        try:
            self.queue.put((_CLOSE, status), timeout=timeout)  # waits only while the queue is full
        except queue.Full:
            pass
        self.thread.join(timeout)
        if self.thread.is_alive():
            _warn(self.name, f"did not finish writing within {timeout:g} s", TimeoutError(
                f"{self.queue.qsize()} lines not written; the tracker's run may stay open"))
        elif self.dropped:
            _warn(self.name, "fell behind", OverflowError(f"{self.dropped} metrics lines were not logged"))


class ParentSink:
    """The trackers thub logs for one run from the parent process, each on its own thread."""

    def __init__(self, run_dir: str, record: Mapping[str, Any], trackers: list[str], *, resume: bool) -> None:
        self.run_dir = run_dir
        from thub.redact import real_values  # the record shows secrets redacted; the tracker needs them

        params = real_values({name: entry.get("value") for name, entry in (record.get("parameters") or {}).items()},
                             run_dir)
        metadata = run_metadata(record)
        previous = read_record(run_dir) if resume else {}
        self.workers = [_Worker(name, run_dir, params, metadata, previous.get(name)) for name in trackers]

    def log(self, line: Mapping[str, Any]) -> None:
        """Queue one metrics line for every tracker (never waits for a tracker)."""
        step = line.get("step")
        metrics = numeric_metrics(line)
        if not isinstance(step, int) or not metrics:
            return
        for worker in self.workers:
            worker.put((step, metrics, line.get("timestamp")))

    def close(self, status: str, timeout: float | None = None) -> None:
        """Write what is queued and end each tracker's run with the run's status."""
        timeout = FLUSH_SECONDS if timeout is None else timeout
        for worker in self.workers:
            worker.close(status, timeout)
        self.workers = []


def _warn(tracker: str, what: str, exc: BaseException) -> None:
    print(f"thub: WARNING: {title(tracker)} {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
