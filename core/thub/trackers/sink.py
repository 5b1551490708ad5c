"""Writing a run to the trackers from thub's parent process (the ``thub`` route).

For a backend whose library has no hook for a tracker, the built-in plugin
``thub_builtins.trackers`` opens a :class:`ParentSink` on the ``started`` event and feeds it every
line of the unified metrics stream the supervisor already reads. Metric names follow HF Trainer's
integrations, so runs of every backend line up in one dashboard: TensorBoard and W&B ``train/<name>``
(W&B also ``train/global_step``), MLflow ``<name>``; the step is thub's ``step``.

Each tracker is written from its own thread through a bounded queue (:class:`_Worker`), so the
supervisor's poll loop never waits for a store; ``close`` flushes them at the end of the run. Each
tracker package is imported only when its writer opens. A writer that fails is reported once on
stderr and dropped: a tracker never stops training.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thub.trackers import BY_NAME, metadata_markdown, read_record, run_metadata, run_name, update_record, wandb_dir

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


class TensorBoardWriter:
    """Event files written with tensorboard's own ``EventFileWriter`` (no torch, no TensorFlow)."""

    def __init__(self, log_dir: str) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.log_dir = log_dir
        self.writer = EventFileWriter(log_dir)

    def text(self, tag: str, text: str) -> None:
        """A text summary (TensorBoard's Text tab), as torch's ``SummaryWriter.add_text`` writes it."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
            plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        value = Summary.Value(tag=f"{tag}/text_summary", metadata=metadata, tensor=tensor)
        self.writer.add_event(Event(wall_time=time.time(), step=0, summary=Summary(value=[value])))
        self.writer.flush()

    def log(self, step: int, metrics: Mapping[str, float], wall_time: float | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=hf_tag(k), simple_value=v) for k, v in metrics.items()]
        self.writer.add_event(Event(wall_time=wall_time or time.time(), step=step, summary=Summary(value=values)))
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()

    def info(self) -> dict[str, Any]:
        return {"path": self.log_dir}


def mlflow_params(metadata: Mapping[str, Any], limit: int = 6000) -> dict[str, str]:
    """``thub.<name>`` -> value (and ``thub.algorithm``/``thub.backend``), cut to MLflow's length limit.

    The prefix keeps them apart from what a library logs itself (HF Trainer logs ``learning_rate``
    etc. from TrainingArguments; MLflow refuses a param logged twice with two values).
    """
    params = {"thub.algorithm": str(metadata["algorithm"]), "thub.backend": str(metadata["backend"])}
    for name, entry in metadata["parameters"].items():
        if entry["value"] is not None:
            params[f"thub.{name}"] = str(entry["value"])[:limit]
    return params


class MlflowWriter:
    """A run created with ``MlflowClient`` (no global active run in the parent process)."""

    def __init__(self, params: Mapping[str, Any], metadata: Mapping[str, Any], run_id: str | None = None) -> None:
        from mlflow import MlflowClient

        self.uri = str(params["mlflow_tracking_uri"])
        self.experiment = params.get("mlflow_experiment_name") or "Default"
        experiment_id = ensure_experiment(self.uri, self.experiment)
        self.client = MlflowClient(tracking_uri=self.uri)
        if run_id:  # resume: keep logging to the same run
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return
        run = self.client.create_run(experiment_id, run_name=run_name(params, "mlflow"),
                                     tags={"thub.run_dir": str(params["ckpt_output_dir"])})
        self.run_id = run.info.run_id
        log_metadata_mlflow(self.client, self.run_id, metadata)

    def log(self, step: int, metrics: Mapping[str, float], wall_time: float | None = None) -> None:
        from mlflow.entities import Metric

        stamp = int((wall_time or time.time()) * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, stamp, step) for k, v in metrics.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=mlflow_status(status))

    def info(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.uri, "experiment": self.experiment}


def mlflow_status(status: str) -> str:
    """MLflow's terminal run status for a thub run status (succeeded, interrupted, failed)."""
    return {"succeeded": "FINISHED", "interrupted": "KILLED"}.get(status, "FAILED")


def ensure_experiment(uri: str, name: str) -> str:
    """The id of experiment ``name`` in the store at ``uri``, created if missing.

    Under a ``sqlite:///DB`` store, artifacts go to ``mlartifacts/`` beside the database file, for
    a new store's ``Default`` experiment too: MLflow's default is ``./mlruns`` in whatever directory
    the run happened to start from. Call it before any other MLflow client opens a new store.
    """
    from mlflow import MlflowClient

    location = None
    if uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
        location = (database.parent / "mlartifacts").as_uri()
        if not database.exists():
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

            SqlAlchemyStore(uri, location)  # creates the tables and "Default" with that location
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(name)
    if found:
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=location))


def log_metadata_mlflow(client: Any, run_id: str, metadata: Mapping[str, Any]) -> None:
    """thub's parameters as MLflow params (``thub.<name>``), and the whole metadata with sources as
    the artifact ``thub/run_metadata.json``."""
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

    items = [Param(k, v) for k, v in mlflow_params(metadata, MAX_PARAM_VAL_LENGTH).items()]
    for start in range(0, len(items), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=items[start:start + MAX_PARAMS_TAGS_PER_BATCH])
    client.log_dict(run_id, dict(metadata), "thub/run_metadata.json")


class WandbWriter:
    """A W&B run started in the parent (``WANDB_MODE=offline`` works without an account)."""

    def __init__(self, params: Mapping[str, Any], metadata: Mapping[str, Any], run_id: str | None = None) -> None:
        import wandb

        directory = wandb_dir(params)
        Path(directory).mkdir(parents=True, exist_ok=True)
        # console off: the parent's output is thub's progress, not training; stats off: the
        # parent's CPU and memory say nothing about the training processes
        settings = wandb.Settings(console="off", x_disable_stats=True, silent=True)
        self.run = wandb.init(project=params["wandb_project"], entity=params.get("wandb_entity"),
                              name=run_name(params, "wandb"), dir=directory, config={"thub": dict(metadata)},
                              id=run_id, resume="allow" if run_id else None, reinit="create_new",
                              settings=settings)
        # wandb.init leaves its service's address in os.environ: a training child started later
        # by this process (another run, a library that logs W&B itself) would write through it
        os.environ.pop("WANDB_SERVICE", None)
        self.run.define_metric("train/global_step")
        self.run.define_metric("*", step_metric="train/global_step", step_sync=True)

    def log(self, step: int, metrics: Mapping[str, float], wall_time: float | None = None) -> None:
        self.run.log({**{hf_tag(k): v for k, v in metrics.items()}, "train/global_step": step}, step=step)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "succeeded" else 1)

    def info(self) -> dict[str, Any]:
        return {"run_id": self.run.id, "path": str(Path(self.run.dir).parent), "project": self.run.project,
                "mode": "offline" if self.run.offline else "online"}


def open_writer(tracker: str, params: Mapping[str, Any], metadata: Mapping[str, Any],
                previous: Mapping[str, Any] | None = None) -> Any:
    """The writer of ``tracker`` for a run; ``previous`` (its ``trackers.json`` entry) resumes."""
    run_id = (previous or {}).get("run_id")
    if tracker == "tensorboard":
        writer = TensorBoardWriter(str(params["tensorboard_log_dir"]))
        writer.text("thub/parameters", metadata_markdown(metadata))
        return writer
    if tracker == "mlflow":
        return MlflowWriter(params, metadata, run_id)
    return WandbWriter(params, metadata, run_id)


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
    title = BY_NAME[tracker].title if tracker in BY_NAME else tracker
    print(f"thub: WARNING: {title} {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
