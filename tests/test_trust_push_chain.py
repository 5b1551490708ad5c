"""Push at the end of the chain (issue 35 items 5, 8, 10): a folder that no longer matches the manifest thub
wrote is refused, what is sent is listed with its sha256 (plan, card, result.json, a manifest in the target that
verifies there), an interrupted push is replaced by the next one to the same target (never another's files),
and a moved run's recorded export is still its own."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from thub.checkpoint.manifest import MANIFEST, check_manifest, sha256_of, write_manifest
from thub.checkpoint.push_partial import PARTIAL
from thub.errors import ThubError, UsageError

pytestmark = pytest.mark.needs_module("fsspec")
Run = Callable[..., subprocess.CompletedProcess[str]]


def _model(tiny_model: Path, where: Path) -> Path:
    folder = where / "hf"
    shutil.copytree(tiny_model, folder)
    write_manifest(folder, "test")
    return folder


def _run(where: Path, export: str | None = None, recorded_run_dir: str = "run") -> Path:
    run = where / "run"
    run.mkdir()
    (run / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl", "parameters": {}}))
    result = {"status": "succeeded", "run_dir": recorded_run_dir}
    if export:
        result["export"] = {"path": export, "ok": True, "checks": [{"check": "loads", "ok": True}], "failed": None}
    (run / "result.json").write_text(json.dumps(result))
    return run


def test_a_folder_changed_since_its_manifest_is_refused(tiny_model: Path, tmp_path: Path, thub: Run) -> None:
    folder = _model(tiny_model, tmp_path)
    with (folder / "config.json").open("a") as handle:
        handle.write(" ")
    target = tmp_path / "out"
    done = thub("checkpoint", "push", str(folder), "--to", target.as_uri())
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"no longer matches its {MANIFEST}" in done.stderr and "config.json" in done.stderr
    assert "Traceback" not in done.stderr and not target.exists()


@pytest.mark.needs_module("transformers", "safetensors")
def test_what_is_sent_is_listed_with_its_sha256_and_verifies_where_it_lands(tiny_model: Path, tmp_path: Path,
                                                                          thub: Run) -> None:
    folder = _model(tiny_model, tmp_path)
    run = _run(tmp_path)
    target = tmp_path / "out"
    done = thub("checkpoint", "push", str(folder), "--to", target.as_uri(), "--run", str(run), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    pushed = json.loads(done.stdout)
    sent = {f["path"]: f["sha256"] for f in pushed["files"]}
    assert sent == {p.name: sha256_of(p) for p in folder.iterdir() if p.name != MANIFEST}
    assert pushed["manifest"] is True
    card = (target / "README.md").read_text()
    assert all(f"| {name} |" in card and digest in card for name, digest in sent.items())
    entry = json.loads((run / "result.json").read_text())["push"][-1]
    assert entry["sha256"] == {p.name: sha256_of(p) for p in target.iterdir()}
    # the target's manifest lists exactly what was sent, the card included: it verifies there
    assert check_manifest(target).ok is True
    assert not (target / PARTIAL).exists()
    verified = thub("checkpoint", "verify", str(target), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_moved_run_still_vouches_for_its_export(tmp_path: Path) -> None:
    """result.json says (relative to where training ran) that the export at run/../hf was verified; read from a
    copy of the run, the export beside the copy is the one it vouches for."""
    from thub.checkpoint.push import verification

    copy = tmp_path / "moved"
    copy.mkdir()
    run = _run(copy, export="run/hf")
    (run / "hf").mkdir()
    checked = verification(run / "hf", run, dry_run=True)
    assert checked["by"].startswith("recorded by thub train --export") and checked["ok"] is True, checked


def _partial_push(folder: Path, target: Path) -> None:
    """A push cut off halfway: the link to the last file is swapped to a file outside after the plan, so the
    push stops there (ThubError) with the earlier files written."""
    from thub.checkpoint.push import plan_push, push

    (folder / "zz-last.txt").write_text("inside")
    (folder / "zz-link.txt").symlink_to(folder / "zz-last.txt")
    write_manifest(folder, "test")
    plan = plan_push(str(folder), target.as_uri(), force=True, dry_run=True)
    outside = folder.parent / "outside.txt"
    outside.write_text("not yours")
    (folder / "zz-link.txt").unlink()
    (folder / "zz-link.txt").symlink_to(outside)
    with pytest.raises(ThubError):
        push(plan)
    # as a push process that died there leaves it: its marker names a process no longer running
    dead = subprocess.Popen(["true"])
    dead.wait()
    marker = json.loads((target / PARTIAL).read_text())
    (target / PARTIAL).write_text(json.dumps({**marker, "pid": dead.pid}))
    assert (target / PARTIAL).is_file() and (target / "config.json").is_file() and not (target / "README.md").exists()
    (folder / "zz-link.txt").unlink()
    (folder / "zz-link.txt").symlink_to(folder / "zz-last.txt")


@pytest.mark.needs_module("transformers", "safetensors")
def test_an_interrupted_push_is_replaced_by_the_next(tiny_model: Path, tmp_path: Path, thub: Run) -> None:
    folder = _model(tiny_model, tmp_path)
    target = tmp_path / "out"
    _partial_push(folder, target)
    done = thub("checkpoint", "push", str(folder), "--to", target.as_uri())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "held an unfinished push" in done.stdout + done.stderr
    assert not (target / PARTIAL).exists() and check_manifest(target).ok is True
    assert (target / "zz-link.txt").read_text() == "inside"


@pytest.mark.needs_module("transformers", "safetensors")
def test_an_unfinished_push_never_removes_another_file(tiny_model: Path, tmp_path: Path) -> None:
    from thub.checkpoint.push import plan_push, push

    folder = _model(tiny_model, tmp_path)
    target = tmp_path / "out"
    _partial_push(folder, target)
    (target / "someone-elses.bin").write_bytes(b"keep me")
    with pytest.raises(UsageError, match="already holds files"):
        push(plan_push(str(folder), target.as_uri(), force=True))
    assert (target / "someone-elses.bin").read_bytes() == b"keep me"
    # a marker naming a path outside the target removes nothing
    (target / "someone-elses.bin").unlink()
    marker = json.loads((target / PARTIAL).read_text())
    (target / PARTIAL).write_text(json.dumps({**marker, "files": ["../outside.txt"]}))
    with pytest.raises(UsageError, match="outside the target"):
        push(plan_push(str(folder), target.as_uri(), force=True))
    assert (tmp_path / "outside.txt").exists()
    # a marker of a push still running (this process: alive) is not replaced
    (target / PARTIAL).write_text(json.dumps({**marker, "pid": 1}))
    with pytest.raises(UsageError, match="is writing it now"):
        push(plan_push(str(folder), target.as_uri(), force=True))
