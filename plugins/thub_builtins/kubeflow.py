"""Kubeflow Trainer progress reporting (built-in plugin, listens on ``thub_on_event``).

When Kubeflow Trainer's TrainJob status feature injects ``KUBEFLOW_TRAINER_STATUS_URL``,
``KUBEFLOW_TRAINER_STATUS_CA_CERT`` and ``KUBEFLOW_TRAINER_STATUS_TOKEN`` into the pod, the run's
progress percentage, ETA and latest metrics are POSTed there (protocol: docs/kubeflow.md):

    POST URL   Authorization: Bearer <token file>   TLS verified against the CA file
    {"trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 120,
                       "metrics": [{"name": "loss", "value": "0.123"}, ...],
                       "lastUpdatedTime": "2026-11-30T12:00:00+00:00"}}

Rules (why): only node 0 reports (every pod runs thub; one writer keeps the status sane);
at most one POST per ``THUB_KUBEFLOW_INTERVAL`` seconds (default 10) except the final one;
the token file is re-read for every request (it is rotated hourly); a failed POST is logged once
and never fails training. Only the standard library is imported, and only when reporting.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any

from thub import hookimpl

URL_VAR = "KUBEFLOW_TRAINER_STATUS_URL"
CA_VAR = "KUBEFLOW_TRAINER_STATUS_CA_CERT"
TOKEN_VAR = "KUBEFLOW_TRAINER_STATUS_TOKEN"
METRIC_KEYS = ("loss", "reward", "mean_reward", "learning_rate", "epoch", "step", "max_steps", "grad_norm")


class StatusReporter:
    """Turns run events into throttled TrainJob status updates."""

    def __init__(self, url: str, ca_cert: str | None, token_file: str | None, interval: float = 10.0,
                 timeout: float = 5.0) -> None:
        self.url, self.ca_cert, self.token_file = url, ca_cert, token_file
        self.interval, self.timeout = interval, timeout
        self.last_post: float | None = None  # monotonic time of the last POST
        self.first: tuple[float, int] | None = None  # (timestamp, step) of the first metrics line
        self.failures = 0
        self.sent = 0

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> StatusReporter | None:
        environ = dict(os.environ) if environ is None else environ
        if not environ.get(URL_VAR):
            return None
        return cls(environ[URL_VAR], environ.get(CA_VAR), environ.get(TOKEN_VAR),
                   float(environ.get("THUB_KUBEFLOW_INTERVAL", "10")))

    def status_for(self, line: dict[str, Any], final: bool = False) -> dict[str, Any]:
        """The ``trainerStatus`` body for one metrics line."""
        step, max_steps = line.get("step"), line.get("max_steps")
        status: dict[str, Any] = {
            "metrics": [{"name": k, "value": str(line[k])} for k in METRIC_KEYS if line.get(k) is not None],
            "lastUpdatedTime": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        if final:
            status.update(progressPercentage=100, estimatedRemainingSeconds=0)
        elif isinstance(step, int) and isinstance(max_steps, int) and max_steps > 0:
            status["progressPercentage"] = max(0, min(100, int(100 * step / max_steps)))
            if self.first and step > self.first[1] and line.get("timestamp"):
                per_step = (line["timestamp"] - self.first[0]) / (step - self.first[1])
                status["estimatedRemainingSeconds"] = max(0, int(per_step * (max_steps - step)))
        return status

    def handle(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "metrics":
            if self.first is None and isinstance(data.get("step"), int) and data.get("timestamp"):
                self.first = (data["timestamp"], data["step"])
            if self.last_post is None or time.monotonic() - self.last_post >= self.interval:
                self.post(self.status_for(data))
        elif kind in ("finished", "failed", "interrupted"):
            last = dict(data.get("last_metrics") or {})
            self.post(self.status_for(last, final=kind == "finished"))

    def post(self, status: dict[str, Any]) -> bool:
        """One POST; any error is swallowed (reported on stderr the first time)."""
        import ssl
        import urllib.request

        self.last_post = time.monotonic()
        try:
            headers = {"Content-Type": "application/json"}
            if self.token_file:
                with open(self.token_file) as handle:  # rotated: read it every time
                    headers["Authorization"] = f"Bearer {handle.read().strip()}"
            context = ssl.create_default_context(cafile=self.ca_cert) if self.ca_cert else ssl.create_default_context()
            request = urllib.request.Request(self.url, data=json.dumps({"trainerStatus": status}).encode(),
                                             headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                response.read()
            self.sent += 1
            return True
        except Exception as exc:  # noqa: BLE001 - progress reporting must never fail training
            self.failures += 1
            if self.failures == 1:
                print(f"thub: Kubeflow status update to {self.url} failed ({exc}); training continues",
                      file=sys.stderr)
            return False


_REPORTERS: dict[str, StatusReporter | None] = {}


def _reporter(run_dir: str) -> StatusReporter | None:
    from thub.launch.torchrun import is_head_node

    if run_dir not in _REPORTERS:
        _REPORTERS[run_dir] = StatusReporter.from_environment() if is_head_node() else None
    return _REPORTERS[run_dir]


@hookimpl
def thub_on_event(event: Any) -> None:
    """Forward progress to Kubeflow Trainer when its status variables are present."""
    if not os.environ.get(URL_VAR):
        return
    reporter = _reporter(event.run_dir)
    if reporter is not None:
        reporter.handle(event.kind, dict(event.data))
