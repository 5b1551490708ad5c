"""``--resume`` with ``checkpoint_storage``: the newest complete checkpoint, local or remote.

A run reads its own copies only: ``URI/<run-id>/checkpoint-N/`` (``thub_run.json`` ``run_id``), each
marker carrying that run id (a marker of another run, copied there, is refused). A run an older thub
started (no run id recorded) reads ``URI/checkpoint-N/`` as that thub wrote it, and takes no marker that
carries a run id (another, newer run's). A remote copy is complete when its :data:`~thub.runner.mirror.MARKER`
is there (written last by :mod:`thub.runner.mirror`); a folder without one (an upload cut off) is never
used, and said.
When the newest remote complete checkpoint is newer than the newest local complete one, it is fetched
into ``RUN_DIR/checkpoints/checkpoint-N`` before the child starts: into a hidden folder first, every
file checked against the marker's size and sha256 and the whole checked as ``--resume`` checks a local
one, then renamed into place (a fetch cut off never looks like a checkpoint). A remote copy that fails
those checks is skipped for the next older one. Only the HF Trainer layout (``checkpoint-N``) is
fetched back; another layout's remote copies are listed as not fetched.

Each copy passed over is named with why (stderr, and ``thub_run.json`` ``resume_skipped``): no marker; a
marker that does not read as JSON, is not the shape thub writes (:func:`marker_problem`), names another
folder or another run; a listed file missing or different. The next older copy is tried; the storage's
own errors (access, network) stop the resume instead, since they say nothing about a copy.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from thub.checkpoint.manifest import sha256_of
from thub.errors import ThubError
from thub.redact import redact_text
from thub.runner.mirror import MARKER, open_storage, run_prefix
from thub.runner.rundir import NEW_RUN_ID

_NAME = re.compile(r"^checkpoint-(\d+)$")


#: the largest marker read (a marker lists each file with its size and sha256: ~150 bytes a file)
MARKER_LIMIT = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass
class RemoteCopy:
    """One remote ``checkpoint-N`` folder: its marker as read (None: none that reads), and why it cannot
    be used as it stands (None: its marker reads; the marker's shape, run and files are checked later)."""

    step: int
    name: str
    marker: Any = None
    problem: str | None = None


@dataclass
class RemoteListing:
    """What ``checkpoint_storage`` holds: its ``checkpoint-N`` copies, newest first, each with its marker or
    why it has none that reads; other entries (not fetched back)."""

    copies: list[RemoteCopy] = field(default_factory=list)
    other: list[str] = field(default_factory=list)


def _refuse(uri: str, what: str, exc: Exception) -> ThubError:
    return ThubError(f"checkpoint_storage {redact_text(uri)}: cannot {what} ({type(exc).__name__}: "
                     f"{redact_text(str(exc))}); --resume would not know whether a newer checkpoint is there: "
                     "fix the access, or resume without checkpoint_storage to continue from the local ones")


#: a folder without its marker: an upload cut off (said as such, never used)
UNMARKED = f"has no {MARKER} marker (an upload that did not finish)"


def _read_marker(fs: Any, path: str) -> tuple[Any, str | None]:
    """The marker at ``path`` as JSON, or (None, why it does not read); the storage's own errors raise."""
    size = fs.size(path)
    if isinstance(size, int) and size > MARKER_LIMIT:
        return None, f"its {MARKER} marker is {size} bytes, more than thub ever writes ({MARKER_LIMIT})"
    try:
        return json.loads(fs.cat_file(path)), None
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested past the parser's depth
        return None, f"its {MARKER} marker does not read as JSON ({type(exc).__name__}: {str(exc)[:120]})"


def list_remote(uri: str) -> RemoteListing:
    """Read ``uri``'s checkpoint folders and their markers; ThubError when it cannot be read."""
    listing = RemoteListing()
    try:
        fs, root = open_storage(uri)
        fs.invalidate_cache()
        try:
            entries = fs.ls(root, detail=True)
        except FileNotFoundError:
            return listing
        for entry in entries:
            if entry.get("type") != "directory":
                continue
            name = PurePosixPath(str(entry["name"])).name
            match = _NAME.match(name)
            if not match:
                listing.other.append(name)
                continue
            marker = f"{root}/{name}/{MARKER}"
            if not fs.exists(marker):
                listing.copies.append(RemoteCopy(int(match.group(1)), name, problem=UNMARKED))
                continue
            content, problem = _read_marker(fs, marker)
            listing.copies.append(RemoteCopy(int(match.group(1)), name, content, problem))
    except ThubError:
        raise
    except Exception as exc:  # noqa: BLE001 - the storage's own error, named
        raise _refuse(uri, "be listed", exc) from None
    listing.copies.sort(key=lambda copy: copy.step, reverse=True)
    return listing


def _kind(value: Any) -> str:
    """A JSON value's kind, as a marker's problem names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "a string", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def marker_problem(content: Any, name: str) -> str | None:
    """Why ``content`` is not a marker thub writes for the folder ``name`` (None: it is): a JSON object
    with ``thub_mirror: 1``, its own folder's ``name``, and ``files``, a non-empty list of ``{path, bytes,
    sha256}`` with relative paths inside the checkpoint, each once."""
    label = f"its {MARKER} marker"
    if not isinstance(content, dict):
        return f"{label} is not a JSON object ({_kind(content)})"
    if content.get("thub_mirror") != 1:
        return f"{label} is not one thub writes (no thub_mirror: 1)"
    files = content.get("files")
    if not isinstance(files, list):
        return f"{label}'s files is not a list ({_kind(files)})"
    if not files:
        return f"{label} lists no files"
    paths: set[str] = set()
    for index, entry in enumerate(files):
        where = f"{label}'s files[{index}]"
        if not isinstance(entry, dict):
            return f"{where} is not an object ({_kind(entry)})"
        path, size, digest = entry.get("path"), entry.get("bytes"), entry.get("sha256")
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            return f"{where}.path is not a file path ({_kind(path)})"
        rel = PurePosixPath(path)
        if rel.is_absolute() or ".." in rel.parts:
            return f"{where}.path {path[:120]} is outside the checkpoint"
        if rel.as_posix() in paths:
            return f"{where}.path {path[:120]} is listed twice"
        paths.add(rel.as_posix())
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            shown_size = size if isinstance(size, int) and not isinstance(size, bool) else _kind(size)
            return f"{where}.bytes is not a size in bytes ({shown_size})"
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            return f"{where}.sha256 is not 64 hex digits"
    for path in paths:
        folder = next((parent for parent in PurePosixPath(path).parents if parent.as_posix() in paths), None)
        if folder is not None:
            return f"{label} lists {folder.as_posix()[:120]} as a file and as a folder"
    if content.get("name") != name:
        named = content.get("name")
        shown = named[:120] if isinstance(named, str) else _kind(named)
        return f"{label} names {shown}, not {name} (a copy of another folder's)"
    if content.get("run_id") is not None and not isinstance(content.get("run_id"), str):
        return f"{label}'s run_id is not a string ({_kind(content.get('run_id'))})"
    return None


def fetch(uri: str, name: str, marker: Any, checkpoints: Path) -> tuple[Path | None, str | None]:
    """Download ``uri/name`` into ``checkpoints/name``; (path, None), or (None, why it is not usable).

    The marker is checked first (:func:`marker_problem`); the files land in ``checkpoints/.thub-fetch-<name>``
    and are checked (each listed file there, sizes, sha256, then
    :func:`thub.runner.checkpoints.checkpoint_problem`) before the folder is renamed into place; a local
    incomplete folder of that name is moved to ``checkpoints.incomplete/`` first (kept, not deleted). The
    storage's own errors (access, network) raise ThubError: they say nothing about the copy."""
    from thub.runner.checkpoints import checkpoint_problem

    problem = marker_problem(marker, name)
    if problem is not None:
        return None, problem
    tmp = checkpoints / f".thub-fetch-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        fs, root = open_storage(uri)
        for entry in marker["files"]:
            rel = PurePosixPath(entry["path"])
            remote = f"{root}/{name}/{rel.as_posix()}"
            local = tmp.joinpath(*rel.parts)
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                size = fs.size(remote)
                if size != entry["bytes"]:  # before the download: a listed file far larger is not fetched
                    return None, f"{rel} differs from its {MARKER} entry (size: {size} bytes, listed {entry['bytes']})"
                fs.get_file(remote, str(local))
            except FileNotFoundError:
                return None, f"{rel} is listed in its {MARKER} marker but is not there"
            if local.stat().st_size != entry["bytes"] or sha256_of(local) != entry["sha256"]:
                return None, f"{rel} differs from its {MARKER} entry (size or sha256)"
        problem = checkpoint_problem(tmp)
        if problem is not None:
            return None, f"the fetched copy is not a complete checkpoint ({problem})"
        dest = checkpoints / name
        if dest.exists():
            aside = checkpoints.with_name(checkpoints.name + ".incomplete")
            aside.mkdir(exist_ok=True)
            target, suffix = aside / name, 1
            while target.exists():
                target, suffix = aside / f"{name}.{suffix}", suffix + 1
            dest.rename(target)
        tmp.rename(dest)
        return dest, None
    except Exception as exc:  # noqa: BLE001 - the storage's own error, named
        raise _refuse(uri, f"fetch {name}", exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _not_ours(marker: dict[str, Any], run_id: str | None) -> str | None:
    """Why a marker is another run's (None: it is this run's, ``run_id``; None for a run an older thub
    started, whose markers carry no run id)."""
    theirs = marker.get("run_id")
    if theirs == run_id:
        return None
    theirs = str(theirs)[:128] if theirs is not None else None
    if run_id is None:
        return f"its {MARKER} marker belongs to run {theirs} (this run was started by an older thub and has none)"
    if theirs is None:
        return f"its {MARKER} marker carries no run id (an older thub's copy), not this run's ({run_id})"
    return f"its {MARKER} marker belongs to run {theirs}, not this run ({run_id})"


def newer_remote(uri: str, checkpoints: Path, local_step: int | None, say: Any = print, *,
                 run_id: str | None = None,
                 skipped: list[dict[str, str]] | None = None) -> tuple[Path, int, str] | None:
    """The newest complete checkpoint of run ``run_id`` in ``URI/<run-id>/`` newer than ``local_step``
    (None: no local one), fetched into ``checkpoints``: (path, step, remote URI it came from), or None
    when the local one is the newest. ``run_id`` None: a run an older thub started, read from ``URI/``.
    ``say(line)`` reports what was passed over and why; ``skipped`` gets each copy passed over
    (``checkpoint``: its URI, ``reason``)."""
    prefix = run_prefix(uri, run_id)
    shown = redact_text(prefix)
    passed = skipped if skipped is not None else []
    if run_id is None:
        say(f"checkpoint_storage: this run was started by an older thub (no run_id in thub_run.json): its "
            f"copies are read from {shown}/checkpoint-N, where that thub wrote them")
    listing = list_remote(prefix)
    # at the top of a URI an older thub wrote to, newer runs' prefixes are not this run's business
    other = sorted(name for name in listing.other if run_id is not None or not NEW_RUN_ID.fullmatch(name))
    if other:
        say(f"checkpoint_storage: {', '.join(other)} in {shown} are not checkpoint-N folders: "
            "not fetched back (the backend's own layout resumes from the local copy only)")
    for copy in listing.copies:
        if local_step is not None and copy.step <= local_step:
            return None
        where = f"{shown}/{copy.name}"
        if copy.problem == UNMARKED:
            say(f"checkpoint_storage: {where} {UNMARKED}: never used")
            passed.append({"checkpoint": where, "reason": UNMARKED})
            continue
        why = copy.problem or marker_problem(copy.marker, copy.name) or _not_ours(copy.marker, run_id)
        if why is None:
            checkpoints.mkdir(parents=True, exist_ok=True)
            path, why = fetch(prefix, copy.name, copy.marker, checkpoints)
            if path is not None:
                return path, copy.step, where
        passed.append({"checkpoint": where, "reason": why or "not usable"})
        say(f"warning: checkpoint_storage: {where} not used: {why}")
    return None
