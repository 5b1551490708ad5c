"""Kubeflow Trainer progress reporting (built-in plugin, listens on ``thub_on_event``).

When Kubeflow Trainer's TrainJob status feature injects ``KUBEFLOW_TRAINER_STATUS_URL``,
``KUBEFLOW_TRAINER_STATUS_CA_CERT`` and ``KUBEFLOW_TRAINER_STATUS_TOKEN`` into the pod, the run's
progress percentage, ETA and latest metrics are POSTed there (protocol: docs/kubeflow.md):

    POST URL   Authorization: Bearer <token file>   TLS verified against the CA file
    {"trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 120,
                       "metrics": [{"name": "loss", "value": "0.123"}, ...],
                       "lastUpdatedTime": "2026-11-30T12:00:00+00:00"}}

Rules (why):

* Only node 0 reports (every pod runs thub; one writer keeps the status sane).
* Updates go out from a worker thread: the supervisor that fires the events never waits on the
  network, so it keeps following the child and hears SIGTERM. Each update has a total deadline
  (``THUB_KUBEFLOW_TIMEOUT``, default 5 s: connect, TLS, request and answer together; the
  socket is shut down when it passes). An update still waiting when a newer one comes is
  replaced (only the latest status matters); one whose deadline passed before it could be sent
  is dropped. ``thub`` waits for the final update at most twice the deadline (the update in
  flight, then the final one).
* At most one update per ``THUB_KUBEFLOW_INTERVAL`` seconds (default 10), plus the final one.
* The bearer token is never sent in clear: the URL must be https, or plain http to a loopback
  address with ``THUB_KUBEFLOW_ALLOW_HTTP=1`` (a sidecar). Redirects are never followed (the
  token would go wherever the Location says). The ``kubeflow.status-url`` preflight check stops
  ``thub train`` before anything is written when the URL breaks these rules.
* The token file is re-read for every request (it is rotated hourly); a failed update is logged
  once on stderr and never fails training. Only the standard library is imported.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from thub import hookimpl
from thub.specs import END_KINDS

URL_VAR = "KUBEFLOW_TRAINER_STATUS_URL"
CA_VAR = "KUBEFLOW_TRAINER_STATUS_CA_CERT"
TOKEN_VAR = "KUBEFLOW_TRAINER_STATUS_TOKEN"
ALLOW_HTTP_VAR = "THUB_KUBEFLOW_ALLOW_HTTP"
METRIC_KEYS = ("loss", "reward", "mean_reward", "learning_rate", "epoch", "step", "max_steps", "grad_norm")
MAX_ANSWER = 65536  # bytes of an answer body read (and ignored)


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name is not resolved: "loopback-only" means a loopback address


def url_problem(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the bearer token must not be sent to ``url`` (None: it may)."""
    import urllib.parse

    environ = os.environ if environ is None else environ
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname:
        opted_in = environ.get(ALLOW_HTTP_VAR, "").strip().lower() in ("1", "true", "yes")
        if opted_in and _is_loopback(parts.hostname):
            return None
        why = ("only to a loopback address" if opted_in else
               f"unless the address is loopback and {ALLOW_HTTP_VAR}=1")
        return (f"{URL_VAR}={url}: the bearer token is never sent over plain http ({why}); "
                "use an https URL")
    return f"{URL_VAR}={url}: the bearer token is never sent to a URL that is not https"


def _abort(connection: Any, aborted: threading.Event) -> None:
    """End a request whose deadline passed: shut its socket down (wakes a blocked read; what
    was read so far must then not count as an answer, hence ``aborted``)."""
    import socket

    aborted.set()
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: leave TLS state alone
        except OSError:
            pass


class StatusReporter:
    """Turns run events into throttled TrainJob status updates, sent from a worker thread."""

    def __init__(self, url: str, ca_cert: str | None, token_file: str | None, interval: float = 10.0,
                 timeout: float = 5.0, *, allow_plain_http: bool = False) -> None:
        """``timeout`` is each update's total deadline, in seconds. ``allow_plain_http`` is the
        opt-in for an http URL to a loopback address (never to any other)."""
        problem = url_problem(url, {ALLOW_HTTP_VAR: "1" if allow_plain_http else ""})
        if problem:
            raise ValueError(problem)
        self.url, self.ca_cert, self.token_file = url, ca_cert, token_file
        self.interval, self.timeout = interval, timeout
        self.last_post: float | None = None  # monotonic time of the last update handed to the worker
        self.first: tuple[float, int] | None = None  # (timestamp, step) of the first metrics line
        self.failures = 0
        self.sent = 0
        self.dropped = 0  # replaced by a newer update, or late
        self._cond = threading.Condition()
        self._pending: tuple[dict[str, Any], float] | None = None  # (status, deadline)
        self._busy = False
        self._closed = False
        self._worker: threading.Thread | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> StatusReporter | None:
        environ = os.environ if environ is None else environ
        url = environ.get(URL_VAR)
        if not url:
            return None
        problem = url_problem(url, environ)
        if problem:  # the preflight check stops `thub train` first; the API may get here
            print(f"thub: Kubeflow status reporting is off: {problem}", file=sys.stderr)
            return None
        return cls(url, environ.get(CA_VAR), environ.get(TOKEN_VAR),
                   float(environ.get("THUB_KUBEFLOW_INTERVAL", "10")),
                   float(environ.get("THUB_KUBEFLOW_TIMEOUT", "5")),
                   allow_plain_http=url.startswith("http:"))

    def status_for(self, line: dict[str, Any], final: bool = False) -> dict[str, Any]:
        """The ``trainerStatus`` body for one metrics line."""
        step, max_steps = line.get("step"), line.get("max_steps")
        status: dict[str, Any] = {
            "metrics": [{"name": k, "value": str(line[k])} for k in METRIC_KEYS if line.get(k) is not None],
            "lastUpdatedTime": datetime.now(UTC).isoformat(timespec="seconds"),
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
        """Queue the update an event calls for; returns at once, except after the final one,
        which it waits for at most its deadline."""
        if kind == "metrics":
            if self.first is None and isinstance(data.get("step"), int) and data.get("timestamp"):
                self.first = (data["timestamp"], data["step"])
            if self.last_post is None or time.monotonic() - self.last_post >= self.interval:
                self.submit(self.status_for(data))
        elif kind in END_KINDS:
            last = dict(data.get("last_metrics") or {})
            self.submit(self.status_for(last, final=kind == "succeeded"), final=True)
            self.flush(2 * self.timeout + 1.0)  # the update in flight, then the final one
            self.close()

    # --- the worker --------------------------------------------------------------------------

    def submit(self, status: dict[str, Any], final: bool = False) -> None:
        """Hand ``status`` to the worker, replacing one still waiting. An update is late (and
        dropped) when its deadline passes before the worker gets to it; the ``final`` one never
        is: its deadline starts when it is sent."""
        self.last_post = time.monotonic()
        with self._cond:
            if self._pending is not None:
                self.dropped += 1
            self._pending = (status, float("inf") if final else time.monotonic() + self.timeout)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="thub-kubeflow-status", daemon=True)
                self._worker.start()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                if self._pending is None:  # closed and nothing left
                    self._busy = False
                    self._cond.notify_all()
                    return
                (status, deadline), self._pending = self._pending, None
                self._busy = True
            if time.monotonic() >= deadline:
                with self._cond:
                    self.dropped += 1  # late: a newer update will say more
                continue
            self.post(status, min(deadline, time.monotonic() + self.timeout))

    def flush(self, timeout: float) -> bool:
        """Wait until every queued update is sent or given up (at most ``timeout`` seconds)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._pending is not None or self._busy:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def close(self) -> None:
        """Let the worker end once its queue is empty."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- one request -------------------------------------------------------------------------

    def post(self, status: dict[str, Any], deadline: float | None = None) -> bool:
        """One POST that ends by ``deadline`` (monotonic; default now + ``timeout``), never
        follows a redirect, and swallows every error (reported on stderr the first time)."""
        import http.client
        import ssl
        import urllib.parse

        deadline = time.monotonic() + self.timeout if deadline is None else deadline
        connection: Any = None
        timer: threading.Timer | None = None
        try:
            headers = {"Content-Type": "application/json"}
            if self.token_file:
                with open(self.token_file) as handle:  # rotated: read it every time
                    headers["Authorization"] = f"Bearer {handle.read().strip()}"
            parts = urllib.parse.urlsplit(self.url)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the deadline passed before the update could be sent")
            host = parts.hostname
            if host is None:  # checked when the reporter was made (url_problem); here for the type checker
                raise ValueError(f"no host in {self.url!r}")
            if parts.scheme == "https":
                try:
                    context = (ssl.create_default_context(cafile=self.ca_cert) if self.ca_cert
                               else ssl.create_default_context())
                except OSError as exc:  # ssl names no file: say which one
                    raise OSError(f"cannot read the CA certificate {self.ca_cert}: "
                                  f"{exc.strerror or exc}") from None
                connection = http.client.HTTPSConnection(host, parts.port, timeout=remaining, context=context)
            else:
                connection = http.client.HTTPConnection(host, parts.port, timeout=remaining)
            aborted = threading.Event()
            timer = threading.Timer(remaining, _abort, (connection, aborted))
            timer.daemon = True
            timer.start()
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            connection.request("POST", path, body=json.dumps({"trainerStatus": status}).encode(), headers=headers)
            response = connection.getresponse()
            response.read(MAX_ANSWER)
            if aborted.is_set():  # a half answer, cut at the deadline
                raise TimeoutError(f"no answer within the {self.timeout:g} s deadline")
            if 300 <= response.status < 400:
                raise ConnectionRefusedError(f"HTTP {response.status} redirect to {response.getheader('Location')!r} "
                                             "not followed: the bearer token is never sent on")
            if response.status >= 400:
                raise ConnectionError(f"HTTP {response.status} {response.reason}")
            self.sent += 1
            return True
        except Exception as exc:  # noqa: BLE001 - progress reporting must never fail training
            reason = str(exc)
            if time.monotonic() >= deadline:
                reason = f"no answer within the {self.timeout:g} s deadline"
            self.failures += 1
            if self.failures == 1:
                print(f"thub: Kubeflow status update to {self.url} failed ({reason}); training continues",
                      file=sys.stderr)
            return False
        finally:
            if timer is not None:
                timer.cancel()
            if connection is not None:
                connection.close()


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
    if event.kind in END_KINDS:
        _REPORTERS.pop(event.run_dir, None)  # its worker has ended; a resumed run gets a new one


@hookimpl
def thub_register_checks(register: Callable[[Any], None]) -> None:
    from thub.specs import CheckSpec

    register(CheckSpec(id="kubeflow.status-url", title="Kubeflow TrainJob status endpoint", run=_check,
                       tags=frozenset({"preflight", "security"}),
                       applies=lambda context: bool(context.env.get(URL_VAR)),
                       timeout=5, docs="docs/kubeflow.md"))


def _check(context: Any) -> Any:
    from thub.specs import CheckResult

    url = context.env.get(URL_VAR, "")
    problem = url_problem(url, context.env)
    if problem:
        return CheckResult("fail", f"status URL is not https: {url}", (problem,),
                           fix=f"point {URL_VAR} at an https endpoint\n"
                               f"# a plain-http sidecar on 127.0.0.1 / ::1 only: export {ALLOW_HTTP_VAR}=1",
                           docs="docs/kubeflow.md")
    return CheckResult("ok", f"status URL {url} (https or opted-in loopback)")
