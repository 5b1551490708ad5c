"""Consolidate where the disk or the target is shared (issue 35 item 10): a disk too small for the model and two
consolidates into one ``--out`` end in a clear refusal (exit 2, no traceback), never a half-written folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_module("torch", "safetensors", "transformers")

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def dcp_checkpoint(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model saved with torch DCP in one process (the layout consolidate reads)."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("dcp-src") / "dcp"
    dcp.save(AutoModelForCausalLM.from_pretrained(tiny_model).state_dict(), checkpoint_id=str(out), no_dist=True)
    return out


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A real 64 KiB tmpfs (the tiny model needs about half a megabyte)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="thub-small-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)
        where.rmdir()


def test_a_disk_too_small_is_refused_before_writing(dcp_checkpoint: Path, tiny_model: Path, small_disk: Path,
                                                    thub: Run) -> None:
    done = thub("checkpoint", "consolidate", str(dcp_checkpoint), "--out", str(small_disk / "hf"), "--base",
                str(tiny_model))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "free" in done.stderr and "needs" in done.stderr, done.stderr
    assert list(small_disk.iterdir()) == [], "consolidate left files on the full disk"


@pytest.mark.slow
def test_two_consolidates_into_one_out(dcp_checkpoint: Path, tiny_model: Path, tmp_path: Path, thub: Run) -> None:
    """Five at once: exactly one writes the folder, the others say why they did not, and no partial folder is
    left beside it."""
    out = tmp_path / "hf"
    command = [sys.executable, "-m", "thub", "checkpoint", "consolidate", str(dcp_checkpoint), "--out", str(out),
               "--base", str(tiny_model)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=thub.environ()) for _ in range(5)]
    outcomes = [(p.wait(timeout=900), p.stdout.read() if p.stdout else "", p.stderr.read() if p.stderr else "")
                for p in processes]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 2, 2, 2, 2], outcomes
    for code, _, stderr in outcomes:
        assert "Traceback" not in stderr, stderr
        if code == 2:
            assert str(out) in stderr and "nothing" in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"], "a partial folder was left beside --out"
    verified = thub("checkpoint", "verify", str(out), "--base", str(tiny_model))
    assert verified.returncode == 0, verified.stdout + verified.stderr
