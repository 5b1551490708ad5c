"""The LLM endpoint gepa's models call (``api_base``), behind bounds.

Left to itself, litellm waits 600 s for each answer, retries, and reads whatever body comes back
whole: an endpoint that never answers stalls a run for hours without a word, and one that streams
200 MB fills memory. So thub checks the endpoint before anything starts (:func:`probe`: ``GET
api_base/models``, at most 30 s), and the optimisation process gives litellm its own HTTP client
(``litellm.client_session``, :class:`thub_plugin_gepa.client.Endpoint`) which

* gives up on a request without a complete answer after ``THUB_GEPA_TIMEOUT`` seconds (default
  600), saying on stderr every 30 s (a quarter of the deadline when that is shorter) that it is
  still waiting;
* reads at most 16 MiB of a body (a chat completion is a few kB) and asks for it uncompressed;
* checks that a chat completion is JSON with ``choices``.

The first such failure is the run's: every later request fails with it at once (no retries against
a broken endpoint), and the runner turns it into exit 2 naming ``api_base``. Only the standard
library is imported here: the check runs in thub's own process (the client, on httpx, is in
:mod:`thub_plugin_gepa.client`).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from thub.backend import UsageError

TIMEOUT_ENV = "THUB_GEPA_TIMEOUT"
#: seconds a request may wait for its complete answer (litellm's own default, without its retries)
DEFAULT_TIMEOUT = 600.0
#: seconds between two "still waiting" lines
PROGRESS_EVERY = 30.0
#: the most of a response body read (a chat completion is a few kB)
MAX_BODY = 16 * 1024 * 1024
#: seconds the check before the run waits for ``GET /models`` (THUB_GEPA_TIMEOUT when shorter): a
#: server that cannot list its models in that time is no server to start a run against
PROBE_TIMEOUT = 30.0
#: the most of ``GET /models`` read by the check (a long model list of a hosted API fits)
PROBE_BODY = 1024 * 1024


class EndpointError(Exception):
    """The endpoint failed in a way no retry mends (no answer in time, garbage, a huge body)."""


def timeout_setting(environ: Mapping[str, str] = os.environ) -> float:
    """``THUB_GEPA_TIMEOUT`` in seconds (default :data:`DEFAULT_TIMEOUT`); UsageError when it is no
    number > 0."""
    raw = environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{TIMEOUT_ENV}={raw!r}: expected seconds (a number > 0)")
    return value


def progress_interval(timeout: float) -> float:
    """Seconds between two progress lines for a request given ``timeout`` seconds."""
    return min(PROGRESS_EVERY, timeout / 4)


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def waiting(label: str, waited: float, timeout: float) -> str:
    return (f"thub: gepa: waiting for {label}: no answer for {waited:.0f} s (gives up at {timeout:g} s, "
            f"{TIMEOUT_ENV})")


def _not_a_model_list(head: bytes, complete: bool) -> bool:
    """Whether ``GET /models``'s 2xx body is no OpenAI model list (``{"data": [...]}``); a body longer
    than :data:`PROBE_BODY` is judged by its first byte only."""
    if not complete:
        return not head.lstrip().startswith(b"{")
    try:
        value = json.loads(head)
    except (ValueError, RecursionError):
        return True
    return not (isinstance(value, dict) and isinstance(value.get("data"), list))


def probe(api_base: str, timeout: float | None = None, say: Callable[[str], None] = stderr) -> str | None:
    """None when ``api_base`` answers ``GET /models`` as an OpenAI-compatible server (any error status
    is a server too: a 401 or a 404), else why not, as the end of ``api_base '...': ...``. Waits at
    most ``timeout`` seconds (default :data:`PROBE_TIMEOUT`, or :func:`timeout_setting` when shorter),
    saying so while it waits."""
    timeout = min(timeout_setting(), PROBE_TIMEOUT) if timeout is None else timeout
    url = api_base.rstrip("/") + "/models"
    outcome: dict[str, Any] = {}

    def fetch() -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - the user's http(s) URL
                head = response.read(PROBE_BODY + 1)
                outcome["answer"] = (response.status, head[:PROBE_BODY], len(head) <= PROBE_BODY)
        except urllib.error.HTTPError as exc:
            outcome["answer"] = (exc.code, b"", True)
        except http.client.HTTPException as exc:  # a status line that is no HTTP, a connection closed unanswered
            outcome["why"] = f"answers, but not HTTP ({type(exc).__name__}: {str(exc).strip()[:80]!r})"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            outcome["why"] = f"nothing answers there ({getattr(exc, 'reason', exc)}); start the OpenAI-compatible " \
                             "server first or fix the URL"

    # a thread, so that a server trickling bytes (each read within the socket's timeout) is bounded too
    thread = threading.Thread(target=fetch, name="thub-gepa-probe", daemon=True)
    start = time.monotonic()
    thread.start()
    every, said = progress_interval(timeout), False
    while thread.is_alive():
        waited = time.monotonic() - start
        if waited >= timeout:
            if not said:
                say(waiting(f"GET {url}", waited, timeout))
            return f"no answer within {timeout:g} s ({TIMEOUT_ENV}); is the server busy or stuck?"
        thread.join(min(every, timeout - waited))
        if thread.is_alive() and time.monotonic() - start < timeout:
            say(waiting(f"GET {url}", time.monotonic() - start, timeout))
            said = True
    if "why" in outcome:
        return str(outcome["why"])
    status, head, complete = outcome["answer"]
    if 200 <= status < 300 and _not_a_model_list(head, complete):
        return (f"GET /models answered {status} with something that is not an OpenAI model list "
                f"({head[:60]!r}); is this an OpenAI-compatible endpoint (its base URL usually ends in /v1)?")
    return None
