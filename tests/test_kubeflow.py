"""Kubeflow Trainer: progress reports to a local HTTPS status endpoint (self-signed certificate,
bearer token), throttling, a dead endpoint that never fails training, and a simulated worker
(PET_* set, 2 processes) whose progress reaches the endpoint."""

from __future__ import annotations

import datetime
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from thub_builtins.kubeflow import StatusReporter


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl CLI: no extra Python dependency)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "ca.crt", directory / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key_path), "-out", str(cert_path), "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert_path, key_path


class StatusServer:
    """A stand-in for the TrainJob status server: records authorised POST bodies.

    ``mode``: ``ok``; ``hang`` (the status line, then one header byte every 0.2 s until the
    test ends: a per-read socket timeout never fires); ``hold`` (the first request waits for
    ``release``); ``redirect302``/``redirect307`` (to ``redirect_to``). ``seen`` records every request's
    Authorization header; ``arrived`` is set when a request comes in.
    """

    def __init__(self, directory: Path, token: str, mode: str = "ok", redirect_to: str = "") -> None:
        self.ca, key = _self_signed(directory)
        self.token_file = directory / "token"
        self.token_file.write_text(token + "\n")
        self.received: list[dict[str, Any]] = []
        self.rejected = 0
        self.mode, self.redirect_to = mode, redirect_to
        self.seen: list[str | None] = []
        self.arrived, self.release, self.stop = threading.Event(), threading.Event(), threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - a followed 302/303 turns the POST into a GET
                server.seen.append(self.headers.get("Authorization"))
                self.send_response(200)
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.seen.append(self.headers.get("Authorization"))
                first = not server.arrived.is_set()
                server.arrived.set()
                if server.mode == "hang":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    while not server.stop.wait(0.2):
                        try:
                            self.wfile.write(b"z")  # one endless header line, a byte at a time
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                if server.mode == "hold" and first:
                    server.release.wait(60)
                if server.mode.startswith("redirect"):
                    self.send_response(int(server.mode.removeprefix("redirect") or 307))
                    self.send_header("Location", server.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Authorization") != f"Bearer {server.token_file.read_text().strip()}":
                    server.rejected += 1
                    self.send_response(401)
                else:
                    server.received.append(json.loads(body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/status"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def env(self) -> dict[str, str]:
        return {"KUBEFLOW_TRAINER_STATUS_URL": self.url, "KUBEFLOW_TRAINER_STATUS_CA_CERT": str(self.ca),
                "KUBEFLOW_TRAINER_STATUS_TOKEN": str(self.token_file)}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[StatusServer]:
    srv = StatusServer(tmp_path, "secret-token-1")
    yield srv
    srv.stop.set()
    srv.httpd.shutdown()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Any]:
    """``make_server(mode, redirect_to="")``: more status servers, each in its own directory."""
    made: list[StatusServer] = []

    def make(mode: str, redirect_to: str = "") -> StatusServer:
        made.append(StatusServer(tmp_path / f"srv{len(made)}", "secret-token-1", mode, redirect_to))
        return made[-1]

    yield make
    for srv in made:
        srv.stop.set()
        srv.release.set()
        srv.httpd.shutdown()


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
def test_reports_progress_eta_and_metrics_with_the_rotating_token(server: StatusServer) -> None:
    reporter = StatusReporter(server.url, str(server.ca), str(server.token_file), interval=0)
    reporter.handle("metrics", {"step": 10, "max_steps": 100, "loss": 0.5, "timestamp": 1000.0})
    assert reporter.flush(30)  # sent from a worker thread; a newer update would replace a waiting one
    reporter.handle("metrics", {"step": 30, "max_steps": 100, "loss": 0.25, "learning_rate": 1e-5,
                                "timestamp": 1010.0})
    assert reporter.flush(30)
    server.token_file.write_text("secret-token-2")  # rotated: the next request must use it
    reporter.handle("succeeded", {"last_metrics": {"step": 100, "max_steps": 100, "loss": 0.1}})
    assert server.rejected == 0 and len(server.received) == 3
    second = server.received[1]["trainerStatus"]
    assert second["progressPercentage"] == 30 and second["estimatedRemainingSeconds"] == 35
    assert {"name": "loss", "value": "0.25"} in second["metrics"]
    assert {"name": "step", "value": "30"} in second["metrics"]
    assert all(isinstance(m["value"], str) for m in second["metrics"])
    datetime.datetime.fromisoformat(second["lastUpdatedTime"])
    final = server.received[2]["trainerStatus"]
    assert final["progressPercentage"] == 100 and final["estimatedRemainingSeconds"] == 0


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
def test_throttled_but_the_final_update_always_goes(server: StatusServer) -> None:
    reporter = StatusReporter(server.url, str(server.ca), str(server.token_file), interval=3600)
    for step in range(1, 50):
        reporter.handle("metrics", {"step": step, "max_steps": 50, "loss": 1.0, "timestamp": float(step)})
    assert reporter.flush(30)
    reporter.handle("succeeded", {"last_metrics": {"step": 50, "max_steps": 50}})
    assert [r["trainerStatus"]["progressPercentage"] for r in server.received] == [2, 100]


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
def test_dead_or_untrusted_endpoint_never_raises(server: StatusServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    dead = StatusReporter("https://127.0.0.1:9/status", str(server.ca), str(server.token_file), interval=0, timeout=1)
    dead.handle("metrics", {"step": 1, "max_steps": 2, "timestamp": 1.0})
    assert dead.flush(30)
    dead.handle("failed", {})
    assert dead.failures == 2 and capsys.readouterr().err.count("training continues") == 1
    other_ca, _key = _self_signed(tmp_path / "other")
    untrusted = StatusReporter(server.url, str(other_ca), str(server.token_file), interval=0)
    assert untrusted.post({"progressPercentage": 1}) is False and not server.received
    missing_token = StatusReporter(server.url, str(server.ca), str(tmp_path / "nope"), interval=0)
    assert missing_token.post({"progressPercentage": 1}) is False


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
@pytest.mark.slow
def test_simulated_kubeflow_worker_trains_and_reports(server: StatusServer, tiny_model: Path, demo_data: Path,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "kf"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_"))}
    environ.update(server.env(), PET_NNODES="1", PET_NPROC_PER_NODE="2", PET_NODE_RANK="0",
                   THUB_KUBEFLOW_INTERVAL="0")
    args = [sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", str(tiny_model),
            "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "4",
            "--effective-batch-size", "4"]
    plan = json.loads(subprocess.run([*args, "--dry-run", "--json"], capture_output=True, text=True,
                                     env=environ).stdout)
    assert plan["parameters"]["nproc_per_node"] == {"value": 2, "source": "env PET_NPROC_PER_NODE"}
    assert plan["torchrun"]["nnodes"]["source"] == "env PET_NNODES" and plan["translation"]["world_size"] == 2
    done = subprocess.run(args, capture_output=True, text=True, env=environ, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    lines = [json.loads(line) for line in (out / "training_metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(line["max_steps"] == 4 for line in lines)
    progress = [r["trainerStatus"]["progressPercentage"] for r in server.received]
    # the reporter sends the newest status when its worker is free: under load steps coalesce (CI saw
    # [75, 100, 100]), so each report is a true step percentage, in order, ending at 100
    assert progress == sorted(progress) and set(progress) <= {25, 50, 75, 100}, progress
    assert progress[-1] == 100 and server.rejected == 0, progress


# --- issue 13, item 11: never block, never leak ------------------------------------------------

def _returns(call: Any, limit: float = 30.0) -> bool:
    """Whether ``call()`` returns within ``limit`` seconds (a deadlock detector, not a speed test:
    the endpoints below never answer on their own)."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit)
    return not thread.is_alive()


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
def test_a_hanging_endpoint_never_blocks_the_caller(make_server: Any) -> None:
    hang = make_server("hang")
    reporter = StatusReporter(hang.url, str(hang.ca), str(hang.token_file), interval=0, timeout=1)
    assert _returns(lambda: reporter.handle("metrics", {"step": 1, "max_steps": 4, "timestamp": 1.0}))
    assert hang.arrived.wait(30)  # the update is being sent, from another thread
    assert _returns(lambda: reporter.handle("metrics", {"step": 2, "max_steps": 4, "timestamp": 2.0}))
    # the final update waits for delivery, but never longer than its deadline
    assert _returns(lambda: reporter.handle("succeeded", {"last_metrics": {"step": 4, "max_steps": 4}}))
    assert reporter.sent == 0 and reporter.failures + reporter.dropped >= 2
    assert _returns(lambda: reporter.post({"progressPercentage": 1}))  # a synchronous post has the deadline too


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
def test_updates_queued_behind_a_slow_one_are_replaced_by_the_latest(make_server: Any) -> None:
    hold = make_server("hold")
    reporter = StatusReporter(hold.url, str(hold.ca), str(hold.token_file), interval=0, timeout=30)
    reporter.handle("metrics", {"step": 1, "max_steps": 10, "timestamp": 1.0})
    assert hold.arrived.wait(30)  # update 1 is in flight and held by the server
    for step in range(2, 6):
        reporter.handle("metrics", {"step": step, "max_steps": 10, "timestamp": float(step)})
    hold.release.set()
    assert reporter.flush(30)
    assert [r["trainerStatus"]["progressPercentage"] for r in hold.received] == [10, 50]
    assert reporter.dropped == 3 and reporter.sent == 2


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
@pytest.mark.parametrize("code", [302, 307])
def test_redirects_are_not_followed_with_the_token(make_server: Any, code: int) -> None:
    thief = make_server("ok")
    redirecting = make_server(f"redirect{code}", redirect_to=thief.url)
    reporter = StatusReporter(redirecting.url, str(redirecting.ca), str(redirecting.token_file), interval=0)
    # the thief's certificate is trusted too (same CA file would be needed: use one bundle)
    bundle = redirecting.ca.parent.parent / "bundle.crt"
    bundle.write_text(redirecting.ca.read_text() + thief.ca.read_text())
    reporter.ca_cert = str(bundle)
    assert reporter.post({"progressPercentage": 1}) is False
    assert redirecting.seen == ["Bearer secret-token-1"] and thief.seen == []  # never sent on


@pytest.mark.parametrize(("url", "opt_in", "allowed"), [
    ("https://status.example.com/x", "", True),
    ("http://status.example.com/x", "", False),
    ("http://status.example.com/x", "1", False),  # the opt-in is for loopback only
    ("http://10.0.0.7:8080/x", "1", False),
    ("http://127.0.0.1:8080/x", "", False),  # loopback, but not opted in
    ("http://127.0.0.1:8080/x", "1", True),
    ("http://[::1]:8080/x", "1", True),
    ("http://localhost:8080/x", "1", True),
    ("ftp://127.0.0.1/x", "1", False),
])
def test_plain_http_needs_loopback_and_an_explicit_opt_in(url: str, opt_in: str, allowed: bool,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from thub_builtins.kubeflow import url_problem

    environ = {"KUBEFLOW_TRAINER_STATUS_URL": url, "KUBEFLOW_TRAINER_STATUS_TOKEN": "/var/run/token"}
    if opt_in:
        environ["THUB_KUBEFLOW_ALLOW_HTTP"] = opt_in
    assert (url_problem(url, environ) is None) == allowed
    reporter = StatusReporter.from_environment(environ)
    assert (reporter is not None) == allowed
    if not allowed:
        assert "the bearer token is never sent" in capsys.readouterr().err
        with pytest.raises(ValueError, match="never sent"):
            StatusReporter(url, None, "/var/run/token")


def test_plain_http_url_stops_the_run_before_anything_is_written(tmp_path: Path) -> None:
    from thub.doctor import blocking, preflight

    environ = {"KUBEFLOW_TRAINER_STATUS_URL": "http://status.example.com/x",
               "KUBEFLOW_TRAINER_STATUS_TOKEN": str(tmp_path / "token")}
    outcomes = {o.id: o for o in preflight(None, str(tmp_path / "out"), env=environ)}
    assert outcomes["kubeflow.status-url"].status == "fail"
    assert "https" in outcomes["kubeflow.status-url"].result.summary
    assert [o.id for o in blocking(outcomes.values())] == ["kubeflow.status-url"]
    fine = {o.id: o for o in preflight(None, str(tmp_path / "out"), env={"KUBEFLOW_TRAINER_STATUS_URL": "https://h/x"})}
    assert fine["kubeflow.status-url"].status == "ok"
    absent = {o.id: o for o in preflight(None, str(tmp_path / "out"), env={})}
    assert absent["kubeflow.status-url"].status == "skip"


@pytest.mark.needs_system("openssl")  # the server's self-signed certificate
@pytest.mark.slow
def test_sigterm_stops_a_run_whose_status_endpoint_hangs(make_server: Any, tiny_model: Path, demo_data: Path,
                                                         tmp_path: Path) -> None:
    """The supervisor keeps following the child and hears SIGTERM although every status POST hangs."""
    import signal
    import time

    hang = make_server("hang")
    out = tmp_path / "kf"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_"))}
    environ.update(hang.env(), THUB_KUBEFLOW_INTERVAL="0", THUB_KUBEFLOW_TIMEOUT="2")
    args = [sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", str(tiny_model),
            "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "400",
            "--effective-batch-size", "2"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)
    try:
        deadline = time.time() + 180
        metrics = out / "training_metrics.jsonl"
        while time.time() < deadline and process.poll() is None:
            # training is under way and a status POST is hanging (the worker thread sends it a
            # moment after the metrics line that triggered it)
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 3 and hang.arrived.is_set():
                break
            time.sleep(0.1)
        assert process.poll() is None and hang.arrived.is_set(), process.poll()
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=120)  # hangs forever if the supervisor is deaf
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert json.loads((out / "result.json").read_text())["status"] == "interrupted"
