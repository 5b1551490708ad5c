"""The pieces behind the run-safety guarantees (issue 13), on real files: checkpoint completeness,
the divergence count, attempt-scoped root causes, the run directory's lock and ownership."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from thub.errors import UsageError
from thub.runner.checkpoints import checkpoint_problem
from thub.runner.lock import RunLock
from thub.runner.metrics import DivergenceWatch, MetricsWriter, read_metrics
from thub.runner.rootcause import disk_full_cause, root_cause_from_file
from thub.runner.rundir import RunDirectory


def _safetensors(path: Path, values: int = 4) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [values], "data_offsets": [0, 4 * values]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * (4 * values))


def _checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    _safetensors(path / "model.safetensors")
    return path


def test_checkpoint_completeness(tmp_path: Path) -> None:
    good = _checkpoint(tmp_path / "checkpoint-2")
    assert checkpoint_problem(good) is None

    cut = _checkpoint(tmp_path / "checkpoint-4")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[:-3])
    assert "cut short" in (checkpoint_problem(cut) or "")

    no_state = _checkpoint(tmp_path / "checkpoint-6")
    (no_state / "trainer_state.json").unlink()
    assert checkpoint_problem(no_state) == "no trainer_state.json"

    bad_state = _checkpoint(tmp_path / "checkpoint-7")
    (bad_state / "trainer_state.json").write_text('{"global_step": ')
    assert checkpoint_problem(bad_state) == "trainer_state.json is unreadable"

    sharded = _checkpoint(tmp_path / "checkpoint-8")
    (sharded / "model.safetensors").unlink()
    _safetensors(sharded / "model-00001-of-00002.safetensors")
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert checkpoint_problem(sharded) == "weight shard model-00002-of-00002.safetensors is missing"

    torch_bin = _checkpoint(tmp_path / "checkpoint-9")
    (torch_bin / "model.safetensors").unlink()
    with zipfile.ZipFile(torch_bin / "pytorch_model.bin", "w") as archive:
        archive.writestr("archive/data.pkl", b"x" * 100)
    assert checkpoint_problem(torch_bin) is None
    raw = (torch_bin / "pytorch_model.bin").read_bytes()
    (torch_bin / "pytorch_model.bin").write_bytes(raw[: len(raw) // 2])
    assert "pytorch_model.bin" in (checkpoint_problem(torch_bin) or "")


def test_latest_checkpoint_passes_over_incomplete_ones(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path)
    _checkpoint(tmp_path / "checkpoints" / "checkpoint-2")
    (tmp_path / "checkpoints" / "checkpoint-10").mkdir()  # foreign / half written
    found, skipped = run.resume_point()
    assert found == (tmp_path / "checkpoints" / "checkpoint-2", 2)
    assert skipped == [(tmp_path / "checkpoints" / "checkpoint-10", "no trainer_state.json")]
    assert run.latest_checkpoint() == found


def test_non_finite_values_are_marked_and_counted(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path / "m.jsonl", max_steps=9)
    writer.log(1, loss=1.0, grad_norm=float("nan"))
    writer.log(2, loss=float("inf"), grad_norm=1.0)
    writer.log(3, loss=1.0, grad_norm=1.0)
    writer.log(4, loss=float("nan"), grad_norm=float("nan"))
    writer.log(5, loss=float("nan"))
    lines = read_metrics(tmp_path / "m.jsonl")
    assert lines[0]["grad_norm"] is None and lines[0]["non_finite"] == ["grad_norm"]
    assert "non_finite" not in lines[2]
    watch = DivergenceWatch(2)
    messages = [watch.update(line) for line in lines]
    assert messages[:4] == [None, "diverged at step 1: grad_norm and loss were NaN/inf for 2 consecutive "
                            "logged steps (1-2); lower the learning rate (divergence_steps=0 turns this check off)",
                            None, None]  # a finite line resets the count
    assert messages[4].startswith("diverged at step 4: grad_norm and loss were NaN/inf for 2 consecutive")
    off = DivergenceWatch(0)
    assert all(off.update(line) is None for line in lines)


def test_root_cause_comes_from_this_attempt_only(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File \"a.py\", line 1\nValueError: earlier attempt\n")
    offset = log.stat().st_size
    with log.open("a") as handle:
        handle.write("==== thub: attempt started ====\nTraceback (most recent call last):\n  File \"b.py\", line 2\n"
                     "RuntimeError: this attempt\n")
    assert root_cause_from_file(log)[-1] == "ValueError: earlier attempt"
    assert root_cause_from_file(log, offset)[-1] == "RuntimeError: this attempt"


def test_disk_full_is_recognised_from_the_log(tmp_path: Path) -> None:
    text = "step 3\nOSError: [Errno 28] No space left on device: '/r/checkpoints/checkpoint-3/optimizer.pt'\n"
    assert disk_full_cause(text, tmp_path) == (
        "disk full: OSError: [Errno 28] No space left on device: '/r/checkpoints/checkpoint-3/optimizer.pt'")
    assert disk_full_cause("RuntimeError: other\n", tmp_path) is None  # tmp_path's disk is not full


def test_the_lock_is_held_across_processes_and_names_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from thub.runner.lock import RunLock\n"
        f"lock = RunLock(Path({str(tmp_path)!r})).acquire(); print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=f"in use by a live thub run \\(pid {holder.pid}\\)"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path) as lock:  # the kernel dropped the dead holder's lock; the stale file is no lock
        assert lock.fd is not None


def test_overwrite_owns_only_the_layout_and_the_runs_outputs(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    (run.path / "mine.txt").write_text("user")
    with pytest.raises(UsageError, match="not a thub run directory .* mine.txt"):
        run.prepare(overwrite=True, resume=False)
    (run.path / "mine.txt").unlink()
    assert run.prepare(overwrite=False, resume=False) == []
    (run.path / "thub_run.json").write_text(json.dumps({"user_entries": []}))
    (run.path / "hf_format").mkdir()  # a backend's own output
    (run.path / "result.json").write_text(json.dumps({"status": "succeeded", "outputs": ["hf_format", "logs"]}))
    (run.path / "notes.txt").write_text("added by the user after the run")
    assert run.owned_entries() == ["hf_format", "logs", "result.json", "thub_run.json"]
    run.prepare(overwrite=True, resume=False)
    assert run.entries() == ["logs", "notes.txt"]


def test_a_slurm_job_waits_for_then_refuses_a_live_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from thub.launch import worker

    (tmp_path / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl", "parameters": {}}))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from thub.runner.lock import RunLock\n"
        f"lock = RunLock(Path({str(tmp_path)!r})).acquire(); print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(worker, "LOCK_WAIT_SECONDS", 0.5)
        assert worker.main(["prepare", str(tmp_path)]) == 2
        assert f"in use by a live thub run (pid {holder.pid})" in capsys.readouterr().err
        assert not (tmp_path / "slurm").exists()  # nothing done
    finally:
        holder.kill()
        holder.wait()
    assert worker.main(["prepare", str(tmp_path)]) == 0  # the holder is gone: the job goes on
