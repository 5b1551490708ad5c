"""``thub checkpoint push`` on bad input (issue 29): a target of no known shape, ``--public`` where there is no
visibility, a folder that is no model, ``gs://`` without gcsfs, MLflow without a tracking URI: each a clear error,
exit 2, no traceback, nothing sent. The secret check leaves a real tokenizer's files alone (``pad_token`` is a
secret-looking name, ``<pad>`` no secret value). No training here (tests/test_checkpoint_push.py trains)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def thub(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "MLFLOW_"))}
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-push-input-tests-{os.getpid()}")
    return subprocess.run([sys.executable, "-m", "thub", "checkpoint", "push", *args], capture_output=True,
                          text=True, env={**environ, **extra}, timeout=300)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


@pytest.mark.parametrize(("to", "said"), [
    ("ftp://host/x", "expected hf://ORG/NAME[@BRANCH]"),
    ("models/tiny", "expected hf://ORG/NAME[@BRANCH]"),
    ("hf://a/b/c", "is not a Hub repo id"),
    ("hf://org/name@", "no branch after @"),
    ("mlflow://?tracking_uri=sqlite:///x.db", "no model name"),
    ("mlflow://m?colour=red", "unknown option 'colour'"),
    ("file://relative/path", "absolute path"),
    ("s3://", "expected hf://"),
])
def test_a_target_of_no_known_shape_is_refused(folder: Path, to: str, said: str) -> None:
    done = thub(str(folder), "--to", to, "--force")
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


def test_public_only_for_the_hub_and_a_missing_folder(folder: Path, tmp_path: Path) -> None:
    done = thub(str(folder), "--to", (tmp_path / "out").as_uri(), "--public", "--force")
    assert done.returncode == 2 and "only an hf:// target has a visibility" in done.stderr, done.stderr
    missing = thub(str(tmp_path / "nowhere"), "--to", (tmp_path / "out").as_uri())
    assert missing.returncode == 2 and "no such folder" in missing.stderr, missing.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_no_model_is_refused_without_force(folder: Path, tmp_path: Path) -> None:
    done = thub(str(folder), "--to", (tmp_path / "out").as_uri())
    assert done.returncode == 2, done.stdout + done.stderr
    assert "has not passed thub checkpoint verify" in done.stderr
    assert "not a checkpoint of a known layout" in done.stderr
    assert not (tmp_path / "out").exists()


def test_gs_without_gcsfs_names_the_install(folder: Path) -> None:
    from importlib.util import find_spec

    if find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    done = thub(str(folder), "--to", "gs://bucket/model", "--force")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gs:// needs gcsfs" in done.stderr and "python -m pip install gcsfs" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.needs_module("mlflow")
def test_mlflow_without_a_tracking_uri_is_refused(folder: Path, tmp_path: Path) -> None:
    done = thub(str(folder), "--to", "mlflow://tiny", "--force", HOME=str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no MLflow tracking URI" in done.stderr and "MLFLOW_TRACKING_URI" in done.stderr
    assert not list(tmp_path.rglob("mlruns")) and not Path("mlruns").exists()


def test_a_real_tokenizer_is_no_secret_and_a_token_in_a_config_is(tiny_model: Path, tmp_path: Path) -> None:
    from thub.checkpoint.push import collect, secret_finding

    send, skipped = collect(tiny_model)
    assert "tokenizer_config.json" in send and "tokenizer.json" in send and "model.safetensors" in send
    assert not [s for s in skipped if "secret" in s["why"]], skipped
    config = tmp_path / "adapter_config.json"
    config.write_text('{"pad_token": "<pad>", "eos_token": "<|im_end|>", "max_tokens": 1024}')
    assert secret_finding(config, []) is None
    config.write_text('{"pad_token": "<pad>",\n "hub_token": "abcdef123456xyz"}')
    assert secret_finding(config, []) == "line 2 holds a value named hub_token"
    vocabulary = tmp_path / "vocab.json"  # any string can be a token: only secret values count there
    vocabulary.write_text('{"?token=": 5,\n "https://a@": 6,\n "api_key=abc123def": 7}')
    assert secret_finding(vocabulary, []) is None
    vocabulary.write_text('{"hf_' + "x1" * 20 + '": 5}')
    assert secret_finding(vocabulary, []) == "line 1 holds an access token"
