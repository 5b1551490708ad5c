"""``checkpoint_storage`` shared and damaged (issue 35 items 3 and 4), without training: the run directories are
made by thub's own preparation (``prepared_run``: what ``thub train`` runs before its child), the copies written
by the real :class:`~thub.runner.mirror.Mirror` to a real S3-compatible server (moto's server mode on 127.0.0.1)
or a ``file://`` folder, and read back by the real ``--resume`` preparation.

Item 3: five runs started at once on one URI (five processes) each keep their copies under their own run id
(``URI/<run-id>/checkpoint-N``) and each resume fetches its own weights (sha256); the run id stays across
``--resume`` and changes with ``--overwrite``; a marker of another run is refused; a bucket written by an older
thub (``URI/checkpoint-N``, markers without a run id) is read only by a run an older thub started; the dry run
shows the prefix. Item 4: a copy missing a listed file, and markers that are not what thub writes (``[]``,
not JSON, wrong types, a path outside the checkpoint, nested too deep), are each skipped, named, for the next
older complete copy, in stderr and in ``thub_run.json``; none usable is a start from step 1, said. Every wait is
for a file to appear (hang guards only).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.needs_module("fsspec", "safetensors", "numpy"), pytest.mark.needs_backend("trl")]

ROOT = Path(__file__).parents[1]
DATA = ROOT / "examples" / "data" / "chat.jsonl"
GUARD = 600  # seconds: a hang guard only, never an assertion about speed
MARKER = ".thub-complete"
RUNS = 5


def _checkpoint(folder: Path, step: int, value: int) -> Path:
    """A complete HF Trainer checkpoint-N (config, whole safetensors, trainer state) whose weights are ``value``."""
    import numpy as np
    from safetensors.numpy import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": np.full((4, 4), value, dtype=np.float32)}, str(path / "model.safetensors"))
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 10}))
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _flags(run: Path, uri: str) -> dict[str, Any]:
    # a model path that cannot load: the preparation keeps no expected counts (no tokenizer, no network)
    return {"model_path": "/nonexistent/model", "data_path": str(DATA), "ckpt_output_dir": str(run),
            "checkpoint_storage": uri}


def _prepare(run: Path, uri: str, *, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """What ``thub train`` does before its child starts (lock, --resume/--overwrite, thub_run.json); the record."""
    from thub.config.resolve import resolve
    from thub.launch.plan import plan_for
    from thub.manager import load_registry
    from thub.runner.prepare import prepared_run
    from thub.runner.rundir import RunDirectory

    resolved = resolve(load_registry(), "sft", backend="trl", environ={}, flags=_flags(run, uri))
    with prepared_run(resolved, RunDirectory(run), plan_for(resolved).data, overwrite=overwrite, resume=resume,
                      command_line=["test"]):
        pass
    return json.loads((run / "thub_run.json").read_text())


def _mirror(run: Path, uri: str, values: dict[int, int]) -> dict[int, str]:
    """Save ``checkpoint-N`` (weights ``values[N]``) in the run and send them with the real Mirror; their sha256."""
    from thub.runner.mirror import Mirror

    mirror = Mirror(uri, run, capacity=len(values))
    for step, value in sorted(values.items()):
        mirror.offer(_checkpoint(run / "checkpoints", step, value), step)
    summary = mirror.finish(timeout=GUARD)
    assert summary["mirrored"] == [f"checkpoint-{step}" for step in sorted(values)], summary
    return {step: _sha256(run / "checkpoints" / f"checkpoint-{step}" / "model.safetensors") for step in values}


def _wait_for(paths: list[Path], procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + GUARD
    while not all(path.exists() for path in paths):
        for proc, log in zip(procs, logs):
            if proc.poll() is not None and proc.returncode != 0:
                pytest.fail(f"a run ended (code {proc.returncode}):\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail("hang guard: it never happened")
        time.sleep(0.05)


# --- item 3: five runs on one URI, each in its own process ------------------------------------------

#: one run: prepared by thub, two checkpoints mirrored once every run is ready, then (once every run has sent
#: its copies) its local checkpoints lost and --resume prepared; what it saw written to report.json
_ONE_RUN = r'''
import hashlib, json, shutil, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[6])
from test_trust_mirror import _checkpoint, _flags, _prepare
from thub.runner.mirror import Mirror

index, run, uri, gate = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
report = Path(sys.argv[5])

def wait(name):
    deadline = time.monotonic() + 600  # a hang guard only
    while not (gate / name).exists() and time.monotonic() < deadline:
        time.sleep(0.02)

def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()

first = _prepare(run, uri)
(gate / f"ready-{index}").touch()
wait("go")  # every run prepared: all five send at once
mirror = Mirror(uri, run, capacity=2)
for step in (2, 4):
    mirror.offer(_checkpoint(run / "checkpoints", step, 100 * index + step), step)
summary = mirror.finish(timeout=600)
own = {step: sha(run / "checkpoints" / f"checkpoint-{step}" / "model.safetensors") for step in (2, 4)}
(gate / f"sent-{index}").touch()
wait("resume")  # every run has sent its copies: a last writer would have won by now
shutil.rmtree(run / "checkpoints")  # the node's disk is lost
second = _prepare(run, uri, resume=True)
fetched = Path(second["resume_from"]) / "model.safetensors" if second.get("resume_from") else None
report.write_text(json.dumps({"run_id": first.get("run_id"), "resumed_run_id": second.get("run_id"),
                              "summary": summary, "own": own, "resume_from": second.get("resume_from"),
                              "fetched_from": second.get("resume_fetched_from"),
                              "fetched": sha(fetched) if fetched and fetched.is_file() else None}))
'''


def _environ(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "AWS_"))}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-trust-mirror-{os.getpid()}")
    return {**environ, "HF_HUB_OFFLINE": "1", **extra}


def _concurrent_runs(tmp_path: Path, uri: str, extra: dict[str, str]) -> list[dict[str, Any]]:
    gate = tmp_path / "gate"
    gate.mkdir()
    procs, logs = [], []
    try:
        for index in range(RUNS):
            log = tmp_path / f"run{index}.log"
            logs.append(log)
            with open(log, "wb") as handle:
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", _ONE_RUN, str(index), str(tmp_path / f"run{index}"), uri, str(gate),
                     str(tmp_path / f"report{index}.json"), str(Path(__file__).parent)],
                    stdout=handle, stderr=subprocess.STDOUT, env=_environ(tmp_path, extra), cwd=tmp_path))
        _wait_for([gate / f"ready-{i}" for i in range(RUNS)], procs, logs)
        (gate / "go").touch()
        _wait_for([gate / f"sent-{i}" for i in range(RUNS)], procs, logs)
        (gate / "resume").touch()
        for proc, log in zip(procs, logs):
            assert proc.wait(timeout=GUARD) == 0, log.read_text()[-4000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [json.loads((tmp_path / f"report{i}.json").read_text()) for i in range(RUNS)]


def _check_separate(reports: list[dict[str, Any]], uri: str, remote: dict[str, bytes]) -> None:
    """Each run resumed from its own weights, and the store holds five runs' copies side by side."""
    for index, report in enumerate(reports):
        assert report["fetched"] == report["own"]["4"], f"run {index} resumed from another run's weights: {report}"
    ids = [report["run_id"] for report in reports]
    assert all(ids) and len(set(ids)) == RUNS, ids
    expected = set()
    for report in reports:
        run_id = report["run_id"]
        assert report["resumed_run_id"] == run_id  # the same run: the same id across --resume
        assert report["fetched_from"] == f"{uri}/{run_id}/checkpoint-4"
        assert report["summary"]["prefix"] == f"{uri}/{run_id}"
        for step in (2, 4):
            name = f"{run_id}/checkpoint-{step}"
            expected |= {f"{name}/{f}" for f in ("config.json", "model.safetensors", "trainer_state.json", MARKER)}
            assert hashlib.sha256(remote[f"{name}/model.safetensors"]).hexdigest() == report["own"][str(step)]
            marker = json.loads(remote[f"{name}/{MARKER}"])
            assert marker["run_id"] == run_id and marker["name"] == f"checkpoint-{step}"
    assert set(remote) == expected  # nothing at URI/checkpoint-N, nothing else


def test_five_runs_on_one_file_uri_keep_their_own_copies_and_resume_their_own_weights(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket" / "ckpts"
    reports = _concurrent_runs(tmp_path, bucket.as_uri(), {})
    remote = {p.relative_to(bucket).as_posix(): p.read_bytes() for p in bucket.rglob("*") if p.is_file()}
    _check_separate(reports, bucket.as_uri(), remote)


def test_five_runs_on_one_s3_uri_keep_their_own_copies_and_resume_their_own_weights(
        tmp_path: Path, s3_server: Any) -> None:
    client = s3_server.client()
    reports = _concurrent_runs(tmp_path, "s3://models/team/ckpts", s3_server.environ)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="models", Prefix="team/ckpts/")
    keys = [obj["Key"] for page in pages for obj in page.get("Contents", [])]
    remote = {key.removeprefix("team/ckpts/"): client.get_object(Bucket="models", Key=key)["Body"].read()
              for key in keys}
    _check_separate(reports, "s3://models/team/ckpts", remote)


# --- item 3: the run id's life, another run's marker, an older thub's bucket, the dry run -------------

def test_the_run_id_stays_across_resume_and_changes_with_overwrite(tmp_path: Path) -> None:
    run, uri = tmp_path / "my run", (tmp_path / "bucket").as_uri()
    first = _prepare(run, uri)["run_id"]
    assert first.startswith("my-run-") and first != _prepare(tmp_path / "my run 2", uri)["run_id"]
    assert _prepare(run, uri, resume=True)["run_id"] == first
    assert _prepare(run, uri, resume=True)["run_id"] == first
    replaced = _prepare(run, uri, overwrite=True)["run_id"]
    assert replaced and replaced != first


@pytest.mark.parametrize("bad", ["../other-run", "a/b", "", 7, "x" * 300])
def test_a_malformed_run_id_in_thub_run_json_is_refused_at_resume(tmp_path: Path, bad: Any) -> None:
    from thub.errors import UsageError

    run, uri = tmp_path / "run", (tmp_path / "bucket").as_uri()
    record = _prepare(run, uri)
    record["run_id"] = bad
    (run / "thub_run.json").write_text(json.dumps(record))
    with pytest.raises(UsageError, match=r"thub_run\.json.*run_id"):
        _prepare(run, uri, resume=True)
    assert json.loads((run / "thub_run.json").read_text())["run_id"] == bad  # nothing rewritten


def test_a_marker_of_another_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = tmp_path / "bucket"
    uri = bucket.as_uri()
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    my_id, their_id = _prepare(mine, uri)["run_id"], _prepare(theirs, uri)["run_id"]
    own = _mirror(mine, uri, {2: 2, 4: 4})
    _mirror(theirs, uri, {6: 66})
    # their newer copy, marker and all, copied under my prefix (a colleague's `aws s3 cp`)
    shutil.copytree(bucket / their_id / "checkpoint-6", bucket / my_id / "checkpoint-6")
    shutil.rmtree(mine / "checkpoints")
    record = _prepare(mine, uri, resume=True)
    err = capsys.readouterr().err
    assert record["resume_from"] == str(mine / "checkpoints" / "checkpoint-4")
    assert _sha256(mine / "checkpoints" / "checkpoint-4" / "model.safetensors") == own[4]
    assert not (mine / "checkpoints" / "checkpoint-6").exists()
    [skipped] = record["resume_skipped"]
    assert skipped["checkpoint"] == f"{uri}/{my_id}/checkpoint-6"
    assert f"belongs to run {their_id}, not this run ({my_id})" in skipped["reason"]
    assert f"{uri}/{my_id}/checkpoint-6 not used: " in err and skipped["reason"] in err


def _legacy_copy(bucket: Path, step: int, value: int, made: Path, run_id: str | None = None) -> str:
    """What an older thub wrote: ``URI/checkpoint-N`` and a marker without a run id; its sha256."""
    from thub.runner.mirror import file_list

    source = _checkpoint(made, step, value)
    target = bucket / f"checkpoint-{step}"
    shutil.copytree(source, target)
    content: dict[str, Any] = {"thub_mirror": 1, "name": target.name, "step": step, "files": file_list(source),
                               "at": 0.0}
    if run_id is not None:
        content["run_id"] = run_id
    (target / MARKER).write_text(json.dumps(content))
    return _sha256(source / "model.safetensors")


def test_a_bucket_written_by_an_older_thub_is_read_by_a_run_an_older_thub_started_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = tmp_path / "bucket"
    uri = bucket.as_uri()
    legacy = _legacy_copy(bucket, 4, 4, tmp_path / "made")
    _legacy_copy(bucket, 6, 6, tmp_path / "made6", run_id="someone-else-20250101T000000Z-0badc0de")
    old = tmp_path / "old"
    record = _prepare(old, uri)
    del record["run_id"]  # started by an older thub: no run id recorded
    (old / "thub_run.json").write_text(json.dumps(record))
    resumed = _prepare(old, uri, resume=True)
    err = capsys.readouterr().err
    assert "run_id" not in resumed  # it keeps the older layout to its end
    assert resumed["resume_from"] == str(old / "checkpoints" / "checkpoint-4")
    assert _sha256(old / "checkpoints" / "checkpoint-4" / "model.safetensors") == legacy
    assert "started by an older thub" in err and f"{uri}/checkpoint-N" in err
    [skipped] = resumed["resume_skipped"]  # a run id's marker at the top is not the older run's
    assert skipped["checkpoint"] == f"{uri}/checkpoint-6" and "belongs to run someone-else-" in skipped["reason"]
    # a run this thub started never takes the older layout's copies
    new = tmp_path / "new"
    _prepare(new, uri)
    fresh = _prepare(new, uri, resume=True)
    assert fresh["resume_from"] is None and not (new / "checkpoints").exists()
    assert "no complete checkpoint: starting from step 1" in capsys.readouterr().err


def test_the_dry_run_shows_the_remote_prefix(tmp_path: Path) -> None:
    import thub as api

    run, uri = tmp_path / "out", "s3://bucket/ckpts"
    plan = api.dry_run("sft", backend="trl", **_flags(run, uri))
    storage = plan["checkpoint_storage"]
    assert storage["prefix"] == f"{uri}/<run-id>" and storage["run_id"] is None
    assert "out-" in storage["note"]  # the shape of the id a new run gets
    run_id = _prepare(run, (tmp_path / "bucket").as_uri())["run_id"]
    again = api.dry_run("sft", backend="trl", **_flags(run, uri))["checkpoint_storage"]
    assert again["prefix"] == f"{uri}/{run_id}" and again["run_id"] == run_id
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path",
                           "/nonexistent/model", "--data-path", str(DATA), "--ckpt-output-dir", str(run),
                           "--checkpoint-storage", uri, "--dry-run"], capture_output=True, text=True,
                          env=_environ(tmp_path, {}), timeout=GUARD)
    assert done.returncode == 0, done.stderr
    assert f"{uri}/{run_id}/checkpoint-N" in done.stdout


# --- item 4: a bad copy is skipped, named, for the next older complete one -----------------------------

def _run_with_copies(tmp_path: Path, uri: str) -> tuple[Path, str, dict[int, str]]:
    run = tmp_path / "run"
    run_id = _prepare(run, uri)["run_id"]
    own = _mirror(run, uri, {2: 2, 4: 4, 6: 6})
    shutil.rmtree(run / "checkpoints")  # the node's disk is lost: only the remote copies are left
    return run, run_id, own


def _resume_skipping(run: Path, uri: str, run_id: str, own: dict[int, str], skipped_steps: list[int],
                     err: str, record: dict[str, Any], why: str) -> None:
    step = max(n for n in own if n not in skipped_steps)
    assert record["resume_from"] == str(run / "checkpoints" / f"checkpoint-{step}"), err
    assert _sha256(run / "checkpoints" / f"checkpoint-{step}" / "model.safetensors") == own[step]
    assert [s["checkpoint"] for s in record["resume_skipped"]] == [f"{uri}/{run_id}/checkpoint-{n}"
                                                                   for n in skipped_steps]
    assert all(why in s["reason"] for s in record["resume_skipped"]), record["resume_skipped"]
    for entry in record["resume_skipped"]:
        assert f"{entry['checkpoint']} not used: {entry['reason']}" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"checkpoint-{step}"]


def test_a_copy_missing_a_listed_file_is_skipped_for_an_older_one_on_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = tmp_path / "bucket"
    run, run_id, own = _run_with_copies(tmp_path, bucket.as_uri())
    (bucket / run_id / "checkpoint-6" / "model.safetensors").unlink()
    record = _prepare(run, bucket.as_uri(), resume=True)
    _resume_skipping(run, bucket.as_uri(), run_id, own, [6], capsys.readouterr().err, record,
                     "model.safetensors is listed in its .thub-complete marker but is not there")


def test_a_copy_missing_a_listed_file_is_skipped_for_an_older_one_on_s3(
        tmp_path: Path, s3_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import s3fs  # type: ignore[import-untyped]  # ships no stubs

    for name, value in s3_server.environ.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # one made for an earlier test's server would point at its port
    uri = "s3://models/team/ckpts"
    run, run_id, own = _run_with_copies(tmp_path, uri)
    s3_server.client().delete_object(Bucket="models", Key=f"team/ckpts/{run_id}/checkpoint-6/model.safetensors")
    record = _prepare(run, uri, resume=True)
    s3fs.S3FileSystem.clear_instance_cache()
    _resume_skipping(run, uri, run_id, own, [6], capsys.readouterr().err, record,
                     "model.safetensors is listed in its .thub-complete marker but is not there")


_GOOD = {"path": "model.safetensors", "bytes": 1, "sha256": "0" * 64}

#: markers that are not what thub writes, each with the words its skip is named by
DAMAGED: list[tuple[str, bytes, str]] = [
    ("a list", b"[]", "is not a JSON object"),
    ("null", b"null", "is not a JSON object"),
    ("not JSON", b"{\"files\": [", "does not read as JSON"),
    ("nested too deep", b"[" * 100_000 + b"]" * 100_000, "does not read as JSON"),
    ("not UTF-8", b"\xff\xfe{}", "does not read as JSON"),
    ("files a string", json.dumps({"thub_mirror": 1, "files": "model.safetensors"}).encode(), "files"),
    ("no files", json.dumps({"thub_mirror": 1, "files": []}).encode(), "lists no files"),
    ("an entry a list", json.dumps({"thub_mirror": 1, "files": [["model.safetensors"]]}).encode(), "files[0]"),
    ("a path a number", json.dumps({"thub_mirror": 1, "files": [{**_GOOD, "path": 7}]}).encode(), "files[0]"),
    ("bytes a string", json.dumps({"thub_mirror": 1, "files": [{**_GOOD, "bytes": "1"}]}).encode(), "files[0]"),
    ("bytes negative", json.dumps({"thub_mirror": 1, "files": [{**_GOOD, "bytes": -1}]}).encode(), "files[0]"),
    ("sha256 not hex", json.dumps({"thub_mirror": 1, "files": [{**_GOOD, "sha256": "x"}]}).encode(), "files[0]"),
    ("a path outside", json.dumps({"thub_mirror": 1, "files": [{**_GOOD, "path": "../../x"}]}).encode(),
     "outside the checkpoint"),
    ("an absolute path", json.dumps({"thub_mirror": 1, "files": [{**_GOOD, "path": "/etc/x"}]}).encode(),
     "outside the checkpoint"),
]


@pytest.mark.parametrize(("case", "content", "why"), DAMAGED, ids=[case for case, _c, _w in DAMAGED])
def test_a_damaged_marker_is_skipped_for_an_older_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       case: str, content: bytes, why: str) -> None:
    bucket = tmp_path / "bucket"
    run, run_id, own = _run_with_copies(tmp_path, bucket.as_uri())
    (bucket / run_id / "checkpoint-6" / MARKER).write_bytes(content)
    record = _prepare(run, bucket.as_uri(), resume=True)
    _resume_skipping(run, bucket.as_uri(), run_id, own, [6], capsys.readouterr().err, record, why)


def test_a_marker_of_another_checkpoint_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """checkpoint-4 copied to checkpoint-6 in the bucket, marker and all: not checkpoint-6's."""
    bucket = tmp_path / "bucket"
    run, run_id, own = _run_with_copies(tmp_path, bucket.as_uri())
    shutil.rmtree(bucket / run_id / "checkpoint-6")
    shutil.copytree(bucket / run_id / "checkpoint-4", bucket / run_id / "checkpoint-6")
    record = _prepare(run, bucket.as_uri(), resume=True)
    _resume_skipping(run, bucket.as_uri(), run_id, own, [6], capsys.readouterr().err, record,
                     "names checkpoint-4")


def test_every_copy_bad_starts_from_step_1_naming_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = tmp_path / "bucket"
    uri = bucket.as_uri()
    run, run_id, _own = _run_with_copies(tmp_path, uri)
    (bucket / run_id / "checkpoint-6" / MARKER).write_bytes(b"[]")
    (bucket / run_id / "checkpoint-4" / "model.safetensors").unlink()
    (bucket / run_id / "checkpoint-2" / MARKER).unlink()  # an upload cut off
    record = _prepare(run, uri, resume=True)
    err = capsys.readouterr().err
    assert record["resume_from"] is None and "no complete checkpoint: starting from step 1" in err
    assert [s["checkpoint"] for s in record["resume_skipped"]] == [f"{uri}/{run_id}/checkpoint-{n}" for n in (6, 4, 2)]
    assert "has no .thub-complete marker" in record["resume_skipped"][2]["reason"]
    assert "Traceback" not in err and not any((run / "checkpoints").iterdir())
