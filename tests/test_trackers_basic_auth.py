"""An MLflow tracking URI with ``user:password@host`` (issue 23 item 8): MLflow itself sends the
URI's credentials as HTTP basic auth (``requests`` takes them from the URL), so thub's health
check must reach such a server the same way, never hand the credentials to ``urlopen`` as part of
the host name. The server is a real local HTTP server that answers only with the right credentials.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from thub.trackers.check import problems

USER, PASSWORD = "alice", "s3cr:t@pw"  # ':' and '@' in the password: percent-encoded in the URI
QUOTED = "s3cr%3At%40pw"


class _BasicAuth(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        header = self.headers.get("Authorization")
        type(self).seen.append(header)
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        self.send_response(200 if header == expected else 401)
        if header != expected:
            self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
        self.end_headers()
        self.wfile.write(b"OK" if header == expected else b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    _BasicAuth.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _BasicAuth)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _params(tmp_path: Path, uri: str) -> dict[str, str]:
    return {"ckpt_output_dir": str(tmp_path / "run"), "mlflow_tracking_uri": uri}


@pytest.mark.needs_module("mlflow")
def test_mlflow_itself_sends_the_uris_credentials_as_basic_auth(server: int) -> None:
    """What thub must agree with: MLflow's own REST client on the same URI is let in."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    response = http_request(get_default_host_creds(f"http://{USER}:{QUOTED}@127.0.0.1:{server}"), "/health", "GET",
                            max_retries=0)
    assert response.status_code == 200


@pytest.mark.needs_module("mlflow")
def test_a_uri_with_credentials_is_reachable_and_they_are_sent(server: int, tmp_path: Path) -> None:
    uri = f"http://{USER}:{QUOTED}@127.0.0.1:{server}"
    assert problems(_params(tmp_path, uri), None, None, environ={}) == []
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert _BasicAuth.seen == [expected]  # one request, the credentials decoded as MLflow decodes them


@pytest.mark.needs_module("mlflow")
def test_refused_credentials_are_named_without_the_password(server: int, tmp_path: Path) -> None:
    found = problems(_params(tmp_path, f"http://{USER}:wrong@127.0.0.1:{server}"), None, None, environ={})
    assert len(found) == 1 and "refused the credentials" in found[0].summary and "401" in found[0].summary
    assert "wrong" not in found[0].summary and "<redacted>" in found[0].summary
    # no credentials at all: the server answered (authentication is then MLflow's environment's business)
    assert problems(_params(tmp_path, f"http://127.0.0.1:{server}"), None, None, environ={}) == []
