"""Checksums through the whole chain (issue 35 item 8): merge, consolidate and export write ``thub_manifest.json``
(sha256 and size of every file); verify checks a folder against it, push refuses a folder that no longer matches
it. A flipped low bit in one tensor loads, is finite and has the right shape: only the manifest finds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from thub.checkpoint.manifest import MANIFEST, check_manifest, file_entries, write_manifest

Run = Callable[..., subprocess.CompletedProcess[str]]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "sub" / "tokenizer.json").write_text('{"ünïcode": true}', encoding="utf-8")
    return folder


def _flip_low_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1
    path.write_bytes(bytes(data))


def test_a_written_manifest_checks(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    content = write_manifest(folder, "test")
    assert [f["path"] for f in content["files"]] == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    found = check_manifest(folder)
    assert found.ok is True, found.message
    assert check_manifest(tmp_path).ok is None  # no manifest: nothing to say either way


@pytest.mark.parametrize("damage, expected", [
    (lambda f: _flip_low_bit(f / "model.safetensors", 1000), "model.safetensors: its sha256 differs"),
    (lambda f: (f / "config.json").unlink(), "config.json: missing"),
    (lambda f: (f / "config.json").write_text('{"a": 12}'), "config.json: 9 bytes, the manifest says 8"),
    (lambda f: (f / "extra.bin").write_bytes(b"x"), "extra.bin: not in the manifest"),
    (lambda f: (f / MANIFEST).write_text("[]"), "has no list of files"),
    (lambda f: (f / MANIFEST).write_text("[" * 100_000), "unreadable"),
    (lambda f: (f / MANIFEST).write_bytes(b"\xff\xfe"), "unreadable"),
    (lambda f: (f / MANIFEST).write_text(json.dumps({"files": [{"path": "a", "bytes": True, "sha256": "x"}]})),
     "not {path, bytes, sha256}"),
])
def test_damage_is_named(tmp_path: Path, damage: Callable[[Path], object], expected: str) -> None:
    folder = _folder(tmp_path)
    write_manifest(folder, "test")
    damage(folder)
    found = check_manifest(folder)
    assert found.ok is False and expected in found.message, found.message


def test_paths_in_a_manifest_never_leave_the_folder(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    (folder / "link.txt").symlink_to(outside)
    (folder / "linked-dir").symlink_to(tmp_path, target_is_directory=True)
    # links are neither listed nor followed when the manifest is written
    assert [f["path"] for f in file_entries(folder)] == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    digest = file_entries(tmp_path)[-1]["sha256"]
    for name in ("../secret.txt", str(outside), "link.txt", "linked-dir/secret.txt"):
        (folder / MANIFEST).write_text(json.dumps({"files": [{"path": name, "bytes": 9, "sha256": digest}]}))
        found = check_manifest(folder)
        assert found.ok is False and ("outside the folder" in found.message or "a link" in found.message), \
            (name, found.message)


@pytest.mark.needs_module("torch", "safetensors", "transformers")
def test_consolidate_writes_a_manifest_verify_checks(tiny_model: Path, tmp_path: Path, thub: Run) -> None:
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    dcp.save(AutoModelForCausalLM.from_pretrained(tiny_model).state_dict(), checkpoint_id=str(tmp_path / "dcp"),
             no_dist=True)
    out = tmp_path / "hf"
    done = thub("checkpoint", "consolidate", str(tmp_path / "dcp"), "--out", str(out), "--base", str(tiny_model))
    assert done.returncode == 0, done.stderr
    assert check_manifest(out).ok is True
    listed = {f["path"] for f in json.loads((out / MANIFEST).read_text())["files"]}
    assert listed == {p.name for p in out.iterdir()} - {MANIFEST}
    verified = thub("checkpoint", "verify", str(out), "--base", str(tiny_model), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    checks = {c["check"]: c for c in json.loads(verified.stdout)["checks"]}
    assert checks["manifest"]["ok"] is True, checks
    # one low bit of one float flipped: loads, finite, right shape; the manifest is the only check that sees it
    flipped = tmp_path / "flipped"
    shutil.copytree(out, flipped)
    header = int.from_bytes((flipped / "model.safetensors").read_bytes()[:8], "little")
    _flip_low_bit(flipped / "model.safetensors", 8 + header + 4)
    verified = thub("checkpoint", "verify", str(flipped), "--base", str(tiny_model), "--json")
    assert verified.returncode == 1, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["failed"]["check"] == "manifest" and "model.safetensors" in report["failed"]["message"], report
    others = {c["check"]: c["ok"] for c in report["checks"] if c["check"] != "manifest"}
    assert all(ok is not False for ok in others.values()), others
    assert os.stat(flipped / "model.safetensors").st_size == os.stat(out / "model.safetensors").st_size


def test_the_card_shows_the_data_hash_recorded_at_training(tmp_path: Path) -> None:
    """An edited data file is not shown as trained: the card keeps the sha256 thub_run.json recorded when training
    read it (thub.data.training.source_digests) and says the file changed."""
    import hashlib

    from thub.checkpoint.card import data_files, render
    from thub.data.training import source_digests

    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    trained = hashlib.sha256(data.read_bytes()).hexdigest()
    keys, plain = source_digests({"data_path": str(data)})
    assert plain == {str(data): trained}
    record = {"data": {"files": keys, "sha256": plain, "rows": 1}}
    assert data_files(record, {})[0] == {"path": str(data), "rows": 1, "sha256": trained, "exists": True}
    data.write_text('{"messages": [{"role": "user", "content": "edited"}]}\n' * 3)
    [entry] = data_files(record, {})
    assert entry["sha256"] == trained and entry["changed"] is True and entry["rows"] is None, entry
    assert entry["sha256_now"] == hashlib.sha256(data.read_bytes()).hexdigest()
    card = render({"data": [entry], "parameters": []})
    assert f"{trained} (as trained; the file has changed since)" in card
    # a record of an older thub (no data.sha256): the content key still tells the file changed
    [older] = data_files({"data": {"files": keys}}, {})
    assert older["changed"] is True and older["sha256"] is None, older
    data.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    assert data_files({"data": {"files": keys}}, {})[0]["sha256"] == trained
    data.unlink()
    [gone] = data_files(record, {})
    assert gone == {"path": str(data), "rows": None, "sha256": trained, "exists": False}
