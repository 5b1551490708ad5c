"""What ``--resume`` takes from ``checkpoint_storage`` (thub.runner.mirror_resume), on a ``file://`` store with
real checkpoint files (a safetensors model, trainer_state.json) and no training: a folder without its marker is
never used, a copy whose bytes differ from its marker is skipped for the next older one, the fetched copy is
checked before it is renamed into place, and nothing newer than the local checkpoint is fetched over it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_module("fsspec", "safetensors", "numpy")


def _checkpoint(folder: Path, step: int) -> Path:
    """A complete HF Trainer checkpoint-N as --resume checks it (config, whole safetensors, trainer state)."""
    import numpy as np
    from safetensors.numpy import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": np.full((4, 4), step, dtype=np.float32)}, str(path / "model.safetensors"))
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 10}))
    return path


def _said() -> tuple[list[str], object]:
    lines: list[str] = []
    return lines, lines.append


def test_unmarked_and_corrupt_copies_are_skipped_for_the_newest_good_one(tmp_path: Path) -> None:
    from thub.runner.mirror import MARKER, open_storage, upload
    from thub.runner.mirror_resume import newer_remote

    remote = tmp_path / "remote"
    uri = remote.as_uri()
    fs, root = open_storage(uri)
    made = tmp_path / "made"
    for step in (2, 4):
        upload(fs, root, _checkpoint(made, step), f"checkpoint-{step}", step)
    # checkpoint-4's weights changed after its marker was written: its bytes no longer match
    weights = remote / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\x00\x00\x80\x7f")
    # checkpoint-6: every file, no marker (an upload cut off)
    shutil.copytree(made / "checkpoint-4", remote / "checkpoint-6")
    assert (remote / "checkpoint-2" / MARKER).is_file() and not (remote / "checkpoint-6" / MARKER).exists()
    checkpoints = tmp_path / "run" / "checkpoints"
    lines, say = _said()
    found = newer_remote(uri, checkpoints, None, say=say)
    assert found is not None
    path, step, origin = found
    assert (path, step, origin) == (checkpoints / "checkpoint-2", 2, f"{uri}/checkpoint-2")
    assert any("checkpoint-6 has no .thub-complete marker" in line and "never used" in line for line in lines)
    assert any("checkpoint-4 not used: model.safetensors differs from its .thub-complete entry" in line
               for line in lines)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-2"]  # no fetch folder left behind
    assert (path / "model.safetensors").read_bytes() == (made / "checkpoint-2" / "model.safetensors").read_bytes()
    assert not (path / MARKER).exists()  # the marker is the store's, not the checkpoint's


def test_a_local_checkpoint_as_new_is_kept_and_an_incomplete_one_is_moved_aside(tmp_path: Path) -> None:
    from thub.runner.mirror import open_storage, upload
    from thub.runner.mirror_resume import newer_remote

    remote = tmp_path / "remote"
    uri = remote.as_uri()
    fs, root = open_storage(uri)
    upload(fs, root, _checkpoint(tmp_path / "made", 4), "checkpoint-4", 4)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert newer_remote(uri, checkpoints, 4, say=lambda _line: None) is None  # the local one is as new
    assert not checkpoints.exists()  # nothing fetched
    half = checkpoints / "checkpoint-4"  # a half-written local save of the same step
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")
    found = newer_remote(uri, checkpoints, None, say=lambda _line: None)
    assert found is not None and found[0] == half and (half / "trainer_state.json").is_file()
    assert (checkpoints.parent / "checkpoints.incomplete" / "checkpoint-4" / "config.json").read_text() == "{}"


def test_an_unreadable_store_stops_the_resume_with_its_cause(tmp_path: Path) -> None:
    from thub.errors import ThubError
    from thub.runner.mirror_resume import newer_remote

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ThubError, match="cannot be listed .*resume without checkpoint_storage"):
        newer_remote((blocker / "sub").as_uri(), tmp_path / "run" / "checkpoints", None, say=print)
