"""TensorBoard, a tracker registered by ``thub_builtins.trackers``: its writer for the ``thub``
route, its plan line, checks and what it adds to a library's log directory (moved here from
``thub.trackers``). Imported only when a run turns TensorBoard on (``tensorboard_log_dir``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.trackers import metadata_markdown
from thub.trackers.sink import hf_tag

if TYPE_CHECKING:
    from thub.runner.context import RunContext
    from thub.specs import TrackerProblem


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


def open_writer(params: Mapping[str, Any], metadata: Mapping[str, Any],
                previous: Mapping[str, Any] | None = None) -> TensorBoardWriter:
    """The ``thub``-route writer: a new event file, thub's parameters as its first text summary."""
    writer = TensorBoardWriter(str(params["tensorboard_log_dir"]))
    writer.text("thub/parameters", metadata_markdown(metadata))
    return writer


def where(params: Mapping[str, Any]) -> str:
    return str(params["tensorboard_log_dir"])


def record(params: Mapping[str, Any]) -> dict[str, Any]:
    return {"log_dir": params["tensorboard_log_dir"]}


def problems(params: Mapping[str, Any], python: str | None, environ: Mapping[str, str]) -> list[TrackerProblem]:
    from thub.specs import TrackerProblem
    from thub.trackers.check import writable_dir

    why = writable_dir(Path(str(params["tensorboard_log_dir"])).expanduser())
    return [TrackerProblem("tensorboard", f"tensorboard_log_dir: {why}", "choose a writable directory")] if why else []


def annotate(metadata: dict[str, Any]) -> dict[str, Any] | None:
    import os

    log_dir = os.environ.get("TENSORBOARD_LOGGING_DIR")
    if not log_dir:
        return None
    writer = TensorBoardWriter(log_dir)  # its own event file next to the library's
    writer.text("thub/parameters", metadata_markdown(metadata))
    writer.close("running")
    return {"path": log_dir}


def prepare(context: RunContext, metadata: dict[str, Any], _: str | None) -> tuple[dict[str, str], dict]:
    log_dir = str(context.params["tensorboard_log_dir"])
    writer = TensorBoardWriter(log_dir)  # its own event file next to the library's
    writer.text("thub/parameters", metadata_markdown(metadata))
    writer.close("running")
    return {}, {"path": log_dir}


def trainer_environment(params: Mapping[str, Any]) -> dict[str, str]:
    # transformers 5 has no TrainingArguments.logging_dir: TensorBoardCallback reads this variable
    return {"TENSORBOARD_LOGGING_DIR": params["tensorboard_log_dir"]}
