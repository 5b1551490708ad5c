"""``checkpoint_storage`` (issue 29 item 4) on real trl CPU runs of the tiny model: every complete checkpoint is
mirrored to a real S3-compatible server on 127.0.0.1 (moto's server mode, read back with boto3) or a file://
folder, below the run's own id (``URI/<run-id>/checkpoint-N``, issue 35 item 3), its ``.thub-complete`` marker
written last; a run SIGKILLed after a mirrored checkpoint, its local
checkpoints deleted, continues with ``--resume`` from the remote copy with every step logged once; a remote folder
without a marker (a half-finished upload) is never used; a run stopped by SIGTERM waits for its last upload; a
failed upload (the server stopped) is a warning and the run succeeds; bad URIs are refused at plan time (exit 2);
Training Hub's ``checkpoint_storage`` maps to it. Every wait is for a file or marker to appear (hang guards only).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("fsspec"), pytest.mark.needs_backend("trl")]

ROOT = Path(__file__).parents[1]
GUARD = 600  # seconds: a hang guard only, never an assertion about speed
MARKER = ".thub-complete"


def _environ(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "AWS_"))}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-storage-tests-{os.getpid()}")
    return {**environ, **extra}


def thub(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=_environ(**extra), timeout=900)


def _train_args(model: Path, data: Path, run: Path, max_steps: int, storage: str) -> list[str]:
    return ["train", "sft", "--backend", "trl", "--model-path", str(model), "--data-path", str(data / "chat.jsonl"),
            "--ckpt-output-dir", str(run), "--max-steps", str(max_steps), "--save-steps", "2",
            "--learning-rate", "5e-2", "--checkpoint-storage", storage]


def _start(args: list[str], log: Path, **extra: str) -> subprocess.Popen[bytes]:
    handle = open(log, "wb")  # noqa: SIM115 - closed by the test once the process ended
    return subprocess.Popen([sys.executable, "-m", "thub", *args], stdout=handle, stderr=subprocess.STDOUT,
                            env=_environ(**extra), start_new_session=True)


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes] | None, log: Path | None) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended (code {proc.returncode}) before it happened:\n"
                        f"{log.read_text()[-4000:] if log else ''}")
        if time.monotonic() > deadline:
            pytest.fail("hang guard: it never happened")
        time.sleep(0.1)


def _lock_free(run: Path) -> bool:
    """Whether the run directory's lock is free (the killed run's training child is gone)."""
    with open(run / ".thub.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def _steps(run: Path) -> list[int]:
    lines = [json.loads(line) for line in (run / "training_metrics.jsonl").read_text().splitlines() if line.strip()]
    return [line["step"] for line in lines if "loss" in line]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_id(run: Path) -> str:
    """The run's id (thub_run.json): its copies are below ``URI/<run-id>/``."""
    return str(json.loads((run / "thub_run.json").read_text())["run_id"])


def _marked(remote: Path, name: str) -> bool:
    """Whether a run's ``name`` copy in the ``file://`` folder ``remote`` carries its marker."""
    return any(remote.glob(f"*/{name}/{MARKER}"))


# --- S3: moto's server on 127.0.0.1 ----------------------------------------------------------------

def _client(environ: dict[str, str]) -> Any:
    import boto3  # type: ignore[import-untyped]  # ships no stubs

    return boto3.client("s3", endpoint_url=environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="y")


def _keys(client: Any, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="models", Prefix=prefix)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def _marked_steps(client: Any, prefix: str) -> list[int]:
    """The steps of the checkpoint-N folders under ``prefix`` that carry their marker."""
    return sorted(int(key.split("/")[-2].removeprefix("checkpoint-")) for key in _keys(client, prefix)
                  if key.endswith(f"/{MARKER}") and key.split("/")[-2].startswith("checkpoint-"))


def test_sigkill_then_resume_from_the_s3_copy_never_a_half_uploaded_one(
        tiny_model: Path, demo_data: Path, tmp_path: Path,
        s3_server: Any) -> None:
    environ = s3_server.environ
    client = _client(environ)
    run, log, uri = tmp_path / "run", tmp_path / "first.log", "s3://models/runs/one"
    # max_steps far beyond where it is killed: the kill comes once checkpoint-2's marker is there
    proc = _start(_train_args(tiny_model, demo_data, run, 100000, uri), log, **environ)
    try:
        _wait_for(lambda: 2 in _marked_steps(client, "runs/one/"), proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    _wait_for(lambda: _lock_free(run), None, None)  # the child follows its parent (thub.runner.lifeline)
    newest = max(_marked_steps(client, "runs/one/"))  # nothing uploads any more: the parent is gone
    run_id = _run_id(run)
    prefix = f"runs/one/{run_id}"
    marker = json.loads(client.get_object(Bucket="models", Key=f"{prefix}/checkpoint-{newest}/{MARKER}")["Body"]
                        .read())
    assert marker["run_id"] == run_id and marker["step"] == newest
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json"} <= {f["path"] for f in marker["files"]}
    shutil.rmtree(run / "checkpoints")  # the node's disk is lost: only the remote copies are left
    # a newer folder whose upload never finished: every file but the marker
    half = newest + 100
    for key in _keys(client, f"{prefix}/checkpoint-{newest}/"):
        if not key.endswith(MARKER):
            client.copy_object(Bucket="models", CopySource={"Bucket": "models", "Key": key},
                               Key=key.replace(f"checkpoint-{newest}/", f"checkpoint-{half}/"))
    total = newest + 2
    resumed = thub(*_train_args(tiny_model, demo_data, run, total, uri), "--resume", **environ)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    assert f"{uri}/{run_id}/checkpoint-{half} has no {MARKER} marker" in out and "never used" in out
    assert (f"resuming from checkpoint-{newest} (step {newest} of {total}), fetched from "
            f"{uri}/{run_id}/checkpoint-{newest} (there is no complete local one)") in out
    assert not (run / "checkpoints" / f"checkpoint-{half}").exists()
    assert _steps(run) == list(range(1, total + 1))  # every step logged once, the resumed ones after the kept
    record = json.loads((run / "thub_run.json").read_text())
    assert record["resume_from"] == str(run / "checkpoints" / f"checkpoint-{newest}")
    assert record["run_id"] == run_id and record["resume_fetched_from"] == f"{uri}/{run_id}/checkpoint-{newest}"
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "succeeded" and f"checkpoint-{total}" in result["checkpoint_storage"]["mirrored"]
    assert total in _marked_steps(client, f"{prefix}/") and not result["checkpoint_storage"]["failed"]
    assert {key.split("/")[2] for key in _keys(client, "runs/one/")} == {run_id}  # one run, one prefix
    assert "test-secret-access-key" not in out + (run / "result.json").read_text()


def test_a_failed_upload_is_a_warning_and_the_run_succeeds(
        tiny_model: Path, demo_data: Path, tmp_path: Path,
        s3_server: Any) -> None:
    environ, server = s3_server.environ, s3_server.process
    server.terminate()  # the storage is gone before the first upload
    server.wait(timeout=60)
    run = tmp_path / "run"
    done = thub(*_train_args(tiny_model, demo_data, run, 2, "s3://models/runs/gone"), **environ)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"thub: warning: checkpoint checkpoint-2 was not mirrored to s3://models/runs/gone/{_run_id(run)}:"
            in done.stderr)
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "succeeded"
    assert any(w.startswith("checkpoint checkpoint-2 was not mirrored") for w in result["warnings"])
    storage = result["checkpoint_storage"]
    assert "checkpoint-2" in {f["name"] for f in storage["failed"]} and "checkpoint-2" not in storage["mirrored"]
    assert storage["failed"][0]["error"]  # the cause, named
    assert (run / "checkpoints" / "checkpoint-2" / "model.safetensors").is_file()  # the local one is untouched
    assert not (run / ".thub-mirror").exists()  # the staged links are gone


# --- file:// ---------------------------------------------------------------------------------------

def test_sigterm_waits_for_the_last_upload_and_resume_fetches_it_from_a_folder(
        tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    run, log, remote = tmp_path / "run", tmp_path / "first.log", tmp_path / "remote"
    uri = remote.as_uri()
    proc = _start(_train_args(tiny_model, demo_data, run, 100000, uri), log)
    try:
        _wait_for(lambda: _marked(remote, "checkpoint-2"), proc, log)
        proc.send_signal(signal.SIGTERM)  # checkpoint and stop: the stop's checkpoint is mirrored before exit
        proc.wait(timeout=GUARD)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "interrupted", log.read_text()[-4000:]
    local = max(int(p.name.removeprefix("checkpoint-")) for p in (run / "checkpoints").glob("checkpoint-*"))
    assert result["checkpoint_storage"]["pending"] == [] and f"checkpoint-{local}" in \
        result["checkpoint_storage"]["mirrored"]
    remote = remote / _run_id(run)  # this run's copies
    marker = json.loads((remote / f"checkpoint-{local}" / MARKER).read_text())
    source = run / "checkpoints" / f"checkpoint-{local}"
    assert {f["path"] for f in marker["files"]} == {p.relative_to(source).as_posix() for p in source.rglob("*")
                                                    if p.is_file()}
    for entry in marker["files"]:  # the marker's hashes are the local files'; the copies are the same bytes
        assert entry["sha256"] == _sha256(source / entry["path"]) == _sha256(remote / f"checkpoint-{local}" /
                                                                            entry["path"])
    shutil.rmtree(run / "checkpoints")
    total = local + 2
    resumed = thub(*_train_args(tiny_model, demo_data, run, total, uri), "--resume")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    assert (f"resuming from checkpoint-{local} (step {local} of {total}), fetched from "
            f"{uri}/{_run_id(run)}/checkpoint-{local}") in out
    assert _steps(run) == list(range(1, total + 1))
    assert (remote / f"checkpoint-{total}" / MARKER).is_file()


def test_a_local_checkpoint_as_new_as_the_remote_one_is_used_as_it_is(
        tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    """A resume with its local checkpoints still there fetches nothing; a corrupt remote copy is never fetched
    over it (the remote is only read)."""
    run, log, remote = tmp_path / "run", tmp_path / "first.log", tmp_path / "remote"
    uri = remote.as_uri()
    proc = _start(_train_args(tiny_model, demo_data, run, 100000, uri), log)
    try:
        _wait_for(lambda: _marked(remote, "checkpoint-2"), proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    _wait_for(lambda: _lock_free(run), None, None)
    local = max(int(p.name.removeprefix("checkpoint-")) for p in (run / "checkpoints").glob("checkpoint-*")
                if (p / "trainer_state.json").is_file())
    resumed = thub(*_train_args(tiny_model, demo_data, run, local + 2, uri), "--resume")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    assert "(local; checkpoint_storage holds none newer)" in out and "fetched from" not in out
    assert _steps(run) == list(range(1, local + 3))


# --- plan time and Training Hub's name ---------------------------------------------------------------

@pytest.mark.parametrize(("uri", "expected"), [
    ("ftp://host/ckpt", "expected s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or file:///PATH"),
    ("file://relative/path", "a file:// location is an absolute path"),
    ("s3://", "no bucket (s3://BUCKET/PREFIX)"),
])
def test_a_bad_uri_is_refused_at_plan_time(uri: str, expected: str, tmp_path: Path) -> None:
    done = thub("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
                str(ROOT / "examples" / "data" / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                "--checkpoint-storage", uri, "--dry-run")
    assert done.returncode == 2 and "checkpoint_storage" in done.stderr and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "o").exists()


def test_a_missing_driver_is_refused_with_its_install_command(tmp_path: Path) -> None:
    from importlib.util import find_spec

    if find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    done = thub("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
                str(ROOT / "examples" / "data" / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "o"),
                "--checkpoint-storage", "gs://bucket/run", "--dry-run")
    assert done.returncode == 2 and "python -m pip install gcsfs" in done.stderr, done.stderr


def test_training_hubs_checkpoint_storage_maps_to_the_mirror(tmp_path: Path) -> None:
    import thub as api
    from thub.errors import UsageError

    base: dict[str, Any] = {"backend": "trl", "model_path": "m",
                            "data_path": str(ROOT / "examples" / "data" / "chat.jsonl"),
                            "ckpt_output_dir": str(tmp_path / "o")}
    plan = api.dry_run("lora_sft", **base, checkpoint_storage="s3://bucket/run", micro_batch_size=2)
    assert plan["parameters"]["checkpoint_storage"]["value"] == "s3://bucket/run"
    local = api.dry_run("sft", **base, checkpoint_storage="pvc")  # Training Hub's "filesystem only"
    assert local["parameters"]["checkpoint_storage"]["value"] is None
    assert any(note.startswith("checkpoint_storage='pvc'") for note in local["training_hub_notes"])
    with pytest.raises(UsageError, match="checkpoint_storage"):
        api.dry_run("sft", **base, checkpoint_storage="abfs://container/run")
    from thub_builtins.training_hub.names import rows

    [row] = [r for r in rows() if r["name"] == "checkpoint_storage"]
    assert row["kind"] == "same" and row["thub"] == "checkpoint_storage"
