"""A hostile or broken OpenAI-compatible endpoint (issue 35 item 10): one that never answers, answers
something that is not HTTP, not JSON or not a chat completion, or streams 200 MB. Each is a bounded
wait with progress on stderr and a one-line error naming api_base (exit 2 before anything starts; a
failed run with that root cause once it has), never a traceback or a wait without end.

The endpoints are real HTTP servers started by the tests on 127.0.0.1 (``http.server`` in a thread).
No assertion depends on timing: a hang ends when the test says so (an Event), and the deadlines are
set short through ``THUB_GEPA_TIMEOUT`` only where the test waits for thub to give up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gepa")
pytest.importorskip("litellm")

SEED = '{"system_prompt": "Answer the question in one word."}'
#: how long a test waits for an event before calling it a hang (a guard, not a timing assertion)
HANG_GUARD = 300.0
MODELS = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()


def completion(text: str) -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "created": 1, "model": "tiny",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


class Hostile:
    """What the server does for ``/models`` and ``/chat/completions``; ``release`` ends every hang,
    ``sent`` counts the bytes of a huge body that went out before the client stopped reading."""

    def __init__(self, models: str = "ok", chat: str = "ok") -> None:
        self.models, self.chat = models, chat
        self.release = threading.Event()
        self.waiting = threading.Event()  # a request is hanging
        self.sent = 0


def _handler(state: Hostile) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
            pass

        def _answer(self, mode: str, good: bytes) -> None:
            if mode == "hang":
                state.waiting.set()
                state.release.wait(HANG_GUARD)
                return
            if mode == "not-http":
                self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                return
            if mode == "huge":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                chunk = b" " * 65536
                try:
                    while state.sent < 200 * 1024 * 1024:
                        self.wfile.write(chunk)
                        state.sent += len(chunk)
                except OSError:
                    pass  # the client stopped reading
                return
            body = {"ok": good, "not-json": b"<html>Bad gateway</html>", "wrong-shape": b'{"result": "Paris"}',
                    "slow": good}[mode]
            if mode == "slow":
                state.waiting.set()
                state.release.wait(HANG_GUARD)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.endswith("/models"):
                self._answer(state.models, MODELS)
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.endswith("/chat/completions"):
                self._answer(state.chat, completion("Paris"))
            else:
                self.send_error(404)

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[[Hostile], str]]:
    """``serve(Hostile(...))``: the server's ``http://127.0.0.1:PORT/v1``; stopped (hangs released)
    at the end of the test."""
    started: list[tuple[ThreadingHTTPServer, Hostile]] = []

    def start(state: Hostile) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append((server, state))
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server, state in started:
        state.release.set()
        server.shutdown()
        server.server_close()


def _thub(tmp_path: Path, url: str, *extra: str, timeout: str = "3") -> subprocess.CompletedProcess[str]:
    data = tmp_path / "qa.jsonl"
    data.write_text('{"input": "What is the capital of France?", "answer": "Paris"}\n')
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ["THUB_GEPA_TIMEOUT"] = timeout
    try:
        return subprocess.run([sys.executable, "-m", "thub", "train", "gepa", "--data-path", str(data),
                               "--seed-candidate", SEED, "--task-lm", "openai/tiny", "--api-base", url,
                               "--max-metric-calls", "2", "--ckpt-output-dir", str(tmp_path / "run"), *extra],
                              capture_output=True, text=True, env=environ, timeout=HANG_GUARD)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"thub train gepa did not give up on {url} in {HANG_GUARD:.0f} s: "
                             f"{(exc.stderr or b'')[-2000:]!r}") from None


@pytest.mark.parametrize(("models", "expected"), [
    ("hang", "no answer within 3 s"),
    ("not-http", "answers, but not HTTP"),
    ("not-json", "GET /models answered 200 with something that is not an OpenAI model list"),
])
def test_the_check_before_anything_starts_is_bounded(models: str, expected: str, serve: Callable[[Hostile], str],
                                                     tmp_path: Path) -> None:
    url = serve(Hostile(models=models))
    done = _thub(tmp_path, url, "--dry-run")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"api_base '{url}': {expected}" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    if models == "hang":
        assert f"waiting for GET {url}/models" in done.stderr, done.stderr[-3000:]  # progress, then the deadline


@pytest.mark.parametrize(("chat", "expected"), [
    ("hang", "no answer within 3 s (THUB_GEPA_TIMEOUT)"),
    ("not-json", "answered 200 with something that is not JSON"),
    ("wrong-shape", "answered 200 with JSON that is not a chat completion"),
    ("huge", "answered more than 16 MiB"),
])
def test_a_run_against_a_hostile_endpoint_fails_with_its_cause(chat: str, expected: str,
                                                               serve: Callable[[Hostile], str],
                                                               tmp_path: Path) -> None:
    """The run has started (the endpoint answered the check): it fails (exit 1, result.json "failed")
    with the endpoint's failure as its one-line root cause, within the deadline."""
    state = Hostile(chat=chat)
    url = serve(state)
    done = _thub(tmp_path, url)
    message = f"api_base '{url}': POST {url}/chat/completions {expected}"
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert f"root cause:\n  UsageError: {message}" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "failed" and message in result["error"], result
    if chat == "huge":
        assert state.sent < 100 * 1024 * 1024  # the body was not read to its end


def test_a_slow_answer_is_waited_for_with_progress(serve: Callable[[Hostile], str]) -> None:
    """The client thub gives litellm says on stderr that it is still waiting, and takes the answer
    when it comes."""
    from thub_plugin_gepa.client import Endpoint

    state = Hostile(chat="slow")
    url = serve(state)
    said: list[str] = []
    seen = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        seen.set()

    endpoint = Endpoint(url, timeout=HANG_GUARD, progress_every=0.05, say=say)
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(
        endpoint.client.post(url + "/chat/completions", json={"model": "tiny", "messages": []})))
    caller.start()
    try:
        assert seen.wait(HANG_GUARD), "no progress line while the endpoint was silent"
    finally:
        state.release.set()
        caller.join(HANG_GUARD)
    assert f"waiting for POST {url}/chat/completions" in said[0], said
    assert f"gives up at {HANG_GUARD:.0f} s" in said[0] and "THUB_GEPA_TIMEOUT" in said[0]
    assert answers and answers[0].json()["choices"][0]["message"]["content"] == "Paris"
    endpoint.close()


def test_the_deadline_setting_is_checked(serve: Callable[[Hostile], str], tmp_path: Path) -> None:
    url = serve(Hostile())
    done = _thub(tmp_path, url, "--dry-run", timeout="soon")
    assert done.returncode == 2 and "THUB_GEPA_TIMEOUT='soon': expected seconds (a number > 0)" in done.stderr, \
        done.stderr[-3000:]
