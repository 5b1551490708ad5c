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
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from thub.errors import ThubError
from thub.redact import redact_text
from thub.runner.mirror import HASH_CHUNK, MARKER, open_storage, run_prefix
from thub.runner.rundir import NEW_RUN_ID

_NAME = re.compile(r"^checkpoint-(\d+)$")


@dataclass
class RemoteListing:
    """What ``checkpoint_storage`` holds: complete ``checkpoint-N`` copies (step, name, marker), newest
    first; folders without a marker; other entries (not fetched back)."""

    complete: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)


def _refuse(uri: str, what: str, exc: Exception) -> ThubError:
    return ThubError(f"checkpoint_storage {redact_text(uri)}: cannot {what} ({type(exc).__name__}: "
                     f"{redact_text(str(exc))}); --resume would not know whether a newer checkpoint is there: "
                     "fix the access, or resume without checkpoint_storage to continue from the local ones")


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
                listing.unmarked.append(name)
                continue
            try:
                content = json.loads(fs.cat_file(marker))
            except ValueError:
                listing.unmarked.append(name)  # a marker that does not read is no marker
                continue
            listing.complete.append((int(match.group(1)), name, content))
    except ThubError:
        raise
    except Exception as exc:  # noqa: BLE001 - the storage's own error, named
        raise _refuse(uri, "be listed", exc) from None
    listing.complete.sort(key=lambda item: item[0], reverse=True)
    listing.unmarked.sort()
    return listing


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(uri: str, name: str, marker: dict[str, Any], checkpoints: Path) -> tuple[Path | None, str | None]:
    """Download ``uri/name`` into ``checkpoints/name``; (path, None), or (None, why it is not usable).

    The files land in ``checkpoints/.thub-fetch-<name>`` and are checked (sizes, sha256, then
    :func:`thub.runner.checkpoints.checkpoint_problem`) before the folder is renamed into place; a local
    incomplete folder of that name is moved to ``checkpoints.incomplete/`` first (kept, not deleted)."""
    from thub.runner.checkpoints import checkpoint_problem

    files = marker.get("files")
    if not isinstance(files, list) or not files:
        return None, f"its {MARKER} lists no files"
    tmp = checkpoints / f".thub-fetch-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        fs, root = open_storage(uri)
        for entry in files:
            rel = PurePosixPath(str(entry["path"]))
            if rel.is_absolute() or ".." in rel.parts:
                return None, f"its {MARKER} names a path outside the checkpoint ({rel})"
            local = tmp.joinpath(*rel.parts)
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"{root}/{name}/{rel.as_posix()}", str(local))
            if local.stat().st_size != entry.get("bytes") or _sha256(local) != entry.get("sha256"):
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
    except (KeyError, TypeError) as exc:
        return None, f"its {MARKER} does not read ({exc})"
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
    for name in listing.unmarked:
        say(f"checkpoint_storage: {shown}/{name} has no {MARKER} marker (an upload that did not finish): "
            "never used")
    # at the top of a URI an older thub wrote to, newer runs' prefixes are not this run's business
    other = sorted(name for name in listing.other if run_id is not None or not NEW_RUN_ID.fullmatch(name))
    if other:
        say(f"checkpoint_storage: {', '.join(other)} in {shown} are not checkpoint-N folders: "
            "not fetched back (the backend's own layout resumes from the local copy only)")
    for step, name, marker in listing.complete:
        if local_step is not None and step <= local_step:
            return None
        why = _not_ours(marker, run_id)
        if why is None:
            checkpoints.mkdir(parents=True, exist_ok=True)
            path, why = fetch(prefix, name, marker, checkpoints)
            if path is not None:
                return path, step, f"{shown}/{name}"
        passed.append({"checkpoint": f"{shown}/{name}", "reason": why or "not usable"})
        say(f"warning: checkpoint_storage: {shown}/{name} not used: {why}")
    return None
