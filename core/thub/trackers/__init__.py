"""Experiment trackers: how a run reaches each tracker a plugin registered
(``thub_register_trackers``, :class:`thub.specs.TrackerSpec`); the core names none itself (the
built-in ones come from ``thub_builtins.trackers``).

Every backend supports every tracker, by one of two routes (:func:`routes`):

* ``library``: the backend honours the tracker's parameters (lists them in its ``algorithms``
  and maps them in its translation); the training library logs itself (HF Trainer's
  ``report_to``, verl's loggers, ...).
* ``thub``: the backend honours none of them; thub logs the unified metrics stream
  (``training_metrics.jsonl``) from the parent process (:mod:`thub.trackers.sink`, fed by the
  built-in ``thub_on_event`` plugin ``thub_builtins.trackers``) with the tracker's writer.

Either way the run name defaults to the run directory's name, the resolved parameters with their
sources (secrets redacted) go to the tracker's params/config, and ``trackers.json`` in the run
directory records where the run went (``thub history show`` / ``thub runs status`` print it).

Pure Python: no tracker package is imported here; a tracker's code is named by import string.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.specs import TrackerSpec, load_object

if TYPE_CHECKING:
    from thub.config.resolve import ResolvedConfig
    from thub.specs import BackendSpec

RECORD_FILE = "trackers.json"


#: a tracker as its plugin registered it (``thub_register_trackers``)
Tracker = TrackerSpec


def trackers() -> tuple[TrackerSpec, ...]:
    """Every registered tracker, in registration order (the built-in ones first)."""
    from thub.manager import get_registry

    return tuple(get_registry().trackers.values())


def by_name() -> dict[str, TrackerSpec]:
    """Registered trackers by name."""
    return {t.name: t for t in trackers()}


def tracker_params() -> frozenset[str]:
    """The parameters of every registered tracker."""
    return frozenset(p for t in trackers() for p in t.params)


def title(name: str) -> str:
    """A tracker's name in messages (its own name when no plugin registers it)."""
    spec = by_name().get(name)
    return spec.title if spec is not None else name


def enabled(params: Mapping[str, Any]) -> list[Tracker]:
    """The trackers a run's parameters turn on (their ``key`` parameter is set)."""
    return [t for t in trackers() if params.get(t.key)]


def keyless(asked: set[str], params: Mapping[str, Any], backend: BackendSpec) -> list[tuple[str, Tracker]]:
    """The secondary tracker parameters the user set (``asked``) whose tracker is off (its ``key``
    unset), each with its tracker: they would change nothing (an error, :func:`check_keys`), unless
    the backend uses them alone (``BackendSpec.tracker_params_alone``: ART's model name)."""
    return [(name, tracker) for tracker in trackers() if not params.get(tracker.key)
            for name in tracker.params
            if name != tracker.key and name in asked and params.get(name) not in (None, "")
            and name not in backend.tracker_params_alone]


def check_keys(resolved: ResolvedConfig, backends: list[BackendSpec], allow_ignored: bool = False) -> None:
    """Refuse (:class:`~thub.errors.UsageError`, exit 2) a secondary tracker parameter set without its
    tracker's key, naming the key, every one at once; ``backends``: those to name as using it alone.
    With ``allow_ignored`` they are recorded in ``resolved.ignored`` instead (as not-honoured ones)."""
    found = keyless(resolved.user_set(), resolved.values(), resolved.backend)
    if not found:
        return
    problems = []
    for name, tracker in found:
        alone = [b.name for b in backends if name in b.tracker_params_alone]
        hint = f" (backends that use it alone: {', '.join(alone)})" if alone else ""
        problems.append(f"{name} (from {resolved.sources[name]}): changes nothing without {tracker.key}, which turns "
                        f"{tracker.title} on{hint}")
    if allow_ignored:
        resolved.ignored = [*resolved.ignored, *problems]
        return
    from thub.errors import UsageError

    keys = sorted({tracker.key for _name, tracker in found})
    raise UsageError("tracker parameters without their tracker:\n  " + "\n  ".join(problems)
                     + f"\nset {' / '.join(keys)} too, or remove them")


def route(backend: BackendSpec, algorithm: str, tracker: Tracker) -> str:
    """``"library"`` when the backend honours any of the tracker's parameters, else ``"thub"``."""
    return "library" if backend.honours(algorithm) & set(tracker.params) else "thub"


def routes(backend: BackendSpec, algorithm: str) -> dict[str, str]:
    """Tracker name -> ``"library"`` or ``"thub"`` for this backend and algorithm."""
    return {t.name: route(backend, algorithm, t) for t in trackers()}


def parent_logged_params(backend: BackendSpec, algorithm: str) -> frozenset[str]:
    """Tracker parameters thub honours itself for this backend (those of ``thub``-routed trackers).

    A tracker the library logs keeps the backend's own list: a parameter of it that the backend
    does not map (e.g. verl's MLflow has no experiment name) stays an error.
    """
    return frozenset(p for t in trackers() if route(backend, algorithm, t) == "thub" for p in t.params)


def run_name(params: Mapping[str, Any], tracker: str) -> str:
    """The tracker's run name: its ``*_run_name`` parameter, else the run directory's name."""
    spec = by_name().get(tracker)
    explicit = params.get(spec.run_name_param) if spec is not None and spec.run_name_param else None
    if explicit:
        return str(explicit)
    return _directory_name(params)


def tracker_run_names(params: Mapping[str, Any]) -> dict[str, str]:
    """The run-name parameter of each tracker the parameters turn on that has one
    (``TrackerSpec.run_name_param``): the given name, else the run directory's name (for a library
    that takes one name per tracker)."""
    return {t.run_name_param: run_name(params, t.name) for t in enabled(params) if t.run_name_param}


def shared_run_name(params: Mapping[str, Any], setting: str) -> str:
    """The one run name a library gives all its trackers (its ``setting``, e.g. ``"HF Trainer's
    run_name"``): a tracker's run-name parameter (``TrackerSpec.run_name_param``), else the run
    directory's name.

    Two different names are an error (a usage error naming ``setting``), never a silent pick of one.
    """
    from thub.errors import UsageError

    # the last registered first: the message names the parameters as it always did
    names = {t.run_name_param: params.get(t.run_name_param) for t in reversed(trackers())
             if t.run_name_param and params.get(t.run_name_param)}
    if len(set(names.values())) > 1:
        raise UsageError(f"{' and '.join(names)} differ, but there is one {setting} "
                         f"({' vs '.join(repr(v) for v in names.values())}); set one of them, or both the same")
    return next(iter(names.values()), None) or _directory_name(params)


def _directory_name(params: Mapping[str, Any]) -> str:
    """The run directory's name: every tracker's default run name."""
    return Path(os.path.abspath(str(params["ckpt_output_dir"]))).name


def hf_run_name(params: Mapping[str, Any]) -> str:
    """The one ``TrainingArguments.run_name`` HF Trainer gives all its trackers."""
    return shared_run_name(params, "HF Trainer run_name")


def plan(params: Mapping[str, Any], backend: BackendSpec, algorithm: str) -> dict[str, dict[str, str]]:
    """For the dry-run plan: each tracker the run turns on, its route, who logs it and where its run
    goes (a tracking URI redacted as in ``thub_run.json``)."""
    found = {}
    for tracker in enabled(params):
        where_to = route(backend, algorithm, tracker)
        where = str(load_object(tracker.where)(params))
        by = f"{backend.name}'s library" if where_to == "library" else "thub (parent process)"
        found[tracker.name] = {"route": where_to, "logged_by": by, "where": where}
    return found


def prepare_launch(params: Mapping[str, Any], backend: BackendSpec) -> None:
    """Before a launch, in the parent: each tracker the run turns on prepares what must exist
    once (``TrackerSpec.prepare_launch``: a local store created under a lock); a problem raises
    :class:`~thub.errors.UsageError` (exit 2, nothing written)."""
    for tracker in enabled(params):
        if tracker.prepare_launch:
            load_object(tracker.prepare_launch)(params, backend)


def finish_library_runs(run_dir: str | Path, status: str) -> None:
    """At a run's end, in the parent: each tracker a library logged ends what thub opened for it
    and the library left open (``TrackerSpec.finish``); a tracker never changes the run's outcome."""
    import sys

    record = read_record(run_dir)
    for tracker in trackers():
        entry = record.get(tracker.name) or {}
        if tracker.finish and entry.get("route") == "library":
            try:
                load_object(tracker.finish)(run_dir, entry, status)
            except Exception as exc:  # noqa: BLE001 - a tracker never changes the run's outcome
                print(f"thub: WARNING: could not end the {tracker.title} run: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)


def run_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """What goes to the tracker's params/config, from ``thub_run.json``: algorithm, backend,
    versions and every resolved parameter with its source, secrets redacted."""
    from thub.redact import redact

    return {
        "algorithm": record.get("algorithm"),
        "backend": record.get("backend"),
        "versions": record.get("versions", {}),
        "parameters": {name: {"value": redact(entry.get("value"), name), "source": entry.get("source")}
                       for name, entry in (record.get("parameters") or {}).items()},
    }


def metadata_markdown(metadata: Mapping[str, Any]) -> str:
    """The metadata as a Markdown table (TensorBoard's text tab)."""
    rows = [f"| `{name}` | `{entry['value']!r}` | {entry['source']} |"
            for name, entry in metadata["parameters"].items()]
    return (f"thub run: **{metadata['algorithm']}** on **{metadata['backend']}**\n\n"
            "| parameter | value | source |\n|---|---|---|\n" + "\n".join(rows))


# --- trackers.json ------------------------------------------------------------------------------

def read_record(run_dir: str | Path) -> dict[str, Any]:
    """``trackers.json`` of a run: tracker name -> where its run is (empty when none)."""
    from thub.runner.rundir import read_json

    return read_json(Path(run_dir) / RECORD_FILE) or {}


_RECORD_LOCK = threading.Lock()  # the parent sink's tracker threads each update trackers.json


def update_record(run_dir: str | Path, tracker: str, info: Mapping[str, Any], *, reset: bool = False) -> None:
    """Merge ``info`` into the tracker's entry of ``trackers.json`` (atomically; one thread at a time,
    so that two trackers opening together do not drop each other's entry)."""
    from thub.redact import redact
    from thub.runner.rundir import write_json_atomic

    with _RECORD_LOCK:
        record = {} if reset else read_record(run_dir)
        # a tracking URI with a password in it is written redacted, like thub_run.json
        record[tracker] = {**record.get(tracker, {}), **{k: redact(v, k) for k, v in info.items() if v is not None}}
        write_json_atomic(Path(run_dir) / RECORD_FILE, record)


def describe(tracker: str, info: Mapping[str, Any]) -> str:
    """One line for ``thub history show`` / ``thub runs status``: where the tracker's run is."""
    parts = [tracker]
    if info.get("run_id"):
        parts.append(f"run {info['run_id']}")
    for key in ("path", "log_dir", "tracking_uri", "project"):
        if info.get(key):
            parts.append(f"project {info[key]}" if key == "project" else str(info[key]))
            break
    if info.get("route"):
        parts.append(f"(logged by {'thub' if info['route'] == 'thub' else info.get('via') or 'the library'})")
    return " ".join(parts)
