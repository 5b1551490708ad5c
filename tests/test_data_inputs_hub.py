"""A Hugging Face dataset name as ``data_path`` (issue 30 item 4): Training Hub 0.11.2 passes a
data_path that is not a local file to ``datasets.load_dataset(data_path, split="train")``. thub
reads it from the local ``datasets`` cache when the Hub is unreachable (a real cache, written with
datasets' own builder under a temporary HF_HOME), and a dataset that is not cached is a fast, clear
error (exit 2): the dataset, the cache, and how to export it to a file.

The Hub itself cannot be reached from CI: it is "unreachable" (HF_ENDPOINT on a closed local port),
"set offline" (HF_HUB_OFFLINE=1), or a local HTTP server that knows no dataset.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.needs_module("datasets")

CHAT = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}]


def cache_dataset(home: Path, repo_id: str, rows: list[dict[str, Any]], split: str = "train",
                   revision: str = "0123abcd", config: str = "default") -> Path:
    """Write ``rows`` into HF_HOME's datasets cache as ``load_dataset(repo_id)`` leaves it after a
    download (``namespace___name/default/0.0.0/HASH``), with datasets' JSON builder."""
    from datasets.packaged_modules.json.json import Json

    namespace, name = repo_id.split("/")
    source = home.parent / f"{name}-{split}.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    builder = Json(dataset_name=name, config_name=config, cache_dir=str(home.parent / "build"),
                   data_files={split: str(source)})
    out = home / "datasets" / f"{namespace}___{name}" / config / "0.0.0" / revision
    builder.download_and_prepare(output_dir=str(out))
    return out


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hub_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("THUB_", "HF_")) and k not in ("TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME")}
    env.update(HF_HOME=str(home), XDG_CACHE_HOME=str(home.parent / "xdg"),
               HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")  # unreachable: connection refused at once
    env.update(extra)
    return env


def _thub(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # the timeout is only a hang guard: an unreachable Hub must never be waited for
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An HF_HOME whose datasets cache holds ``org/tiny-chat`` (2 rows; the second's messages as JSON text)."""
    home = tmp_path / "hf"
    cache_dataset(home, "org/tiny-chat", [{"messages": json.dumps(CHAT)}, {"messages": json.dumps(CHAT)}])
    return home


@pytest.mark.parametrize("offline", ["unreachable", "HF_HUB_OFFLINE=1"])
def test_cached_dataset_is_read_offline(home: Path, offline: str) -> None:
    env = hub_env(home, **({"HF_HUB_OFFLINE": "1"} if offline != "unreachable" else {}))
    done = _thub("data", "check", "org/tiny-chat", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "org/tiny-chat" in done.stdout and "2 valid rows" in done.stdout  # messages decoded from JSON text


def test_rows_are_named_by_dataset_and_row(tmp_path: Path) -> None:
    home = tmp_path / "hf"
    cache_dataset(home, "org/bad-chat", [{"messages": CHAT}, {"messages": [{"role": "user", "content": "q"}]}])
    done = _thub("data", "check", "org/bad-chat", env=hub_env(home))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "org/bad-chat:row 2: messages: expected at least one assistant turn" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_missing_dataset_is_a_clear_error(home: Path) -> None:
    for env, state in ((hub_env(home), "unreachable (Connection refused)"),
                       (hub_env(home, HF_DATASETS_OFFLINE="1"), "set offline (HF_DATASETS_OFFLINE=1)")):
        done = _thub("data", "check", "org/not-cached", env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        out = done.stdout + done.stderr
        assert "Traceback" not in out
        assert "'org/not-cached' is not in the local datasets cache" in out
        assert str(home / "datasets") in out  # where it was looked for
        assert f"while the Hub is {state}" in out.replace("[Errno 111] ", "")
        assert "datasets.load_dataset('org/not-cached', split='train').to_json('not-cached.jsonl')" in out


def test_without_a_train_split(tmp_path: Path) -> None:
    home = tmp_path / "hf"
    cache_dataset(home, "org/test-only", [{"messages": CHAT}], split="test")
    done = _thub("data", "check", "org/test-only", env=hub_env(home))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "org/test-only: split: expected a 'train' split" in done.stdout + done.stderr


def test_a_cache_datasets_cannot_read_says_why(tmp_path: Path) -> None:
    """Two cached configurations: datasets' own reason, not "not cached"."""
    home = tmp_path / "hf"
    for config in ("en", "fr"):
        cache_dataset(home, "org/two", [{"messages": CHAT}], config=config)
    done = _thub("data", "check", "org/two", env=hub_env(home))
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "'org/two' could not be read from (There are multiple 'org/two' configurations in the cache" in out
    assert "Traceback" not in out


def test_a_mistyped_local_path_stays_a_missing_file(home: Path) -> None:
    """A name ending like a data file is taken for a path, not a dataset id."""
    done = _thub("data", "check", "data/train.jsonl", env=hub_env(home))
    assert done.returncode == 2
    assert "data/train.jsonl: no such file or directory" in done.stdout + done.stderr


def test_mixed_with_a_csv_file(home: Path, tmp_path: Path) -> None:
    """`datasets:` entries take a Hub id as they take a path."""
    table = tmp_path / "more.csv"
    table.write_text('messages\n"' + json.dumps(CHAT).replace('"', '""') + '"\n', encoding="utf-8")
    done = _thub("data", "check", "--dataset", "org/tiny-chat", "--dataset", f"{table}:format=messages",
                 env=hub_env(home))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 valid rows" in done.stdout


class _NoDatasets(http.server.BaseHTTPRequestHandler):
    """A Hub that answers and knows no dataset (404 for everything)."""

    def _missing(self) -> None:
        body = b'{"error": "Repository not found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Code", "RepoNotFound")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = _missing

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def empty_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoDatasets)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_dataset_the_hub_does_not_have(tmp_path: Path, empty_hub: str) -> None:
    done = _thub("data", "check", "org/nowhere", env=hub_env(tmp_path / "hf", HF_ENDPOINT=empty_hub))
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "Traceback" not in out
    assert "the Hugging Face Hub could not serve the dataset 'org/nowhere'" in out
    assert "to_json('nowhere.jsonl')" in out


def test_preview_stats_and_prepare(home: Path, tmp_path: Path, tiny_model: Path) -> None:
    """The tokenizing commands take a Hub id too; `prepare` keys its cache on the dataset's revision
    (there is no local file to hash)."""
    env = hub_env(home)
    for command in ("preview", "stats"):
        done = _thub("data", command, "--model", str(tiny_model), "org/tiny-chat", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "prepared.jsonl"
    first = _thub("data", "prepare", "--model", str(tiny_model), "org/tiny-chat", "-o", str(out), env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(out.read_text().splitlines()) == 2
    again = _thub("data", "prepare", "--model", str(tiny_model), "org/tiny-chat", "-o", str(out), env=env)
    assert "reused (cache hit)" in again.stdout + again.stderr, again.stdout + again.stderr
    older = home / "datasets" / "org___tiny-chat" / "default" / "0.0.0" / "0123abcd"
    os.utime(older, (1_000_000_000, 1_000_000_000))  # datasets reads the newest revision in the cache
    cache_dataset(home, "org/tiny-chat", [{"messages": CHAT}] * 3, revision="4567ef01")
    changed = _thub("data", "prepare", "--model", str(tiny_model), "org/tiny-chat", "-o", str(out), env=env)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "cache hit" not in changed.stdout + changed.stderr
    assert len(out.read_text().splitlines()) == 3


@pytest.mark.slow
@pytest.mark.needs_backend("trl")
def test_sft_trains_on_trl_from_the_cache(tmp_path: Path, tiny_model: Path, demo_data: Path) -> None:
    """The demo chat rows as a cached Hub dataset train on trl with the Hub unreachable."""
    rows = [json.loads(line) for line in (demo_data / "chat.jsonl").read_text().splitlines() if line.strip()]
    cache_dataset(tmp_path / "hf", "org/demo-chat", rows)
    run = tmp_path / "run"
    done = _thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path", "org/demo-chat",
                 "--ckpt-output-dir", str(run), "--max-steps", "2", "--learning-rate", "5e-2",
                 env=hub_env(tmp_path / "hf"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((run / "result.json").read_text())["status"] == "succeeded"
    assert f"{len(rows)} examples" in done.stdout + done.stderr
