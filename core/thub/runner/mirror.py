"""The remote checkpoint mirror (``checkpoint_storage``): every complete checkpoint copied off the node.

``checkpoint_storage: s3://BUCKET/PREFIX`` (or ``gs://``, ``file:///PATH``, or any registered storage scheme
that supports the mirror: ``thub_register_storage``, opened through fsspec) makes the supervisor copy each
checkpoint the child reports (the ``checkpoint`` event) to
``URI/<run-id>/<name>/``, where ``<run-id>`` is the run's own (``thub_run.json`` ``run_id``,
:func:`thub.runner.rundir.new_run_id`: runs sharing one URI never write over each other's copies) and
``<name>`` is ``checkpoint-N`` for the HF Trainer layout (``checkpoints/checkpoint-N``) and the path below
``checkpoints/`` (or the run directory) for another layout. A run an older thub started (no run id
recorded) keeps that thub's layout, ``URI/<name>/``, to its end. The files go first, then :data:`MARKER`, a
JSON file holding the run id, the step and every file with its size and sha256: a remote folder is a
complete checkpoint only once its marker is there, so an upload cut off halfway (the node lost, the network
gone) is never taken for one (:mod:`thub.runner.mirror_resume` reads them back for ``--resume``).

The uploads run beside training in the parent process: :class:`Mirror` is a worker thread fed by the
checkpoint events through a bounded queue. Offering a checkpoint never blocks the supervisor's loop
(the child trains on regardless); when the queue is full the oldest pending checkpoint is dropped
(superseded: a newer one is queued) and said. Each offered checkpoint is first hard-linked into
``RUN_DIR/.thub-mirror/`` (instant, no data copied): the library's own rotation (``save_total_limit``)
deleting the original cannot cut an upload short, and the staged links are removed once sent. A failed
upload is a warning with its cause (stderr and ``result.json`` ``warnings``), never a failed run. At the
end the run waits for the pending uploads (``THUB_MIRROR_WAIT`` seconds, default 900) and reports what
was mirrored, what failed and what was still pending in ``result.json`` ``checkpoint_storage``.

Remote copies are never deleted by thub: retention (``save_total_limit``) prunes the local folders only;
the bucket's own lifecycle rules are the place to expire old copies.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections import deque
from pathlib import Path, PurePosixPath
from typing import Any

from thub.redact import redact_text

__all__ = ["MARKER", "Mirror", "check_storage_uri", "open_storage", "planned_prefix", "remote_name", "run_prefix"]

#: written last into every mirrored checkpoint folder: its presence makes the remote copy complete
MARKER = ".thub-complete"
#: where offered checkpoints are hard-linked while they wait for (and during) their upload
STAGING = ".thub-mirror"
#: checkpoints waiting for the worker; beyond this the oldest pending one is dropped (a newer one is queued)
CAPACITY = 2
WAIT_ENV = "THUB_MIRROR_WAIT"


def check_storage_uri(value: str) -> str:
    """``value`` when it is a ``checkpoint_storage`` URI thub can write to here: a registered storage
    scheme that supports the mirror (:func:`thub.checkpoint.storage.parse_uri`, the parser
    ``thub checkpoint push`` reads its targets with) and whose packages are installed; else
    ValueError naming the expected shapes, or the driver to install (checked without importing it)."""
    from thub.checkpoint.storage import missing_package, parse_uri
    from thub.errors import UsageError

    try:
        target = parse_uri(value, "mirror")
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    module = missing_package(target.spec) if target.spec else None
    if module is not None:
        raise ValueError(f"{target.scheme}:// needs the fsspec driver {module}, which is not installed: "
                         f"python -m pip install {module}")
    return value


def open_storage(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``uri`` and the root path in it (credentials and ``AWS_ENDPOINT_URL``
    as s3fs/gcsfs read them from the environment)."""
    from fsspec.core import url_to_fs  # type: ignore[import-untyped]  # ships no py.typed

    fs, root = url_to_fs(uri)
    return fs, str(root).rstrip("/") or "/"


def run_prefix(uri: str, run_id: str | None) -> str:
    """Where a run's copies go: ``URI/<run-id>``; ``URI`` itself for a run an older thub started (no id)."""
    return f"{uri.rstrip('/')}/{run_id}" if run_id else uri.rstrip("/")


def planned_prefix(uri: str, run_dir: Path) -> dict[str, Any]:
    """What the dry run shows of ``checkpoint_storage``: the URI, the run's remote prefix (``<run-id>``
    where the run is not there yet: its id is made when it starts), the run id and a note."""
    from thub.errors import UsageError
    from thub.runner.rundir import RunDirectory, new_run_id
    from thub.surface import option

    shown = redact_text(uri).rstrip("/")
    fresh = (f"a new run gets its own run id when it starts: <run directory name>-<UTC time>-<8 hex digits>, "
             f"e.g. {new_run_id(run_dir)}")
    directory = RunDirectory(Path(run_dir))
    if not directory.record.is_file():
        return {"uri": shown, "prefix": f"{shown}/<run-id>", "run_id": None, "note": fresh}
    try:
        run_id = directory.run_id()
    except UsageError as exc:
        return {"uri": shown, "prefix": f"{shown}/<run-id>", "run_id": None,
                "note": f"{option('resume')} is refused: {exc}; {fresh}"}
    if run_id is None:
        return {"uri": shown, "prefix": shown, "run_id": None,
                "note": f"the run there was started by an older thub (no run_id in thub_run.json): "
                        f"{option('resume')} continues in {shown}/checkpoint-N as it wrote them; "
                        f"with {option('overwrite')} {fresh}"}
    return {"uri": shown, "prefix": f"{shown}/{run_id}", "run_id": run_id,
            "note": f"this run's id (thub_run.json): {option('resume')} continues under it; "
                    f"with {option('overwrite')} {fresh}"}


def remote_name(path: Path, run_dir: Path) -> str:
    """Where a checkpoint goes below the URI: ``checkpoint-N`` for ``RUN_DIR/checkpoints/checkpoint-N``,
    else its path below ``checkpoints/`` or the run directory, else its own name."""
    for base in (run_dir / "checkpoints", run_dir):
        try:
            return path.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            continue
    return path.name


def local_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete checkpoint to mirror (None: it is): the HF Trainer check
    ``--resume`` uses for ``checkpoint-N``, the layout's own for any other."""
    if not path.is_dir():
        return "it is not there (deleted before it was sent)"
    if path.name.startswith("checkpoint-"):
        from thub.runner.checkpoints import checkpoint_problem

        return checkpoint_problem(path)
    from thub.checkpoint.layouts import detect

    found = detect(path)
    if found is None:
        return "not a checkpoint of a known layout"
    return None if found.complete else str(found.problem or "incomplete")


def file_list(folder: Path) -> list[dict[str, Any]]:
    """Every regular file under ``folder`` (relative POSIX path, bytes, sha256), sorted: the marker's
    ``files`` (:func:`thub.checkpoint.manifest.file_entries`: the one listing of a folder's files)."""
    from thub.checkpoint.manifest import file_entries

    return file_entries(folder)


def upload(fs: Any, root: str, folder: Path, name: str, step: int | None, *,
           run_id: str | None = None) -> dict[str, Any]:
    """Copy ``folder`` to ``root/name/`` and write :data:`MARKER` last (with ``run_id``, the run whose
    copy it is: ``--resume`` takes no other run's); returns the marker's content.

    A remote folder of that name already there (an earlier attempt's, complete or not) loses its
    marker first and is replaced: at no moment does a half-replaced folder carry one."""
    files = file_list(folder)
    target = f"{root}/{name}"
    marker = f"{target}/{MARKER}"
    fs.invalidate_cache()
    if fs.exists(marker):
        fs.rm_file(marker)
    if fs.exists(target):
        fs.rm(target, recursive=True)
    parents = {PurePosixPath(f"{target}/{entry['path']}").parent.as_posix() for entry in files}
    for parent in sorted(parents):
        fs.makedirs(parent, exist_ok=True)
    for entry in files:
        fs.put_file(str(folder / entry["path"]), f"{target}/{entry['path']}")
    content = {"thub_mirror": 1, "name": name, "run_id": run_id, "step": step, "files": files, "at": time.time()}
    fs.pipe_file(marker, (json.dumps(content, indent=1) + "\n").encode())
    return content


def _stage(path: Path, staging: Path) -> Path:
    """``path`` hard-linked under ``staging`` (its own copy of the names: the library's rotation may
    delete the original while it is sent); the original itself where links cannot be made."""
    holder = staging / str(time.monotonic_ns())
    target = holder / path.name  # the same name: what the checks and the upload see
    try:
        holder.mkdir(parents=True)
        shutil.copytree(path, target, copy_function=os.link)
    except OSError:
        shutil.rmtree(holder, ignore_errors=True)
        return path
    return target


def wait_seconds() -> float:
    """How long the end of a run waits for pending uploads (``THUB_MIRROR_WAIT``, default 900 s)."""
    try:
        return float(os.environ.get(WAIT_ENV, "900"))
    except ValueError:
        return 900.0


class Mirror:
    """The upload worker of one run: :meth:`offer` each reported checkpoint, :meth:`finish` at the end."""

    def __init__(self, uri: str, run_dir: Path, *, capacity: int = CAPACITY, skip: int = 0) -> None:
        """The copies go below the run's own prefix, ``URI/<run-id>`` (:func:`run_prefix`; the id
        read from the run directory's ``thub_run.json``). ``skip``: how many offers to ignore first (the
        events an earlier attempt reported: the supervisor reads ``events.jsonl`` from its start, and
        those checkpoints were offered then)."""
        from thub.runner.rundir import RunDirectory

        self.uri = uri
        self._skip = skip
        self.run_dir = Path(run_dir)
        self.run_id = RunDirectory(self.run_dir).run_id()
        self.shown = redact_text(run_prefix(uri, self.run_id))  # the run's prefix, as said and reported
        self.staging = self.run_dir / STAGING
        self.capacity = capacity
        self.mirrored: list[dict[str, Any]] = []
        self.failed: list[dict[str, Any]] = []
        self.superseded: list[str] = []
        self.warnings: list[str] = []
        self._pending: deque[tuple[str, Path, Path, int | None]] = deque()
        self._busy: str | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._fs: tuple[Any, str] | None = None
        # daemon: a run whose uploads hang past the bounded wait still ends
        self._thread = threading.Thread(target=self._work, name="thub-checkpoint-mirror", daemon=True)
        self._thread.start()

    def offer(self, path: str | Path, step: int | None) -> None:
        """Queue a reported checkpoint for upload; returns at once (staging is hard links only)."""
        if self._skip > 0:
            self._skip -= 1
            return
        original = Path(path)
        name = remote_name(original, self.run_dir)
        staged = _stage(original, self.staging) if original.is_dir() else original
        with self._cond:
            if self._closed:
                return
            if len(self._pending) >= self.capacity:
                old_name, old_original, old_staged, _step = self._pending.popleft()
                self.superseded.append(old_name)
                self._unstage(old_original, old_staged)
                _say(f"thub: checkpoint_storage: {old_name} not mirrored: newer checkpoints are queued "
                     f"(uploads are slower than saves)")
            self._pending.append((name, original, staged, step))
            self._cond.notify_all()

    def _unstage(self, original: Path, staged: Path) -> None:
        if staged != original:
            shutil.rmtree(staged.parent, ignore_errors=True)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                name, original, staged, step = self._pending.popleft()
                self._busy = name
            try:
                self._send(name, original, staged, step)
            finally:
                self._unstage(original, staged)
                with self._cond:
                    self._busy = None
                    self._cond.notify_all()

    def _send(self, name: str, original: Path, staged: Path, step: int | None) -> None:
        # the original where it is still there (a layout is told by its folder's place), else the links
        problem = local_problem(original if original.is_dir() else staged)
        if problem is not None:
            self._warn(name, f"not a complete checkpoint ({problem})")
            return
        try:
            if self._fs is None:
                self._fs = open_storage(run_prefix(self.uri, self.run_id))
            fs, root = self._fs
            content = upload(fs, root, staged, name, step, run_id=self.run_id)
        except Exception as exc:  # noqa: BLE001 - the storage's own error, named: the run goes on
            self._warn(name, f"{type(exc).__name__}: {redact_text(str(exc)) or 'no message'}")
            return
        self.mirrored.append({"name": name, "step": step, "files": len(content["files"]),
                              "bytes": sum(f["bytes"] for f in content["files"])})
        _say(f"thub: checkpoint_storage: mirrored {name} to {self.shown}/{name}")

    def _warn(self, name: str, cause: str) -> None:
        message = (f"checkpoint {name} was not mirrored to {self.shown}: {cause}; the run goes on, and that "
                   f"copy carries no {MARKER} marker (--resume never uses it)")
        self.failed.append({"name": name, "error": cause})
        self.warnings.append(message)
        _say(f"thub: warning: {message}")

    def pending(self) -> list[str]:
        """The checkpoints not sent yet (the one being sent first)."""
        with self._cond:
            return [*([self._busy] if self._busy else []), *(entry[0] for entry in self._pending)]

    def finish(self, timeout: float | None = None) -> dict[str, Any]:
        """Stop taking checkpoints, wait up to ``timeout`` seconds (:func:`wait_seconds`) for the pending
        uploads, and return the run's ``checkpoint_storage`` summary (its ``warnings`` in :attr:`warnings`)."""
        timeout = wait_seconds() if timeout is None else timeout
        waiting = self.pending()
        if waiting:
            _say(f"thub: checkpoint_storage: waiting for {len(waiting)} upload(s) to {self.shown} "
                 f"({', '.join(waiting)}; at most {timeout:g} s, {WAIT_ENV})")
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        left = self.pending() if self._thread.is_alive() else []
        if left:
            message = (f"{len(left)} checkpoint upload(s) to {self.shown} still pending after {timeout:g} s "
                       f"({', '.join(left)}): not mirrored (no {MARKER} marker, never used by --resume)")
            self.warnings.append(message)
            _say(f"thub: warning: {message}")
        with self._cond:
            for _name, original, staged, _step in self._pending:
                self._unstage(original, staged)
        try:
            self.staging.rmdir()  # only when empty: an upload still under way keeps its links
        except OSError:
            pass
        return {"uri": redact_text(self.uri), "run_id": self.run_id, "prefix": self.shown,
                "mirrored": [m["name"] for m in self.mirrored], "uploads": self.mirrored,
                "failed": self.failed, "superseded": self.superseded, "pending": left}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
