"""Trust at the boundary (issue 35 items 9 and 10): a shared local MLflow store lets runs start
together, and hostile inputs at thub's own edges (a Training Hub JSON flag nested 40,000 deep,
preflight checks on a machine too slow for their budget) end in a bounded, typed answer.

No test here depends on wall-clock timing: order and overlap are observed through files the
processes write (markers, a barrier) and the waits are hang guards with a clear message."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: how long a process may wait for the others or for a marker before the test calls it a hang
#: (a guard against a deadlock, never a timing assertion: a busy machine only makes it slower)
HANG_GUARD = float(os.environ.get("THUB_TEST_HANG_GUARD", "300"))

#: one run on the store: prepare it as ``thub train`` does before a launch, open the MLflow run as
#: the parent's tracker does, say so (started-N), wait for every other run to have started (the
#: barrier), then log and finish. A run that held the store's lock across its start would keep the
#: others from starting: the barrier never fills and every process gives up with exit code 3.
RUN = r"""
import sys, time
from pathlib import Path
from thub_builtins.trackers_mlflow import MlflowWriter
from thub_builtins.trackers_mlflow_store import prepare_store

uri, folder, index, total, guard = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
params = {"mlflow_tracking_uri": uri, "mlflow_experiment_name": "together", "ckpt_output_dir": f"run{index}"}
(folder / f"opening-{index}").write_text("")
prepare_store(params, None)
writer = MlflowWriter(params, {"algorithm": "sft", "backend": "trl", "parameters": {}})
(folder / f"started-{index}").write_text(writer.run_id)
deadline = time.monotonic() + guard
while len(list(folder.glob("started-*"))) < total:
    if time.monotonic() > deadline:
        print(f"run {index}: only {len(list(folder.glob('started-*')))} of {total} runs started", file=sys.stderr)
        sys.exit(3)
    time.sleep(0.05)
writer.log(1, {"loss": 1.0})
writer.close("succeeded")
"""


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "MLFLOW_"))}


def _start_runs(uri: str, folder: Path, total: int) -> list[subprocess.Popen[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([sys.executable, "-c", RUN, uri, str(folder), str(i), str(total), str(HANG_GUARD)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environ(), cwd=ROOT)
            for i in range(total)]


def _finish(runs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    outcomes = []
    for run in runs:
        try:
            _out, err = run.communicate(timeout=HANG_GUARD * 2)
        except subprocess.TimeoutExpired:
            run.kill()
            _out, err = run.communicate()
        outcomes.append((run.returncode, err))
    return outcomes


def _check_store(uri: str, database: Path, count: int) -> None:
    """The store is a valid SQLite file at MLflow's schema holding ``count`` finished runs in
    ``together``, and it still takes a new run."""
    from mlflow import MlflowClient

    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    client = MlflowClient(tracking_uri=uri)  # opens the store: MLflow verifies its schema
    experiment = client.get_experiment_by_name("together")
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id])
    assert len(found) == count and {run.info.status for run in found} == {"FINISHED"}, found
    assert {run.data.metrics.get("loss") for run in found} == {1.0}
    later = client.create_run(experiment.experiment_id)
    client.log_metric(later.info.run_id, "x", 1.0)
    assert client.get_run(later.info.run_id).data.metrics == {"x": 1.0}


@pytest.mark.needs_module("mlflow")
def test_five_runs_on_one_fresh_store_start_together(tmp_path: Path) -> None:
    """Five processes open runs on one new store at once: the first creates it, and every run is
    open at the same moment (the barrier fills), so none held the lock across its run."""
    database = tmp_path / "store" / "mlflow.db"
    uri = f"sqlite:///{database}"
    outcomes = _finish(_start_runs(uri, tmp_path / "events", 5))
    assert [code for code, _ in outcomes] == [0] * 5, [err[-2000:] for code, err in outcomes if code]
    _check_store(uri, database, 5)


@pytest.mark.needs_module("mlflow")
def test_runs_on_a_ready_store_never_wait_for_its_lock(tmp_path: Path) -> None:
    """The lock is for creating and migrating the store only: with the store ready, five runs all
    start and finish while another process holds the lock (they waited for it before)."""
    from thub_builtins.trackers_mlflow_store import initialise

    database = tmp_path / "store" / "mlflow.db"
    uri = f"sqlite:///{database}"
    initialise(uri, "together")
    events = tmp_path / "events"
    with open(database.with_name("mlflow.db.lock"), "a") as held:  # docs/trackers.md: DB.lock
        fcntl.flock(held, fcntl.LOCK_EX)
        runs = _start_runs(uri, events, 5)
        try:
            deadline = time.monotonic() + HANG_GUARD
            while len(list(events.glob("started-*"))) < 5 and any(run.poll() is None for run in runs):
                assert time.monotonic() < deadline, (
                    f"{len(list(events.glob('started-*')))} of 5 runs started in {HANG_GUARD:.0f} s while another "
                    "process held the lock of a store that was ready: the runs wait for the lock")
                time.sleep(0.05)
        except BaseException:
            for run in runs:
                run.kill()
            raise
        outcomes = _finish(runs)
        assert [code for code, _ in outcomes] == [0] * 5, [err[-1000:] for code, err in outcomes if code]
    assert len(list(events.glob("started-*"))) == 5
    assert not any("waiting for the MLflow store lock" in err for _, err in outcomes)
    _check_store(uri, database, 5)


@pytest.mark.needs_module("mlflow")
def test_a_run_that_waits_for_the_store_lock_says_so_once(tmp_path: Path) -> None:
    """While the store is being created (the test holds the lock, as the creating process does), a
    run on it waits and says once on stderr whose lock it waits for; once the lock is free it
    finds the store made by the holder and starts."""
    from thub_builtins.trackers_mlflow import ensure_experiment

    database = tmp_path / "store" / "mlflow.db"
    database.parent.mkdir(parents=True)
    uri = f"sqlite:///{database}"
    events = tmp_path / "events"
    events.mkdir()
    err_path = tmp_path / "waiter.err"
    with open(database.with_name("mlflow.db.lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"{os.getpid()} pytest creating the store\n")  # the holder's note: PID COMMAND
        held.flush()
        with open(err_path, "w") as err_file:
            waiter = subprocess.Popen([sys.executable, "-c", RUN, uri, str(events), "0", "1", str(HANG_GUARD)],
                                      stdout=subprocess.DEVNULL, stderr=err_file, text=True, env=_environ(),
                                      cwd=ROOT)
        try:
            deadline = time.monotonic() + HANG_GUARD
            while "waiting for the MLflow store lock" not in err_path.read_text():
                assert waiter.poll() is None, f"the run ended without waiting: {err_path.read_text()[-2000:]}"
                assert time.monotonic() < deadline, (
                    f"no waiting message on stderr after {HANG_GUARD:.0f} s: {err_path.read_text()[-2000:]}")
                time.sleep(0.05)
            assert not list(events.glob("started-*"))  # still waiting: the store is not there yet
            ensure_experiment(uri, "together")  # what the holder does under the lock
        except BaseException:
            waiter.kill()
            raise
    assert waiter.wait(timeout=HANG_GUARD) == 0, err_path.read_text()[-2000:]
    text = err_path.read_text()
    line = next(line for line in text.splitlines() if "waiting for the MLflow store lock" in line)
    assert f"pid {os.getpid()} (pytest creating the store)" in line and str(database) in line, line
    assert text.count("waiting for the MLflow store lock") == 1, text
    _check_store(uri, database, 1)


def _thub(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=_environ(),
                          cwd=cwd, timeout=HANG_GUARD)


DEEP = "[" * 100_000


def test_eval_of_a_run_folder_whose_record_is_nested_too_deeply(tmp_path: Path) -> None:
    """A run folder from anywhere: its ``thub_run.json`` nested 100,000 deep is a located exit 2."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "thub_run.json").write_text(DEEP)
    task = tmp_path / "t.jsonl"
    task.write_text('{"prompt": "q", "answer": "a"}\n')
    done = _thub("eval", str(run), "--tasks", str(task))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"{run / 'thub_run.json'}: unreadable (nested too deeply" in done.stderr, done.stderr[-3000:]


def test_eval_option_nested_too_deeply(tiny_model: Path, tmp_path: Path) -> None:
    task = tmp_path / "t.jsonl"
    task.write_text('{"prompt": "q", "answer": "a"}\n')
    done = _thub("eval", str(tiny_model), "--tasks", str(task), "--out", str(tmp_path / "out"),
                 "--option", f"limit_depth={DEEP}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "--option limit_depth: the value is nested too deeply" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("depth", [150, 40_000])
def test_a_training_hub_json_flag_nested_too_deeply_names_the_flag(depth: int, tmp_path: Path) -> None:
    """``thub osft --lr-scheduler-kwargs '[[[[...'`` (Training Hub's command line): exit 2 naming the
    flag, as deep as a YAML config file may nest (100 levels), never a RecursionError."""
    value = "[" * depth + "]" * depth
    done = _thub("osft", "--model-path", str(tmp_path / "model"), "--data-path", str(tmp_path / "d.jsonl"),
                 "--ckpt-output-dir", str(tmp_path / "out"), "--unfreeze-rank-ratio", "0.5",
                 "--effective-batch-size", "2", "--max-tokens-per-gpu", "100", "--max-seq-len", "64",
                 "--learning-rate", "1e-5", "--lr-scheduler-kwargs", value, "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "--lr-scheduler-kwargs: expected JSON nested at most 100 levels deep" in done.stderr, done.stderr[-2000:]
    assert "RecursionError" not in done.stderr


class _SlowPreflight:
    """A plugin with a preflight check that does not finish until the test lets it (what a check does
    on a machine too loaded to run it in time), and a quick one."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    @property
    def hooks(self) -> object:
        from thub import hookimpl
        from thub.specs import CheckResult, CheckSpec

        release = self.release

        class Plugin:
            @hookimpl
            def thub_register_checks(self, register):  # type: ignore[no-untyped-def]
                register(CheckSpec("slow.probe", "Probes slowly", lambda c: (release.wait(HANG_GUARD),
                                                                              CheckResult("ok", "late"))[1],
                                   tags=frozenset({"preflight"}), timeout=0.3))
                register(CheckSpec("slow.quick", "Quick", lambda c: CheckResult("ok", "fine"),
                                   tags=frozenset({"preflight"})))

        return Plugin()


def test_a_preflight_check_past_its_budget_is_a_note_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before every run: a check that does not finish within its budget is ``skipped: slow machine``,
    a plain note; nothing red, nothing blocking."""
    from thub.doctor import blocking, format_problems, preflight
    from thub.manager import load_registry

    slow = _SlowPreflight()
    registry = load_registry(extra_plugins=[("slowplugin", slow.hooks)])
    monkeypatch.setenv("THUB_PREFLIGHT_TIMEOUT", "0.3")  # the budget forced small: no loaded machine needed
    try:
        outcomes = {o.id: o for o in preflight(None, None, registry=registry)}
    finally:
        slow.release.set()
    probe = outcomes["slow.probe"]
    assert probe.status == "skip" and probe.result.summary.startswith("skipped: slow machine"), probe.result
    assert "0.3 s" in probe.result.summary
    assert outcomes["slow.quick"].status == "ok"
    assert not blocking(list(outcomes.values()))
    text = format_problems(list(outcomes.values()))
    assert "slow.probe: skipped: slow machine" in text and "✗" not in text and "timed out" not in text, text


def test_every_real_preflight_check_with_no_time_at_all_is_never_an_error(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    from thub.doctor import preflight

    monkeypatch.setenv("THUB_PREFLIGHT_TIMEOUT", "0")
    outcomes = preflight("trl", str(tmp_path / "run"))
    assert outcomes and not [o for o in outcomes if o.status == "error"], [
        (o.id, o.result.summary) for o in outcomes if o.status == "error"]


@pytest.mark.parametrize(("load", "cores", "scale"), [(0.5, 4, 1.0), (0.0, 1, 1.0), (8.0, 2, 4.0), (400.0, 2, 8.0)])
def test_the_preflight_budget_grows_with_the_load(load: float, cores: int, scale: float) -> None:
    from thub.doctor import load_scale

    assert load_scale(load, cores) == scale


def test_a_bad_preflight_budget_setting_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from thub.doctor import preflight
    from thub.errors import UsageError

    monkeypatch.setenv("THUB_PREFLIGHT_TIMEOUT", "fast")
    with pytest.raises(UsageError, match="THUB_PREFLIGHT_TIMEOUT='fast': expected seconds"):
        preflight(None, None)


@pytest.mark.needs_module("mlflow")
def test_the_waiting_line_of_a_backends_interpreter_is_relayed_as_it_comes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow only in the backend's interpreter: the store is made there, and its waiting line reaches
    thub's stderr while it waits (not after)."""
    import io
    import threading

    from thub_builtins.trackers_mlflow_store import _run_elsewhere

    database = tmp_path / "store" / "mlflow.db"
    database.parent.mkdir(parents=True)
    uri = f"sqlite:///{database}"
    relayed = io.StringIO()
    monkeypatch.setattr(sys, "stderr", relayed)
    with open(database.with_name("mlflow.db.lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"{os.getpid()} pytest\n")
        held.flush()
        worker = threading.Thread(target=_run_elsewhere, args=(sys.executable, uri, "together"), daemon=True)
        worker.start()
        deadline = time.monotonic() + HANG_GUARD
        while "waiting for the MLflow store lock" not in relayed.getvalue():
            assert worker.is_alive() and time.monotonic() < deadline, relayed.getvalue()
            time.sleep(0.05)
    worker.join(HANG_GUARD)
    assert not worker.is_alive()
    assert f"held by pid {os.getpid()} (pytest)" in relayed.getvalue()
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT name FROM experiments WHERE name = 'together'").fetchone()
