"""``thub checkpoint push`` at the trust boundary (issue 35 items 2 and 11), with hostile folders built here:

- symbolic links to a file and to a folder outside DIR (absolute, relative, from a subfolder, dangling) are never
  followed by any transport (file://, a real S3 server, the Hub's create_commit and upload_folder, MLflow's SQLite
  registry): each is named in ``skipped`` with why; a link that stays inside DIR is sent as the file it points to;
- secrets are found by content, not only by name: PEM/OpenSSH private keys (a ``deploy_key`` with no suffix, a key
  in the middle of a long notes file, one in a file that is not UTF-8), GCP service-account JSON, AWS key ids and
  assigned secret keys, Hugging Face and GitHub tokens; the value is never shown;
- written folders get the usual modes (directories 0777, files 0666, less the umask: not merge's 0700), and a
  file:// push keeps a file private that was private at the source;
- an mlflow:// push on a local SQLite store writes its artifacts beside the store, never into the current folder.

No training here: the model folders are a few files (pushed with ``--force``: they are no model verify can load);
merge runs PEFT on the tiny model."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: the content of the file outside DIR that the links point at: no byte of it may be sent anywhere
OUTSIDE = "root:$6$the-outside-secret-line$4f9c2a:19000:0:99999:7:::"


def thub(*args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "AWS_", "MLFLOW_"))}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-trust-push-tests-{os.getpid()}")
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, cwd=cwd,
                          env={**environ, **extra}, timeout=600)


def _hostile(tmp_path: Path) -> Path:
    """A model folder whose links point outside it (to a file, a folder, nowhere) and inside it."""
    outside = tmp_path / "outside"
    (outside / "private").mkdir(parents=True)
    (outside / "shadow").write_text(OUTSIDE + "\n")
    (outside / "private" / "diary.txt").write_text(OUTSIDE + "\n")
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 8}\n')
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    (folder / "sub" / "usage.md").write_text("Load it with AutoModelForCausalLM.\n")
    (folder / "notes.txt").symlink_to(outside / "shadow")  # absolute
    (folder / "relative.txt").symlink_to(Path("..") / "outside" / "shadow")  # relative
    (folder / "sub" / "up.txt").symlink_to(Path("..") / ".." / "outside" / "shadow")  # from a subfolder
    (folder / "extra").symlink_to(outside / "private", target_is_directory=True)  # a folder outside
    (folder / "dangling.txt").symlink_to(tmp_path / "nowhere")
    (folder / "alias.json").symlink_to("config.json")  # stays inside: sent as the file it points to
    return folder


SENT = {"config.json", "model.safetensors", "sub/usage.md", "alias.json"}
LEFT_OUT = {"notes.txt", "relative.txt", "sub/up.txt", "extra", "dangling.txt"}


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- links ----------------------------------------------------------------------------------------

def test_collect_never_follows_a_link_out_of_the_folder_and_names_each(tmp_path: Path) -> None:
    from thub.checkpoint.push import collect

    folder = _hostile(tmp_path)
    send, skipped = collect(folder)
    assert set(send) == SENT
    why = {s["path"]: s["why"] for s in skipped}
    assert set(why) == LEFT_OUT
    for path in ("notes.txt", "relative.txt", "sub/up.txt"):
        assert "link to a file outside" in why[path] and "not followed" in why[path], why[path]
    assert "link to a folder outside" in why["extra"] and "not followed" in why["extra"]
    assert "broken symbolic link" in why["dangling.txt"]
    assert not [p for p in send if p.startswith("extra/")]


def test_file_push_sends_no_byte_from_outside(tmp_path: Path) -> None:
    from thub.checkpoint import push as engine

    folder = _hostile(tmp_path)
    target = tmp_path / "published"
    plan = engine.plan_push(str(folder), target.as_uri(), force=True)
    assert {f["path"] for f in plan["files"]} == SENT
    engine.push(plan)
    pushed = _tree(target)
    assert set(pushed) == SENT | {"README.md", "thub_manifest.json"}
    assert not [name for name, data in pushed.items() if OUTSIDE.encode() in data]
    assert pushed["alias.json"] == (folder / "config.json").read_bytes()
    assert not [p for p in target.rglob("*") if p.is_symlink()]


def test_a_link_swapped_after_the_check_is_not_followed(tmp_path: Path) -> None:
    from thub.checkpoint import push as engine
    from thub.errors import ThubError

    folder = _hostile(tmp_path)
    target = tmp_path / "published"
    plan = engine.plan_push(str(folder), target.as_uri(), force=True)
    (folder / "alias.json").unlink()  # checked as a link inside DIR; now it points outside
    (folder / "alias.json").symlink_to(tmp_path / "outside" / "shadow")
    with pytest.raises(ThubError, match=r"alias\.json: changed since it was checked: it now resolves to .*, outside"):
        engine.push(plan)
    assert not [name for name, data in _tree(target).items() if OUTSIDE.encode() in data]


def test_s3_push_sends_no_byte_from_outside(tmp_path: Path, s3_server: Any) -> None:
    folder = _hostile(tmp_path)
    done = thub("checkpoint", "push", str(folder), "--to", "s3://models/hostile", "--force", "--json",
                **s3_server.environ)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {s["path"] for s in json.loads(done.stdout)["skipped"]} == LEFT_OUT
    client = s3_server.client()
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="models", Prefix="hostile/")["Contents"]}
    assert keys == {f"hostile/{name}" for name in SENT | {"README.md", "thub_manifest.json"}}
    for key in keys:
        assert OUTSIDE.encode() not in client.get_object(Bucket="models", Key=key)["Body"].read(), key


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, bytes]]:
    """HfApi's network calls replaced by recorders of the bytes they would send (the Hub cannot be reached here);
    CommitOperationAdd and everything before it are huggingface_hub's own."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import CommitInfo, RepoUrl

    sent: dict[str, dict[str, bytes]] = {}

    def info(oid: str) -> CommitInfo:
        return CommitInfo(commit_url=f"https://huggingface.co/o/n/commit/{oid}", commit_message="m",
                          commit_description="", oid=oid)

    def create_commit(self: Any, repo_id: str, operations: Any, **kwargs: Any) -> CommitInfo:
        sent["create_commit"] = {op.path_in_repo: op.path_or_fileobj if isinstance(op.path_or_fileobj, bytes)
                                 else Path(op.path_or_fileobj).read_bytes() for op in operations}
        return info("a" * 40)

    def upload_folder(self: Any, *, folder_path: str, **kwargs: Any) -> CommitInfo:
        sent["upload_folder"] = _tree(Path(folder_path))  # read by path, as huggingface_hub reads it
        return info("b" * 40)

    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: RepoUrl(f"https://huggingface.co/{repo_id}"))
    monkeypatch.setattr(HfApi, "repo_info", lambda self, repo_id, **kw: type("Info", (), {"private": True})())
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    return sent


@pytest.mark.parametrize("large", [False, True], ids=["create_commit", "upload_folder"])
def test_hub_push_sends_no_byte_from_outside(tmp_path: Path, hub: dict[str, dict[str, bytes]], large: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from thub.checkpoint import push as engine
    from thub_builtins import storage_hf  # the hf scheme's push (issue 36: a built-in plugin's)

    if large:
        monkeypatch.setattr(storage_hf, "LARGE_FOLDER_FILES", 1)
    folder = _hostile(tmp_path)
    engine.push(engine.plan_push(str(folder), "hf://my-org/hostile", force=True))
    [(how, sent)] = hub.items()
    assert how == ("upload_folder" if large else "create_commit")
    assert set(sent) == SENT | {"README.md", "thub_manifest.json"}
    assert not [name for name, data in sent.items() if OUTSIDE.encode() in data]


@pytest.mark.needs_module("mlflow", "sqlalchemy", "alembic")
def test_mlflow_push_sends_no_byte_from_outside(tmp_path: Path) -> None:
    from mlflow import MlflowClient
    from mlflow.artifacts import download_artifacts

    folder = _hostile(tmp_path)
    store = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    done = thub("checkpoint", "push", str(folder), "--to", f"mlflow://hostile?tracking_uri={store}", "--force",
                "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    version = MlflowClient(tracking_uri=store, registry_uri=store).get_model_version(
        "hostile", json.loads(done.stdout)["revision"])
    got = Path(download_artifacts(artifact_uri=version.source, dst_path=str(tmp_path / "got")))
    pushed = _tree(got)
    assert set(pushed) == SENT | {"README.md", "thub_manifest.json"}
    assert not [name for name, data in pushed.items() if OUTSIDE.encode() in data]


# --- secrets by content ---------------------------------------------------------------------------

_BODY = ("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
         "QyNTUxOQAAACBq3X9vJqLk0xY2Vn8pQ7sVvA1Tn0l6yQmZx4kRr2wDnwAAAJjx8v1S8fL9\n")
OPENSSH = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{_BODY}-----END OPENSSH PRIVATE KEY-----\n"
RSA = (f"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq3X9vJqLk0xY2Vn8pQ7sVvA1Tn0l\n{_BODY}"
       "-----END RSA PRIVATE KEY-----\n")
PKCS8 = f"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw\n{_BODY}-----END PRIVATE KEY-----\n"
PROSE = "".join(f"Epoch {i}: the loss went down and the evaluation looked fine.\n" for i in range(300))
GCP = json.dumps({"type": "service_account", "project_id": "my-project",
                  "private_key": PKCS8, "client_email": "trainer@my-project.iam.gserviceaccount.com",
                  "token_uri": "https://oauth2.googleapis.com/token"}, indent=2)
#: (file name, content, what the reason says, the secret part that must never be shown)
SECRETS = [
    ("deploy_key", OPENSSH, "private key", _BODY.split("\n")[0]),
    ("NOTES.md", PROSE[:4000] + RSA + PROSE[4000:], "private key", "MIIEowIBAAKCAQEAq3X9vJqLk0xY2Vn8pQ7sVvA1Tn0l"),
    ("server.txt", "tls:\n" + PKCS8, "private key", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw"),
    ("ec.txt", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBb\n-----END EC PRIVATE KEY-----\n", "private key",
     "MHcCAQEEIBb"),
    ("sa.json", GCP, "private key", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw"),
    ("aws_note.txt", "temporary key ASIAY34FZKBOKMUTVV7A for eu-west-1\n", "access token", "ASIAY34FZKBOKMUTVV7A"),
    ("aws.cfg", "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "value named",
     "wJalrXUtnFEMI"),
    ("gh.txt", "clone with github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW012\n",
     "access token", "github_pat_11ABCDEFG"),
    ("gho.txt", "oauth gho_" + "Ab1" * 12 + "\n", "access token", "gho_Ab1"),
    ("hub.txt", "token hf_" + "Qw3" * 12 + "\n", "access token", "hf_Qw3"),
    ("latin1.txt", "caf\xe9 notes\n" + OPENSSH, "private key", _BODY.split("\n")[0]),
]


@pytest.mark.parametrize(("name", "content", "said", "value"), SECRETS, ids=[s[0] for s in SECRETS])
def test_a_secret_is_found_by_content_and_never_shown(tmp_path: Path, name: str, content: str, said: str,
                                                      value: str) -> None:
    from thub.checkpoint.push import collect, secret_finding

    path = tmp_path / name
    path.write_bytes(content.encode("latin-1" if name == "latin1.txt" else "utf-8"))
    found = secret_finding(path, [])
    assert found is not None and said in found, found
    assert value not in found
    send, skipped = collect(tmp_path)
    assert name not in send and [s["path"] for s in skipped] == [name]


def test_no_secret_in_public_keys_certificates_and_prose(tmp_path: Path) -> None:
    from thub.checkpoint.push import secret_finding

    for name, content in [
        ("id_ed25519.pub", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3X9vJqLk0xY2Vn8pQ7sVvA1Tn0l6yQmZx4kRr2 me@host\n"),
        ("public.txt", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"),
        ("chain.txt", "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkq\n-----END CERTIFICATE-----\n"),
        ("README.txt", PROSE + "Keys: see the PRIVATE KEY section of the handbook; AKIA is the prefix of a key id.\n"),
    ]:
        (tmp_path / name).write_text(content)
        assert secret_finding(tmp_path / name, []) is None, name


def test_a_dry_run_names_a_hidden_key_without_showing_it(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "deploy_key").write_text(OPENSSH)
    done = thub("checkpoint", "push", str(folder), "--to", (tmp_path / "out").as_uri(), "--dry-run", "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left out deploy_key: looks like a secret: line 1 holds a private key" in done.stdout, done.stdout
    assert "send deploy_key" not in done.stdout
    assert _BODY.split("\n")[0] not in done.stdout + done.stderr


# --- modes ----------------------------------------------------------------------------------------

@pytest.fixture(params=[0o022, 0o027], ids=["umask022", "umask027"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _assert_usual_modes(root: Path, umask: int, private: frozenset[str] = frozenset()) -> None:
    """Every folder 0777 and every file 0666 less the umask (files named in ``private`` owner-only)."""
    assert _mode(root) == 0o777 & ~umask, oct(_mode(root))
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        expected = 0o777 & ~umask if path.is_dir() else (0o600 if rel in private else 0o666 & ~umask)
        assert _mode(path) == expected, f"{rel}: {oct(_mode(path))}, expected {oct(expected)}"


def test_file_push_writes_the_usual_modes_and_keeps_a_private_file_private(tmp_path: Path, umask: int) -> None:
    from thub.checkpoint import push as engine

    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    for name in ("config.json", "sub/usage.md", "private_notes.md"):
        (folder / name).write_text("a model file\n")
        os.chmod(folder / name, 0o644)
    os.chmod(folder / "private_notes.md", 0o600)  # its owner kept it to themselves: so does the push
    target = tmp_path / "published"
    engine.push(engine.plan_push(str(folder), target.as_uri(), force=True))
    assert set(_tree(target)) == {"config.json", "sub/usage.md", "private_notes.md", "README.md", "thub_manifest.json"}
    _assert_usual_modes(target, umask, frozenset({"private_notes.md"}))


def test_export_copy_writes_the_usual_modes(tmp_path: Path, umask: int) -> None:
    from thub.checkpoint.export import _copy

    source = tmp_path / "final"
    source.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (source / name).write_text("x")
        os.chmod(source / name, 0o600)  # as safetensors' save_file leaves its file: the export is a new folder
    _copy(source, tmp_path / "hf", None)
    _assert_usual_modes(tmp_path / "hf", umask)


@pytest.mark.needs_module("peft", "safetensors")
def test_merge_writes_the_usual_modes(tiny_model: Path, tmp_path: Path, umask: int) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from thub.checkpoint.merge import merge_adapter

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "adapter")
    merge_adapter(tmp_path / "adapter", tmp_path / "merged", str(tiny_model))
    assert _mode(tmp_path / "merged") == 0o777 & ~umask, oct(_mode(tmp_path / "merged"))
    for name in ("model.safetensors", "config.json", "thub_merge.json"):  # written here (the base's are copied)
        assert _mode(tmp_path / "merged" / name) == 0o666 & ~umask, f"{name}: {oct(_mode(tmp_path / 'merged' / name))}"


# --- MLflow: artifacts beside a local store -------------------------------------------------------

@pytest.mark.needs_module("mlflow", "sqlalchemy", "alembic")
@pytest.mark.parametrize("experiment", [None, "Default"])
def test_mlflow_push_on_a_local_store_writes_beside_the_store_not_the_current_folder(tmp_path: Path,
                                                                                      experiment: str | None) -> None:
    from mlflow import MlflowClient

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (tmp_path / "team" / "store").mkdir(parents=True)
    (tmp_path / "cwd").mkdir()
    store = f"sqlite:///{tmp_path / 'team' / 'store' / 'mlflow.db'}"
    query = f"tracking_uri={store}" + (f"&experiment={experiment}" if experiment else "")
    done = thub("checkpoint", "push", str(folder), "--to", f"mlflow://model?{query}", "--force", "--json",
                cwd=tmp_path / "cwd")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list((tmp_path / "cwd").iterdir()), "the push wrote into the current folder"
    run = MlflowClient(tracking_uri=store).get_run(json.loads(done.stdout)["mlflow_run_id"])
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(tmp_path / "team" / "store"), run.info.artifact_uri
    assert {"model/config.json", "model/README.md"} <= set(_tree(artifacts))
