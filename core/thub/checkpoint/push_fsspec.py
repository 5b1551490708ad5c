"""The generic fsspec push: ``thub checkpoint push`` to any storage scheme fsspec can open.

A :class:`thub.specs.StorageSpec` that names no ``push`` function is sent here: thub's own ``s3``, ``gs``
and ``file`` (``thub_builtins.storage``) and any plugin's fsspec-backed scheme (``memory://`` in
tests/plugins/thub-plugin-memory-storage). It is mechanism, not a named target, so it stays in the core
beside what it shares with the checkpoint mirror (:mod:`thub.runner.mirror`, also fsspec) and the marker of
a push cut off halfway (:mod:`thub.checkpoint.push_partial`). The target must be new or empty (or hold
only an unfinished thub push, which is replaced); the card is written last. A ``local`` scheme (``file``)
is written with the usual modes and keeps a private file private (:func:`thub.checkpoint.collect.copy_local`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from thub.checkpoint import push_partial
from thub.checkpoint.collect import copy_local, sendable, write_new
from thub.checkpoint.storage import Target, missing_package
from thub.errors import UsageError

__all__ = ["push_fsspec"]


def push_fsspec(plan: dict[str, Any], extras: dict[str, bytes]) -> dict[str, Any]:
    """Send a planned push (:func:`thub.checkpoint.push.plan_push`) through the fsspec filesystem of
    its target's scheme: the files, then ``extras`` (the card last), a push cut off halfway before it
    replaced (:mod:`thub.checkpoint.push_partial`). Returns ``revision`` (None) and ``url``."""
    import fsspec  # type: ignore[import-untyped]  # ships no py.typed

    target: Target = plan["_target"]
    try:
        fs = fsspec.filesystem(target.scheme)
    except ImportError as exc:
        package = (missing_package(target.spec) if target.spec else None) or target.scheme
        raise UsageError(f"--to {target.shown}: {target.scheme}:// needs {package}, which is not installed: "
                         f"python -m pip install {package} ({exc})") from None
    root = target.location

    # a push of thub's cut off halfway (its marker there) is replaced; anything else in the target is refused
    push_partial.clear_unfinished(fs, root, target.shown, lambda m: print(f"thub: {m}", file=sys.stderr, flush=True))
    if fs.exists(root) and fs.isdir(root) and fs.ls(root, detail=False):
        raise UsageError(f"--to {target.shown}: already holds files; push to a new or empty path")
    folder = Path(plan["source"])
    # written here: the usual modes, a private file kept private (copy_local)
    local = bool(target.spec and target.spec.local)
    push_partial.begin(fs, root, str(folder), [f["path"] for f in plan["files"]] + sorted(extras))
    for f in plan["files"]:
        parent = Path(f["path"]).parent.as_posix()
        fs.makedirs(root if parent == "." else f"{root}/{parent}", exist_ok=True)
        if local:
            copy_local(sendable(folder, f["path"]), Path(root) / f["path"])
        else:
            fs.put_file(str(sendable(folder, f["path"])), f"{root}/{f['path']}")
    for name in sorted(extras, key=lambda n: n == "README.md"):  # the card last: the push is whole when it is there
        if local:
            write_new(Path(root) / name, extras[name])
        else:
            fs.pipe_file(f"{root}/{name}", extras[name])
    push_partial.finish(fs, root)
    return {"revision": None, "url": target.shown}
