"""An experiment tracker from outside thub: a run's metrics appended to a JSON-lines file.

Registered through ``thub_register_trackers`` only; its parameter (``jsonl_tracker_path``) is a
field of its own model, which thub adds to every algorithm's parameters. Nothing here imports more
than the standard library and thub's public modules.
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import TrackerSpec


@hookimpl
def thub_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    register(TrackerSpec(
        name="jsonl", title="JSON-lines file", key="jsonl_tracker_path", params=("jsonl_tracker_path",),
        parameters="thub_plugin_jsonl_tracker.writer:JsonlParams",
        writer="thub_plugin_jsonl_tracker.writer:open_writer",
        where="thub_plugin_jsonl_tracker.writer:where",
        problems="thub_plugin_jsonl_tracker.writer:problems",
        summary="Every metrics line appended to a JSON-lines file."))
