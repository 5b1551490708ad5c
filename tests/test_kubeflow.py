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
    """A stand-in for the TrainJob status server: records authorised POST bodies."""

    def __init__(self, directory: Path, token: str) -> None:
        self.ca, key = _self_signed(directory)
        self.token_file = directory / "token"
        self.token_file.write_text(token + "\n")
        self.received: list[dict[str, Any]] = []
        self.rejected = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
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
    srv.httpd.shutdown()


def test_reports_progress_eta_and_metrics_with_the_rotating_token(server: StatusServer) -> None:
    reporter = StatusReporter(server.url, str(server.ca), str(server.token_file), interval=0)
    reporter.handle("metrics", {"step": 10, "max_steps": 100, "loss": 0.5, "timestamp": 1000.0})
    reporter.handle("metrics", {"step": 30, "max_steps": 100, "loss": 0.25, "learning_rate": 1e-5,
                                "timestamp": 1010.0})
    server.token_file.write_text("secret-token-2")  # rotated: the next request must use it
    reporter.handle("finished", {"last_metrics": {"step": 100, "max_steps": 100, "loss": 0.1}})
    assert server.rejected == 0 and len(server.received) == 3
    second = server.received[1]["trainerStatus"]
    assert second["progressPercentage"] == 30 and second["estimatedRemainingSeconds"] == 35
    assert {"name": "loss", "value": "0.25"} in second["metrics"] and {"name": "step", "value": "30"} in second["metrics"]
    assert all(isinstance(m["value"], str) for m in second["metrics"])
    datetime.datetime.fromisoformat(second["lastUpdatedTime"])
    final = server.received[2]["trainerStatus"]
    assert final["progressPercentage"] == 100 and final["estimatedRemainingSeconds"] == 0


def test_throttled_but_the_final_update_always_goes(server: StatusServer) -> None:
    reporter = StatusReporter(server.url, str(server.ca), str(server.token_file), interval=3600)
    for step in range(1, 50):
        reporter.handle("metrics", {"step": step, "max_steps": 50, "loss": 1.0, "timestamp": float(step)})
    reporter.handle("finished", {"last_metrics": {"step": 50, "max_steps": 50}})
    assert [r["trainerStatus"]["progressPercentage"] for r in server.received] == [2, 100]


def test_dead_or_untrusted_endpoint_never_raises(server: StatusServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    dead = StatusReporter("https://127.0.0.1:9/status", str(server.ca), str(server.token_file), interval=0, timeout=1)
    dead.handle("metrics", {"step": 1, "max_steps": 2, "timestamp": 1.0})
    dead.handle("failed", {})
    assert dead.failures == 2 and capsys.readouterr().err.count("training continues") == 1
    other_ca, _key = _self_signed(tmp_path / "other")
    untrusted = StatusReporter(server.url, str(other_ca), str(server.token_file), interval=0)
    assert untrusted.post({"progressPercentage": 1}) is False and not server.received
    missing_token = StatusReporter(server.url, str(server.ca), str(tmp_path / "nope"), interval=0)
    assert missing_token.post({"progressPercentage": 1}) is False


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
    assert progress[-1] == 100 and 25 in progress and server.rejected == 0, progress
