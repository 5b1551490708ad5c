"""Fixtures of the gepa backend's tests: an OpenAI-compatible endpoint on 127.0.0.1 serving the tiny
local model (tests/openai_server.py), and input/answer rows."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROWS = [{"input": "What is the capital of France?", "answer": "Paris"},
        {"input": "What is 2 + 2?", "answer": "4"},
        {"input": "What colour is the sky?", "answer": "blue", "additional_context": {"hint": "daytime"}}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def endpoint(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT/v1``: FastAPI + uvicorn + transformers' generate on the tiny model."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    port = free_port()
    log = tmp_path_factory.mktemp("endpoint") / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, str(HERE / "openai_server.py"), "--model", str(tiny_model),
                                   "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300  # a hang guard: the model loads in seconds
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the test endpoint did not start:\n{log.read_text()}") from None
                time.sleep(0.5)
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gepa-data") / "qa.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


def _thub(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), environ.get("PYTHONPATH")]))
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=600)


@pytest.fixture
def thub_run() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``thub_run(*args, env=...)``: ``thub ARGS`` in a subprocess (no THUB_* settings of the caller),
    the tests' hooks (tests/gepa_hooks.py) importable by name."""
    return _thub
