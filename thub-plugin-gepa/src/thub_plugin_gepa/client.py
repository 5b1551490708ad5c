"""litellm's HTTP client in the optimisation process: every request to the LLM endpoint bounded
(:mod:`thub_plugin_gepa.endpoint` says how and why).

:func:`install` makes it ``litellm.client_session`` (litellm's ``openai/`` provider sends through
it); the runner turns its first failure into exit 2 naming ``api_base``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from thub_plugin_gepa import endpoint as bounds
from thub_plugin_gepa.endpoint import EndpointError


class _Watch:
    """The requests under way and a thread saying, every ``every`` seconds, which it still waits for."""

    def __init__(self, timeout: float, every: float, say: Callable[[str], None]) -> None:
        self.timeout, self.every, self.say = timeout, every, say
        self._lock = threading.Lock()
        self._open: dict[int, list[Any]] = {}  # token -> [label, started, next report]
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, label: str) -> int:
        now = time.monotonic()
        with self._lock:
            self._next += 1
            self._open[self._next] = [label, now, now + self.every]
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="thub-gepa-watch", daemon=True)
                self._thread.start()
            return self._next

    def end(self, token: int) -> None:
        with self._lock:
            self._open.pop(token, None)

    def _loop(self) -> None:
        while not self._stop.wait(self.every / 4):
            now = time.monotonic()
            with self._lock:
                due = [entry for entry in self._open.values() if now >= entry[2]]
                for entry in due:
                    entry[2] = now + self.every
            for label, started, _ in due:
                self.say(bounds.waiting(label, now - started, self.timeout))

    def close(self) -> None:
        self._stop.set()


class Endpoint:
    """An ``httpx.Client`` (:attr:`client`) whose requests are bounded as the module says; the first
    failure is kept in :attr:`failure` and every later request fails with it."""

    def __init__(self, api_base: str | None, timeout: float | None = None, progress_every: float | None = None,
                 say: Callable[[str], None] = bounds.stderr, max_body: int = bounds.MAX_BODY) -> None:
        self.name = f"api_base {api_base!r}" if api_base else "the LLM endpoint"
        self.timeout = bounds.timeout_setting() if timeout is None else timeout
        self.max_body = max_body
        self.failure: EndpointError | None = None
        self._watch = _Watch(self.timeout, progress_every or bounds.progress_interval(self.timeout), say)
        self.client = httpx.Client(transport=_Bounded(self, httpx.HTTPTransport()), timeout=self.timeout)

    def fail(self, label: str, what: str) -> EndpointError:
        """Record (once) and return the failure of the request ``label``."""
        error = EndpointError(f"{self.name}: {label} {what}")
        if self.failure is None:
            self.failure = error
        return error

    def close(self) -> None:
        self._watch.close()
        self.client.close()


class _Bounded(httpx.BaseTransport):
    """The transport of :class:`Endpoint`: one deadline per request, a bounded body, a checked answer."""

    def __init__(self, endpoint: Endpoint, inner: httpx.BaseTransport) -> None:
        self.endpoint, self.inner = endpoint, inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        endpoint = self.endpoint
        if endpoint.failure is not None:
            raise endpoint.failure  # the endpoint is broken: no retry waits for it again
        label = f"{request.method} {request.url}"
        request.headers["Accept-Encoding"] = "identity"
        limit = endpoint.timeout
        # the deadline holds whatever timeout the caller's SDK asked for (litellm's is 600 s)
        request.extensions["timeout"] = {"connect": limit, "read": limit, "write": limit, "pool": limit}
        token = endpoint._watch.begin(label)
        deadline = time.monotonic() + limit
        try:
            try:
                response = self.inner.handle_request(request)
                body = self._read(response, label, deadline)
            except httpx.TimeoutException as exc:
                raise endpoint.fail(label, f"no answer within {limit:g} s ({bounds.TIMEOUT_ENV})") from exc
        finally:
            endpoint._watch.end(token)
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise endpoint.fail(label, f"answered with Content-Encoding {encoding} although thub asked for none")
        if 200 <= response.status_code < 300 and request.url.path.endswith("/chat/completions") \
                and "event-stream" not in response.headers.get("Content-Type", ""):
            self._check_completion(body, label, response.status_code)
        headers = [(k, v) for k, v in response.headers.raw
                   if k.lower() not in (b"content-length", b"transfer-encoding", b"content-encoding")]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request,
                              extensions={k: v for k, v in response.extensions.items() if k != "network_stream"})

    def _read(self, response: httpx.Response, label: str, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.stream:  # type: ignore[union-attr]  # a transport's response: a sync stream
                size += len(chunk)
                if size > self.endpoint.max_body:
                    raise self.endpoint.fail(label, f"answered more than {self.endpoint.max_body / 2**20:g} MiB "
                                                    "(a chat completion is a few kB): not read further")
                if time.monotonic() > deadline:
                    raise self.endpoint.fail(label, f"no complete answer within {self.endpoint.timeout:g} s "
                                                    f"({bounds.TIMEOUT_ENV})")
                chunks.append(chunk)
        finally:
            response.close()
        return b"".join(chunks)

    def _check_completion(self, body: bytes, label: str, status: int) -> None:
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            raise self.endpoint.fail(label, f"answered {status} with something that is not JSON "
                                            f"({body[:60]!r})") from None
        choices = value.get("choices") if isinstance(value, dict) else None
        if not (isinstance(choices, list) and choices
                and all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices)):
            found = ", ".join(map(str, value)) if isinstance(value, dict) else type(value).__name__
            raise self.endpoint.fail(label, f"answered {status} with JSON that is not a chat completion (expected "
                                            f"choices[].message, found {found or 'nothing'})")

    def close(self) -> None:
        self.inner.close()


def install(api_base: str | None) -> Endpoint:
    """A bounded :class:`Endpoint` made litellm's HTTP client (``THUB_GEPA_TIMEOUT`` read here)."""
    import litellm

    endpoint = Endpoint(api_base)
    litellm.client_session = endpoint.client
    return endpoint
