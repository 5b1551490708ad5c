"""``model_path`` checked up front (issue 13, item 8): before anything is written, exit 2 with one
clear line, without importing torch — a missing path, a file, a directory without config.json,
a Hub id that is not cached while offline or while the Hub is unreachable, a Hub id the Hub does
not have, and a tokenizer without a chat template for chat data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from thub.config.model_path import cached_snapshot, check_model_path, has_chat_template
from thub.errors import UsageError

# Runs `thub train` in a fresh interpreter and reports whether torch (or transformers) got imported.
PROBE = """
import json, sys
from thub.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def _environ(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "HF_", "TRANSFORMERS_"))}
    environ.update(extra)
    return environ


def train(model: str, data: Path, out: Path, env: dict[str, str], *extra: str) -> tuple[dict[str, Any], str]:
    args = ["train", "sft", "--backend", "trl", "--model-path", model, "--data-path", str(data),
            "--ckpt-output-dir", str(out), "--max-steps", "1", *extra]
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def model_dir(path: Path, *, template: str | None = "{{ messages }}", jinja: bool = False) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}')
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if template is not None:
        config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja:
        (path / "chat_template.jinja").write_text("{{ messages }}")
    return path


@pytest.fixture
def chat(demo_data: Path) -> Path:
    return demo_data / "chat.jsonl"


def assert_refused(result: dict[str, Any], stderr: str, out: Path, message: str) -> None:
    assert result["code"] == 2, stderr
    assert message in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in stderr, stderr  # one clear line
    assert not result["torch"] and not result["transformers"]
    assert not out.exists()  # nothing written: the corrected rerun is not blocked


def test_mistyped_local_path(chat: Path, tmp_path: Path) -> None:
    for typo in (str(tmp_path / "modls" / "tiny"), "./modls/tiny", "~/no/such/model", "a/b/c"):
        result, stderr = train(typo, chat, tmp_path / "out", _environ())
        shown = os.path.expanduser(typo)  # ~ is expanded once, at validation: the error names the real path
        assert_refused(result, stderr, tmp_path / "out", f"model_path {shown!r}: no such model directory")


def test_a_file_or_a_directory_without_config(chat: Path, tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 16)
    result, stderr = train(str(weights), chat, tmp_path / "out", _environ())
    assert_refused(result, stderr, tmp_path / "out", "is a file; expected a model directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    result, stderr = train(str(empty), chat, tmp_path / "out", _environ())
    assert_refused(result, stderr, tmp_path / "out", "no config.json in this directory")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "org/base"}')
    check_model_path({"model_path": str(adapter), "data_path": str(chat)}, {})  # a PEFT adapter is loadable


def test_hub_id_offline_and_not_cached(chat: Path, tmp_path: Path) -> None:
    env = _environ(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    result, stderr = train("some-org/some-model", chat, tmp_path / "out", env)
    assert_refused(result, stderr, tmp_path / "out", "not in the local cache")
    assert "HF_HUB_OFFLINE=1" in stderr and str(tmp_path / "hf" / "hub") in stderr


def test_hub_id_with_the_hub_unreachable(chat: Path, tmp_path: Path) -> None:
    # nothing listens on port 9 of the loopback: connection refused at once
    env = _environ(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    result, stderr = train("some-org/some-model", chat, tmp_path / "out", env)
    assert_refused(result, stderr, tmp_path / "out", "the Hugging Face Hub (http://127.0.0.1:9) is unreachable")


class _Hub:
    """A stand-in Hub on 127.0.0.1 that knows one repository (HEAD of its config.json)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.startswith("/known/model/resolve/main/config.json"):
                    self.send_response(200)
                    self.send_header("ETag", '"abc"')
                    self.send_header("X-Repo-Commit", "0" * 40)
                    self.send_header("Content-Length", "2")
                else:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "RepoNotFound")
                    self.send_header("X-Error-Message", "Repository not found")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def hub() -> Iterator[_Hub]:
    server = _Hub()
    yield server
    server.httpd.shutdown()


def test_hub_id_the_hub_does_not_have(chat: Path, tmp_path: Path, hub: _Hub) -> None:
    env = _environ(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"))
    result, stderr = train("nobody/nothing", chat, tmp_path / "out", env)
    assert_refused(result, stderr, tmp_path / "out", "no such model on the Hub")
    environ = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
    check_model_path({"model_path": "known/model", "data_path": str(chat)}, environ)  # the Hub has it


def test_cached_hub_model_passes_offline(chat: Path, tmp_path: Path) -> None:
    repo = tmp_path / "hf" / "hub" / "models--org--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("c0ffee")
    model_dir(repo / "snapshots" / "c0ffee")
    environ = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    assert cached_snapshot("org/cached", environ) == repo / "snapshots" / "c0ffee"
    check_model_path({"model_path": "org/cached", "data_path": str(chat)}, environ)
    with pytest.raises(UsageError, match="not in the local cache"):
        check_model_path({"model_path": "org/other", "data_path": str(chat)}, environ)


def test_tokenizer_without_chat_template_for_chat_data(demo_data: Path, tmp_path: Path) -> None:
    base = model_dir(tmp_path / "base", template=None)
    result, stderr = train(str(base), demo_data / "chat.jsonl", tmp_path / "out", _environ())
    assert_refused(result, stderr, tmp_path / "out", "its tokenizer has no chat template")
    for data in ("alpaca.jsonl", "sharegpt.jsonl", "grpo.jsonl"):
        with pytest.raises(UsageError, match="no chat template"):
            check_model_path({"model_path": str(base), "data_path": str(demo_data / data)}, {})
    # documents need no template; a template in chat_template.jinja counts
    check_model_path({"model_path": str(base), "data_path": str(demo_data / "documents.jsonl"),
                      "is_pretraining": True, "block_size": 64}, {})
    check_model_path({"model_path": str(base), "data_path": str(demo_data / "documents.jsonl")}, {})
    assert has_chat_template(model_dir(tmp_path / "jinja", template=None, jinja=True)) is True
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    assert has_chat_template(bare) is None  # no tokenizer files: the library decides


def test_the_tiny_model_passes(tiny_model: Path, demo_data: Path) -> None:
    check_model_path({"model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl")}, {})
