"""``thub checkpoint push`` (issue 29 items 1, 2, 5) on a real trl CPU run of the tiny model (2 steps, a checkpoint,
``--export``): pushes to a folder (file://), to a real S3-compatible server on 127.0.0.1 (moto's server mode, read
back with boto3 and s3fs) and to MLflow's own model registry on a SQLite store create the model with its card; the
card's data hashes are the files' sha256; ``--dry-run`` lists exactly the files pushed; no optimizer, scheduler, RNG
or trainer state is sent; a folder verify has not passed is refused (exit 2) unless ``--force``; a secret-looking
file is left out and named, its value never shown; result.json gets the ``push`` entry. The Hub cannot be reached:
tests/test_checkpoint_push_hf.py tests the calls up to huggingface_hub's own objects."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("safetensors", "huggingface_hub", "fsspec"),
              pytest.mark.needs_backend("trl")]

TRAINING_STATE = {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin"}


def _environ(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "AWS_", "MLFLOW_"))}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-push-tests-{os.getpid()}")
    return {**environ, **extra}


def thub(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=_environ(**extra), timeout=900)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def trained(tiny_model: Path, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished sft run (checkpoint-2 with its optimizer state, final/) and its verified export."""
    root = tmp_path_factory.mktemp("push")
    done = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(root / "run"), "--max-steps", "2",
                "--save-steps", "2", "--learning-rate", "5e-2", "--export", str(root / "hf"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "run" / "checkpoints" / "checkpoint-2" / "optimizer.pt").is_file()
    return root / "run", root / "hf"


def _plan(folder: Path, to: str, *extra: str, **environ: str) -> dict:
    done = thub("checkpoint", "push", str(folder), "--to", to, "--dry-run", "--json", *extra, **environ)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _listed(plan: dict) -> set[str]:
    return {f["path"] for f in plan["files"]} | set(plan["generated"])


def _check_card(card: str, run: Path) -> None:
    """The card names the data file with its rows and the sha256 of its bytes, every parameter with its source."""
    record = json.loads((run / "thub_run.json").read_text())
    data_file = Path(record["parameters"]["data_path"]["value"])
    rows = sum(1 for line in data_file.read_text().splitlines() if line.strip())
    assert f"| {data_file} | {rows} | {_sha256(data_file)} |" in card
    for name, entry in record["parameters"].items():
        assert f"| {name} | " in card and str(entry["source"]) in card, name
    assert "base_model" not in card.split("---")[1]  # a local path is no Hub id: not in the front matter
    assert "library_name: transformers" in card and "- sft" in card and "- trl" in card
    assert "## Verification" in card and "| finite | ok |" in card
    assert "### Loss curve" in card and "| step | loss |" in card


def test_file_push_of_an_export_sends_what_the_dry_run_lists_with_the_card(trained: tuple[Path, Path],
                                                                          tmp_path: Path) -> None:
    run, hf = trained
    target = tmp_path / "published"
    plan = _plan(hf, target.as_uri(), "--run", str(run))
    assert plan["verify"]["by"].startswith("recorded by thub train --export") and plan["verify"]["ok"] is True
    assert not target.exists(), "a dry run wrote the target"
    done = thub("checkpoint", "push", str(hf), "--to", target.as_uri(), "--run", str(run), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    pushed = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    generated = {"README.md", "thub_loss.png", "thub_manifest.json"}
    assert pushed == _listed(plan) == {f["path"] for f in plan["files"]} | generated
    for entry in plan["files"]:
        assert _sha256(target / entry["path"]) == _sha256(hf / entry["path"])
    card = (target / "README.md").read_text()
    assert card == plan["card"]
    _check_card(card, run)
    assert (target / "thub_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((run / "result.json").read_text())
    [entry] = result["push"]
    assert entry["to"] == target.as_uri() and entry["verified"] is True and entry["kind"] == "file"
    assert set(entry["files"]) == pushed
    again = thub("checkpoint", "push", str(hf), "--to", target.as_uri(), "--run", str(run))
    assert again.returncode == 2 and "already holds files" in again.stderr, again.stderr


def test_a_checkpoint_is_verified_and_pushed_without_its_training_state(trained: tuple[Path, Path],
                                                                         tmp_path: Path) -> None:
    run, _ = trained
    checkpoint = run / "checkpoints" / "checkpoint-2"
    plan = _plan(checkpoint, (tmp_path / "out").as_uri())
    assert plan["run_dir"] == str(run)  # found above the checkpoint
    assert {s["path"] for s in plan["skipped"]} >= TRAINING_STATE
    assert not TRAINING_STATE & _listed(plan)
    done = thub("checkpoint", "push", str(checkpoint), "--to", (tmp_path / "out").as_uri())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify: thub checkpoint verify: passed" in done.stdout
    assert "left out optimizer.pt: training state" in done.stdout
    pushed = {p.name for p in (tmp_path / "out").iterdir()}
    assert pushed == _listed(plan) and not pushed & TRAINING_STATE


def test_a_folder_that_fails_verify_is_refused_unless_forced(trained: tuple[Path, Path], tmp_path: Path) -> None:
    run, hf = trained
    broken = tmp_path / "broken"
    # without its thub_manifest.json (a folder put together by hand): verify is what refuses it
    shutil.copytree(hf, broken, ignore=shutil.ignore_patterns("thub_manifest.json"))
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # cut short: the complete check fails
    target = tmp_path / "out"
    done = thub("checkpoint", "push", str(broken), "--to", target.as_uri(), "--run", str(run))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has not passed thub checkpoint verify" in done.stderr and "check complete failed" in done.stderr
    assert "Traceback" not in done.stderr and not target.exists()
    forced = thub("checkpoint", "push", str(broken), "--to", target.as_uri(), "--run", str(run), "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "NOT passed (pushed with --force)" in (target / "README.md").read_text()


def test_secret_looking_files_are_left_out_and_named(trained: tuple[Path, Path], tmp_path: Path) -> None:
    run, hf = trained
    folder = tmp_path / "model"
    # a folder put together by hand (no thub_manifest.json: thub did not write it): the secret filter decides
    shutil.copytree(hf, folder, ignore=shutil.ignore_patterns("thub_manifest.json"))
    token = "hf_" + "aB3" * 12
    (folder / ".env").write_text("SOMETHING=1\n")
    (folder / "notes.txt").write_text(f"pushed by the team\nuse {token} to read it\n")
    (folder / "deploy.yaml").write_text("replicas: 2\napi_key: k3y9ZZ81abcdef\n")
    (folder / "endpoint.txt").write_text("https://alice:s3cr3tpw@models.example.com/v1\n")
    (folder / "leaked.json").write_text(json.dumps({"note": "the run's secret", "value": "value-of-my-secret-var"}))
    (folder / "about.txt").write_text("a tiny model: pad_token <pad>, max_tokens 128\n")  # not a secret
    (folder / "docs").mkdir()
    (folder / "docs" / "usage.md").write_text("Load it with AutoModelForCausalLM.\n")  # a subfolder is sent
    (folder / ".cache" / "huggingface").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / "upload.lock").write_text("tool state")  # a hidden folder is not
    plan = _plan(folder, (tmp_path / "out").as_uri(), "--run", str(run), MY_SERVICE_TOKEN="value-of-my-secret-var")
    skipped = {s["path"]: s["why"] for s in plan["skipped"]}
    assert skipped[".env"].startswith("looks like a secret: a credentials file")
    assert "access token" in skipped["notes.txt"] and "api_key" in skipped["deploy.yaml"]
    assert "URI credentials" in skipped["endpoint.txt"]
    assert "secret environment variable" in skipped["leaked.json"]
    assert {"about.txt", "docs/usage.md"} <= _listed(plan) and not [p for p in _listed(plan) if ".cache" in p]
    done = thub("checkpoint", "push", str(folder), "--to", (tmp_path / "out").as_uri(), "--run", str(run),
                MY_SERVICE_TOKEN="value-of-my-secret-var")
    assert done.returncode == 0, done.stdout + done.stderr
    for secret in (token, "k3y9ZZ81abcdef", "s3cr3tpw", "value-of-my-secret-var"):
        assert secret not in done.stdout + done.stderr
    assert "left out notes.txt: looks like a secret" in done.stdout
    out = tmp_path / "out"
    pushed = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert pushed == _listed(plan) and not pushed & set(skipped)


# --- S3: moto's server on 127.0.0.1 ----------------------------------------------------------------

def test_s3_push_to_a_real_s3_server(trained: tuple[Path, Path], s3_server: Any) -> None:
    import boto3
    import s3fs

    run, hf = trained
    plan = _plan(hf, "s3://models/tiny/v1", "--run", str(run), **s3_server.environ)
    done = thub("checkpoint", "push", str(hf), "--to", "s3://models/tiny/v1", "--run", str(run), **s3_server.environ)
    assert done.returncode == 0, done.stdout + done.stderr
    client = boto3.client("s3", endpoint_url=s3_server.environ["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="y")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="models", Prefix="tiny/v1/")["Contents"]}
    assert keys == {f"tiny/v1/{name}" for name in _listed(plan)}
    assert not {k.rsplit("/", 1)[-1] for k in keys} & TRAINING_STATE
    fs = s3fs.S3FileSystem(endpoint_url=s3_server.environ["AWS_ENDPOINT_URL"], key="x", secret="y")
    assert hashlib.sha256(fs.cat_file("models/tiny/v1/model.safetensors")).hexdigest() == \
        _sha256(hf / "model.safetensors")
    card = fs.cat_file("models/tiny/v1/README.md").decode()
    assert card == plan["card"]
    _check_card(card, run)
    assert "test-secret-access-key" not in done.stdout + done.stderr + card


# --- MLflow's model registry on SQLite -------------------------------------------------------------

@pytest.mark.needs_module("mlflow", "sqlalchemy", "alembic")
def test_mlflow_push_creates_a_model_version_with_the_card(trained: tuple[Path, Path], mlflow_store: str,
                                                           tmp_path: Path) -> None:
    from mlflow import MlflowClient
    from mlflow.artifacts import download_artifacts

    run, hf = trained
    to = f"mlflow://tiny-sft?tracking_uri={mlflow_store}"
    plan = _plan(hf, to, "--run", str(run))
    done = thub("checkpoint", "push", str(hf), "--to", to, "--run", str(run), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    pushed = json.loads(done.stdout)
    client = MlflowClient(tracking_uri=mlflow_store, registry_uri=mlflow_store)
    version = client.get_model_version("tiny-sft", pushed["revision"])
    assert version.run_id == pushed["mlflow_run_id"]
    record = json.loads((run / "thub_run.json").read_text())
    params = client.get_run(version.run_id).data.params
    assert params["thub.learning_rate"] == str(record["parameters"]["learning_rate"]["value"])
    assert params["thub.max_steps"] == "2" and params["thub.algorithm"] == "sft" and params["thub.backend"] == "trl"
    logged = {f"thub.{name}" for name, entry in record["parameters"].items() if entry["value"] is not None}
    assert set(params) == {"thub.algorithm", "thub.backend"} | logged
    local = Path(download_artifacts(artifact_uri=version.source, dst_path=str(tmp_path / "got")))
    assert {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()} == _listed(plan)
    card = (local / "README.md").read_text()
    assert card == plan["card"]
    _check_card(card, run)
    again = thub("checkpoint", "push", str(hf), "--to", to, "--run", str(run), "--json")
    assert again.returncode == 0, again.stderr
    assert int(json.loads(again.stdout)["revision"]) == int(pushed["revision"]) + 1  # a new version
    entries = json.loads((run / "result.json").read_text())["push"]
    assert [e["revision"] for e in entries if e["kind"] == "mlflow"][-2:] == [pushed["revision"],
                                                                              str(int(pushed["revision"]) + 1)]


# --- the Hub: huggingface_hub's own objects, patched at HfApi's network calls ----------------------

@pytest.fixture
def hub_calls(monkeypatch: pytest.MonkeyPatch) -> dict:
    """HfApi's network methods replaced by recorders (the Hub cannot be reached here); everything up to
    them (HfApi, CommitOperationAdd with its local sha256, CommitInfo) is huggingface_hub's own."""
    from types import SimpleNamespace

    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import CommitInfo, RepoUrl

    state: dict = {"calls": [], "existing_private": None}

    def create_repo(self, repo_id, **kwargs):  # type: ignore[no-untyped-def]
        state["calls"].append(("create_repo", repo_id, kwargs))
        if state["existing_private"] is None:
            state["existing_private"] = kwargs["private"]
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def repo_info(self, repo_id, **kwargs):  # type: ignore[no-untyped-def]
        state["calls"].append(("repo_info", repo_id, kwargs))
        return SimpleNamespace(private=state["existing_private"])

    def create_branch(self, repo_id, **kwargs):  # type: ignore[no-untyped-def]
        state["calls"].append(("create_branch", repo_id, kwargs))

    def create_commit(self, repo_id, operations, **kwargs):  # type: ignore[no-untyped-def]
        state["calls"].append(("create_commit", repo_id, {**kwargs, "operations": list(operations)}))
        return CommitInfo(commit_url=f"https://huggingface.co/{repo_id}/commit/{'a' * 40}", commit_message="m",
                          commit_description="", oid="a" * 40)

    def upload_folder(self, *, repo_id, folder_path, **kwargs):  # type: ignore[no-untyped-def]
        root = Path(folder_path)  # what it would send, read while the folder exists (by path, as it reads it)
        sent = {p.relative_to(root).as_posix(): _sha256(p) for p in root.rglob("*") if p.is_file()}
        state["calls"].append(("upload_folder", repo_id, {**kwargs, "sent": sent,
                                                          "card": (root / "README.md").read_text()}))
        return CommitInfo(commit_url=f"https://huggingface.co/{repo_id}/commit/{'b' * 40}", commit_message="m",
                          commit_description="", oid="b" * 40)

    for name, function in {"create_repo": create_repo, "repo_info": repo_info, "create_branch": create_branch,
                           "create_commit": create_commit, "upload_folder": upload_folder}.items():
        monkeypatch.setattr(HfApi, name, function)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "Zq7" * 12)  # a secret in the environment: never uploaded or shown
    return state


def _push_in_process(*args: str) -> dict:
    from click.testing import CliRunner

    from thub.cli.checkpoint import checkpoint

    done = CliRunner().invoke(checkpoint, ["push", *args, "--json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def test_hf_push_is_private_by_default_with_the_listed_files_and_the_card(trained: tuple[Path, Path],
                                                                          hub_calls: dict) -> None:
    from huggingface_hub import CommitOperationAdd

    run, hf = trained
    plan = _plan(hf, "hf://my-org/tiny-sft@v1", "--run", str(run))
    assert plan["private"] is True and plan["target"] == "my-org/tiny-sft" and plan["revision"] == "v1"
    pushed = _push_in_process(str(hf), "--to", "hf://my-org/tiny-sft@v1", "--run", str(run))
    names = [call[0] for call in hub_calls["calls"]]
    assert names == ["create_repo", "repo_info", "create_branch", "create_commit"]
    _, repo, created = hub_calls["calls"][0]
    assert repo == "my-org/tiny-sft" and created["private"] is True and created["exist_ok"] is True
    assert hub_calls["calls"][2][2]["branch"] == "v1"
    commit = hub_calls["calls"][3][2]
    assert commit["revision"] == "v1" and commit["repo_type"] == "model"
    operations = commit["operations"]
    assert all(isinstance(op, CommitOperationAdd) for op in operations)
    by_path = {op.path_in_repo: op for op in operations}
    assert set(by_path) == _listed(plan)
    for entry in plan["files"]:  # huggingface_hub's own sha256 of what it would upload
        assert by_path[entry["path"]].upload_info.sha256.hex() == _sha256(hf / entry["path"])
    card = by_path["README.md"].path_or_fileobj
    assert isinstance(card, bytes) and card.decode() == plan["card"]
    assert pushed["revision"] == "a" * 40 and pushed["private"] is True and pushed["upload"] == "create_commit"
    assert os.environ["HF_TOKEN"] not in json.dumps(pushed)


def test_a_large_folder_goes_through_upload_folder_with_the_same_files(trained: tuple[Path, Path], hub_calls: dict,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_builtins import storage_hf as engine  # the hf scheme's push (issue 36: a built-in plugin's)

    run, hf = trained
    monkeypatch.setattr(engine, "LARGE_FOLDER_FILES", 2)  # the tiny model stands in for a large one
    plan = _plan(hf, "hf://my-org/big@main", "--run", str(run))
    pushed = _push_in_process(str(hf), "--to", "hf://my-org/big@main", "--run", str(run))
    names = [call[0] for call in hub_calls["calls"]]
    assert names == ["create_repo", "repo_info", "create_branch", "upload_folder"]
    assert hub_calls["calls"][0][2]["private"] is True
    upload = hub_calls["calls"][-1][2]
    assert upload["revision"] == "main" and upload["repo_type"] == "model"
    assert set(upload["sent"]) == _listed(plan)
    assert all(upload["sent"][f["path"]] == _sha256(hf / f["path"]) for f in plan["files"])
    assert upload["card"] == plan["card"] and pushed["upload"] == "upload_folder" and pushed["revision"] == "b" * 40
    assert not [p for p in hf.iterdir() if p.name in ("README.md", "thub_loss.png")], "DIR was written into"


def test_hf_push_public_only_when_asked_and_never_into_a_public_repo_silently(trained: tuple[Path, Path],
                                                                              hub_calls: dict) -> None:
    from click.testing import CliRunner

    from thub.cli.checkpoint import checkpoint

    run, hf = trained
    _push_in_process(str(hf), "--to", "hf://my-org/open-model", "--run", str(run), "--public")
    assert hub_calls["calls"][0][2]["private"] is False
    assert "create_branch" not in [call[0] for call in hub_calls["calls"]]
    assert hub_calls["calls"][-1][2]["revision"] is None
    hub_calls["calls"].clear()  # the repo now exists and is public: a push without --public is refused
    refused = CliRunner().invoke(checkpoint, ["push", str(hf), "--to", "hf://my-org/open-model", "--run", str(run)])
    assert refused.exit_code == 2 and "exists and is public" in refused.output, refused.output
    assert "create_commit" not in [call[0] for call in hub_calls["calls"]]


# --- the pushed event and the documented registration hook ----------------------------------------

def _documented_hook(tmp_path: Path) -> object:
    import importlib.util
    import re

    docs = (Path(__file__).parents[1] / "docs" / "checkpoints.md").read_text()
    code = re.search(r"<!-- registration-hook-example -->\n```python\n(.*?)```", docs, re.S)
    assert code, "docs/checkpoints.md lost its registration hook example"
    module_file = tmp_path / "register_pushed.py"
    module_file.write_text(code.group(1))
    spec = importlib.util.spec_from_file_location("register_pushed", module_file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_documented_hook_registers_the_pushed_model_from_the_event(trained: tuple[Path, Path], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from thub import hookimpl
    from thub.manager import load_registry, set_registry

    run, hf = trained
    seen: list = []

    class Recorder:
        @hookimpl
        def thub_on_event(self, event):  # type: ignore[no-untyped-def]
            seen.append(event)

    database = tmp_path / "models.db"
    monkeypatch.setenv("MODEL_REGISTRY_DB", str(database))
    set_registry(load_registry(extra_plugins=[("register_pushed", _documented_hook(tmp_path)),
                                              ("recorder", Recorder())]))
    try:
        target = (tmp_path / "published").as_uri()
        pushed = _push_in_process(str(hf), "--to", target, "--run", str(run))
    finally:
        set_registry(None)
    [event] = seen
    assert event.kind == "pushed" and event.run_dir == str(run) and (event.algorithm, event.backend) == ("sft", "trl")
    assert event.data["to"] == target and event.data["card"] == (tmp_path / "published" / "README.md").read_text()
    with sqlite3.connect(database) as db:
        db.row_factory = sqlite3.Row
        [row] = db.execute("SELECT * FROM models").fetchall()
    assert row["uri"] == target and row["revision"] is None and row["algorithm"] == "sft"
    record = json.loads((run / "thub_run.json").read_text())
    data_file = Path(record["parameters"]["data_path"]["value"])
    assert json.loads(row["data_sha256"]) == {str(data_file): _sha256(data_file)}
    assert row["base_model"] == record["parameters"]["model_path"]["value"] and row["verified"] == 1
    assert row["final_loss"] == json.loads((run / "result.json").read_text())["last_metrics"]["loss"]
    assert row["card"] == event.data["card"] and pushed["files"] == event.data["files"]
