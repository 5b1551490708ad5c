"""The parent-side tracker sink never holds up the supervisor: a tracking store that does not answer
(a real MLflow client talking to a socket that accepts and then says nothing) is written from a
worker thread; the lines reach every other tracker, the failure is reported once, and the run's
status is untouched."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

LOSSES = [2.5, 1.75, 1.25, 0.8125]


class SilentServer:
    """Accepts connections and answers nothing until released; then drops them (a hung store)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.released = threading.Event()
        self.accepted = threading.Event()
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.released.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)
            self.accepted.set()

    def release(self) -> None:
        self.released.set()
        for conn in self.connections:
            conn.close()
        self.sock.close()


@pytest.mark.slow
def test_an_unanswering_store_does_not_block_logging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from thub.testing import trackers
    from thub.trackers.sink import ParentSink

    server = SilentServer()
    # long enough that a blocking sink is still waiting when the test gives up on it; no retries,
    # so that once released the client fails at once
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    values = {"ckpt_output_dir": str(run_dir), "tensorboard_log_dir": str(tmp_path / "tb"),
              "mlflow_tracking_uri": f"http://127.0.0.1:{server.port}"}
    record = {"algorithm": "sft", "backend": "echo",
              "parameters": {k: {"value": v, "source": "flag"} for k, v in values.items()}}

    holder: dict[str, ParentSink] = {}

    def supervisor_side() -> None:  # what the supervisor's poll loop does: open, then one call per line
        sink = ParentSink(str(run_dir), record, ["tensorboard", "mlflow"], resume=False)
        for step, loss in enumerate(LOSSES, 1):
            sink.log({"step": step, "loss": loss, "timestamp": 1.0e9 + step})
        holder["sink"] = sink

    poll_loop = threading.Thread(target=supervisor_side, daemon=True)
    poll_loop.start()
    poll_loop.join(timeout=30)  # a fail-safe, not a timing assertion: the store has not answered at all yet
    try:
        assert not poll_loop.is_alive(), "the sink blocked the poll loop while the MLflow store did not answer"
        assert server.accepted.wait(timeout=60), "the MLflow client never reached the store"
    finally:
        server.release()  # now the store drops its connections: the MLflow writer fails
    sink = holder["sink"]
    for step in (5, 6):
        sink.log({"step": step, "loss": 0.5, "timestamp": 1.0e9 + step})
    sink.close("succeeded")

    # TensorBoard got every line although MLflow was stuck, then failed
    assert trackers.tensorboard_scalars(tmp_path / "tb") == pytest.approx(
        {**dict(enumerate(LOSSES, 1)), 5: 0.5, 6: 0.5}, rel=1e-6)
    err = capsys.readouterr().err
    assert err.count("thub: WARNING: MLflow") == 1, err
    assert "TensorBoard" not in err, err


def test_a_writer_that_fails_while_logging_is_reported_once_and_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Queue, flush at close, one warning: a writer whose log raises (no tracker package needed)."""
    from thub.trackers import sink as sink_module

    logged: list[int] = []

    class Flaky:
        def __init__(self, *_: object) -> None:
            pass

        def log(self, step: int, metrics: dict[str, float], wall_time: float | None = None) -> None:
            logged.append(step)
            if step >= 3:
                raise ConnectionError("store went away")

        def close(self, status: str) -> None:
            logged.append(-1)

        def info(self) -> dict[str, str]:
            return {"path": "nowhere"}

    monkeypatch.setattr(sink_module, "open_writer", lambda *args: Flaky())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sink = sink_module.ParentSink(str(run_dir), {"parameters": {"ckpt_output_dir": {"value": str(run_dir)}}},
                                  ["tensorboard"], resume=False)
    for step in range(1, 7):
        sink.log({"step": step, "loss": 1.0})
    sink.close("succeeded")
    assert logged == [1, 2, 3]  # dropped after its first failure: no retries, no close of a broken run
    err = capsys.readouterr().err
    assert err.count("ConnectionError: store went away") == 1, err


def test_trackers_opening_together_keep_each_others_entry(tmp_path: Path) -> None:
    """Each parent-sink tracker records itself in trackers.json from its own thread: updates made at
    the same moment (a barrier releases 16 at once) must not drop one another (16 entries)."""
    from thub.trackers import read_record, update_record

    barrier = threading.Barrier(16)

    def record(i: int) -> None:
        barrier.wait()
        update_record(tmp_path, f"tracker{i}", {"route": "thub", "path": str(i)})

    threads = [threading.Thread(target=record, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(read_record(tmp_path)) == sorted(f"tracker{i}" for i in range(16))
