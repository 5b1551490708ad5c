"""Run safety (issue 13): no run is ever lost, mixed, orphaned or reported wrongly.

Real ``thub`` processes on the trl backend with the tiny local model, real signals, real
``kill -9``, a real 3 MiB tmpfs where this machine lets root mount one (an injected ENOSPC
otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from thub.runner.checkpoints import checkpoint_problem
from thub.runner.metrics import read_metrics

pytestmark = pytest.mark.slow

RESULT_FIELDS = ("status", "run_dir", "checkpoints", "last_metrics", "log", "final_checkpoint")


def _environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update(extra or {})
    return environ


ROOT = Path(__file__).resolve().parents[1]  # the working directory of every run (the demo config's paths)


def thub(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=_environ(env), timeout=timeout, cwd=ROOT)


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "thub", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_environ(env), cwd=ROOT)


def sft(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "sft", "--backend", "trl", "--model-path", str(model), "--data-path", str(data / "chat.jsonl"),
            "--ckpt-output-dir", str(out), *extra]


LONG = ("--max-steps", "5000", "--effective-batch-size", "2")  # stopped early by every test that uses it


def wait_for_steps(out: Path, steps: int, process: subprocess.Popen[str], timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(read_metrics(out / "training_metrics.jsonl")) >= steps:
            return
        if process.poll() is not None:
            raise AssertionError(f"run ended early: {process.communicate()}")
        time.sleep(0.05)
    raise AssertionError("no progress")


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and not _is_log_sink(entry):
                found.append(int(entry.name))
    return found


def _is_log_sink(entry: Path) -> bool:
    """thub's log sink (thub.runner.logsink) ends with the child's output, not with thub."""
    try:
        return b"thub.runner.logsink" in (entry / "cmdline").read_bytes()
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int, timeout: float = 90) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def result_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text())


def child_site(tmp_path: Path, code: str) -> dict[str, str]:
    """A sitecustomize that runs ``code`` only in the training child (it has THUB_RUN_DIR)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import os\nif os.environ.get('THUB_RUN_DIR'):\n"
                                           + textwrap.indent(textwrap.dedent(code), "    "))
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


# item 1: divergence ---------------------------------------------------------------------------

def test_divergence_stops_the_run_as_failed(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    # a learning rate of 1e30 makes the gradient norm NaN from step 2 on (the loss logs as 0)
    out = tmp_path / "diverged"
    done = thub(*sft(tiny_model, demo_data, out, "--max-steps", "40", "--learning-rate", "1e30",
                     "--divergence-steps", "2"))
    assert done.returncode == 1, done.stderr
    result = result_of(out)
    assert result["status"] == "failed"
    assert result["error"].startswith("diverged at step 2:"), result["error"]
    assert "grad_norm" in result["error"] and "2 consecutive" in result["error"]
    lines = read_metrics(out / "training_metrics.jsonl")
    assert len(lines) < 40 and "grad_norm" in lines[1].get("non_finite", []), lines
    assert "diverged at step 2" in done.stderr and "Traceback" not in done.stderr


# items 2 and 3: one live run per directory; the child dies with its parent ----------------------

def test_live_run_holds_its_directory_and_its_child_dies_with_it(tiny_model: Path, demo_data: Path,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "live"
    first = start(*sft(tiny_model, demo_data, out, *LONG))
    children: list[int] = []
    try:
        wait_for_steps(out, 3, first)
        record = (out / "thub_run.json").read_text()
        for flags in ((), ("--overwrite",), ("--resume",)):
            second = thub(*sft(tiny_model, demo_data, out, "--max-steps", "1", *flags))
            assert second.returncode == 2, (flags, second.stderr)
            assert f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr, second.stderr
        assert (out / "thub_run.json").read_text() == record  # nothing deleted or rewritten
        steps = [line["step"] for line in read_metrics(out / "training_metrics.jsonl")]
        assert steps == list(range(1, len(steps) + 1))  # one writer, no interleaving

        children = children_of(first.pid)
        assert len(children) == 1
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert wait_gone(children[0]), "the training child outlived thub"
    finally:
        for pid in [first.pid, *children]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        first.wait(10)
    result = result_of(out)
    assert result["status"] in ("interrupted", "failed")
    assert all(field in result for field in RESULT_FIELDS), result
    assert result["last_metrics"]["step"] >= 3 and result["run_dir"] == str(out)
    assert "thub parent process" in result["reason"]


def test_plugin_raising_systemexit_or_keyboardinterrupt_does_not_kill_the_supervisor(
        tiny_model: Path, demo_data: Path, tmp_path: Path, thub_plugin: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    from thub import api, hookimpl

    class Hostile:
        @hookimpl
        def thub_on_event(self, event: Any) -> None:
            if event.kind == "metrics":
                raise SystemExit(3)
            if event.kind == "checkpoint":
                raise KeyboardInterrupt

    thub_plugin(("hostile", Hostile()))
    out = tmp_path / "hostile"
    result = api.train("sft", backend="trl", model_path=str(tiny_model), data_path=str(demo_data / "chat.jsonl"),
                       ckpt_output_dir=str(out), max_steps=2)
    assert result["status"] == "succeeded", result
    assert result_of(out)["status"] == "succeeded"
    err = capsys.readouterr().err
    assert "event hook of hostile failed: raised SystemExit(3)" in err
    assert "event hook of hostile failed: raised KeyboardInterrupt" in err


# item 4: resume only from a complete checkpoint -----------------------------------------------

def _as_unfinished(out: Path) -> None:
    """Make a finished run look like one that was killed (no result.json)."""
    (out / "result.json").unlink()


def test_resume_falls_back_to_the_newest_complete_checkpoint(tiny_model: Path, demo_data: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "halfsaved"
    args = sft(tiny_model, demo_data, out, "--max-steps", "4", "--save-steps", "2", "--no-save-final-checkpoint")
    assert thub(*args).returncode == 0
    _as_unfinished(out)
    checkpoints = out / "checkpoints"
    # killed mid-save: weights cut short, and a foreign folder that only looks like a checkpoint
    weights = checkpoints / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (checkpoints / "checkpoint-9").mkdir()
    (checkpoints / "checkpoint-9" / "notes.txt").write_text("not a checkpoint")
    resumed = thub(*args[:-1], "--max-steps", "6", "--resume")  # saving the final model again
    assert resumed.returncode == 0, resumed.stderr
    assert "checkpoint-9" in resumed.stderr and "checkpoint-4" in resumed.stderr
    assert "resuming from" in resumed.stderr and "checkpoint-2" in resumed.stderr
    record = json.loads((out / "thub_run.json").read_text())
    assert record["resume_from"] == str(checkpoints / "checkpoint-2")
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_resume_without_checkpoint_drops_the_earlier_metrics(tiny_model: Path, demo_data: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "nockpt"
    args = sft(tiny_model, demo_data, out, "--max-steps", "3", "--no-save-final-checkpoint")
    assert thub(*args).returncode == 0
    _as_unfinished(out)
    import shutil

    shutil.rmtree(out / "checkpoints")
    resumed = thub(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2, 3]


# item 5: never touch what thub did not create ------------------------------------------------

def test_a_foreign_directory_is_refused_whatever_the_flags(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "precious.bin").write_text("user data")
    (out / "notes.txt").write_text("mine")
    for flags in ((), ("--overwrite",), ("--resume",)):
        done = thub(*sft(tiny_model, demo_data, out, "--max-steps", "1", *flags))
        assert done.returncode == 2, (flags, done.stderr)
        assert "not a thub run directory" in done.stderr and "notes.txt" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "notes.txt"]
    assert (out / "checkpoints" / "precious.bin").read_text() == "user data"


def test_overwrite_removes_only_what_the_run_created(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert thub(*sft(tiny_model, demo_data, out, "--max-steps", "1")).returncode == 0
    assert (out / "final").is_dir()
    (out / "my_eval").mkdir()
    (out / "my_eval" / "scores.txt").write_text("0.9")
    (out / "README.txt").write_text("notes")
    again = thub(*sft(tiny_model, demo_data, out, "--max-steps", "1", "--no-save-final-checkpoint", "--overwrite"))
    assert again.returncode == 0, again.stderr
    assert not (out / "final").exists()  # the old run's model is not passed off as this run's
    assert (out / "my_eval" / "scores.txt").read_text() == "0.9" and (out / "README.txt").exists()
    assert len(read_metrics(out / "training_metrics.jsonl")) == 1


# item 6: disk full ---------------------------------------------------------------------------

def _small_filesystem(path: Path) -> bool:
    path.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_disk_full_is_one_line_root_cause_of_this_attempt(disk: str, tiny_model: Path, demo_data: Path,
                                                          tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mounted = disk == "tmpfs" and _small_filesystem(mount)
    if disk == "tmpfs" and not mounted:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission); the injected case runs")
    env = {}
    if not mounted:  # the checkpoint writes fail with a real OSError(ENOSPC) raised in the child
        env = child_site(tmp_path, """
            import builtins, errno
            _open = builtins.open
            def _full(file, mode="r", *a, **k):
                if "checkpoint-" in str(file) and any(m in mode for m in "wax"):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
                return _open(file, mode, *a, **k)
            builtins.open = _full
        """)
    out = mount / "run"
    try:
        # an earlier attempt's traceback in the same log must not be taken for this attempt's cause
        (out / "logs").mkdir(parents=True)
        (out / "thub_run.json").write_text("{}")
        (out / "logs" / "train.log").write_text(
            "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: the earlier attempt\n")
        done = thub(*sft(tiny_model, demo_data, out, "--max-steps", "6", "--save-steps", "1", "--resume",
                         "--force-launch"), env=env)
        assert done.returncode == 1, done.stderr
        result = result_of(out)
        assert result["status"] == "failed"
        assert "No space left on device" in result["error"] and "\n" not in result["error"], result["error"]
        assert "earlier attempt" not in json.dumps(result["root_cause"])
        assert "Traceback" not in done.stderr and "No space left on device" in done.stderr
        assert all(field in result for field in RESULT_FIELDS)
        # the half-written checkpoint is gone (it made room for result.json); complete ones stay
        assert all(checkpoint_problem(path) is None for path in out.glob("checkpoints/checkpoint-*"))
        assert not list(out.glob(".result.json.*"))
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=False)


# item 7: signals -----------------------------------------------------------------------------

def test_two_signals_in_one_poll_interval_stop_at_once(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "twice"
    process = start(*sft(tiny_model, demo_data, out, *LONG))
    wait_for_steps(out, 3, process)
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)  # two deliveries (back to back, the kernel would merge them into one), 50 ms apart
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    result = result_of(out)
    assert result["status"] == "interrupted" and "second signal (SIGINT)" in result["reason"], result
    assert result["final_checkpoint"] is None and "second signal" in err
    assert all(field in result for field in RESULT_FIELDS)


def test_second_signal_stops_a_child_deaf_to_the_first(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    # a trainer that ignores SIGTERM (stuck in a collective, or a library that swallows it)
    env = child_site(tmp_path, """
        import signal
        import thub.runner.context as _context
        _context.RunContext.install_signal_handlers = lambda self: signal.signal(signal.SIGTERM, signal.SIG_IGN)
    """)
    out = tmp_path / "deaf"
    process = start(*sft(tiny_model, demo_data, out, *LONG), env=env)
    wait_for_steps(out, 3, process)
    process.send_signal(signal.SIGINT)
    time.sleep(1)  # the first one was forwarded and ignored
    assert process.poll() is None
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    result = result_of(out)
    assert result["status"] == "interrupted", result
    assert "second signal" in result["reason"] and "{" not in result.get("error", "")
    assert "root cause" not in err


def test_sigterm_after_the_final_save_keeps_succeeded(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    # the signal arrives once the last step and the final save are done, before the child exits
    env = child_site(tmp_path, """
        import signal, time
        import thub.runner.context as _context
        _report = _context.RunContext.checkpoint
        def checkpoint(self, path, step):
            _report(self, path, step)
            if str(path).endswith("final"):
                os.kill(os.getppid(), signal.SIGTERM)
                time.sleep(2)  # the parent forwards it to us within a poll interval
        _context.RunContext.checkpoint = checkpoint
    """)
    out = tmp_path / "late"
    done = thub(*sft(tiny_model, demo_data, out, "--max-steps", "2"), env=env)
    assert done.returncode == 0, done.stderr
    result = result_of(out)
    assert result["status"] == "succeeded" and result["final_checkpoint"] == str(out / "final")


# issue 24 item 4: a signal during start-up stops at once; item 5: --resume says what it does ---

def demo(model: Path, out: Path, *extra: str) -> list[str]:
    """The README's demo run (examples/configs/sft.yaml) into ``out``."""
    return ["train", "sft", "--backend", "trl", "--config", str(ROOT / "examples" / "configs" / "sft.yaml"),
            "--model-path", str(model), "--ckpt-output-dir", str(out), *extra]


def wait_for_log(out: Path, text: str, process: subprocess.Popen[str], count: int = 1) -> None:
    """Until ``text`` appears ``count`` times in the run's log (the phase the run is in)."""
    deadline = time.time() + 300  # a hang guard, not a timing assert
    log = out / "logs" / "train.log"
    while time.time() < deadline:
        if log.exists() and log.read_text(errors="replace").count(text) >= count:
            return
        if process.poll() is not None:
            raise AssertionError(f"run ended early: {process.communicate()}")
        time.sleep(0.02)
    raise AssertionError(f"{text!r} never appeared in {log}")


def signal_in_phase(process: subprocess.Popen[str], out: Path, phase: str, signum: int, count: int = 1) -> str:
    """Send ``signum`` once ``phase`` is in the log (``count`` times) and no step is logged yet;
    the run exits 130. Returns its stderr."""
    try:
        wait_for_log(out, phase, process, count)
        steps = [line["step"] for line in read_metrics(out / "training_metrics.jsonl")]
        process.send_signal(signum)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == steps  # no step since
    return err


def lock_free(out: Path) -> bool:
    import fcntl

    from thub.runner.lock import LOCK_NAME

    with open(out / LOCK_NAME, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def assert_stopped_cleanly(out: Path, err: str) -> dict[str, Any]:
    """interrupted, complete, nothing half-written, the directory free for the next command."""
    result = result_of(out)
    assert result["status"] == "interrupted", result
    assert all(field in result for field in RESULT_FIELDS), result
    assert "Aborted!" not in err and "Traceback" not in err and "root cause" not in err, err
    assert all(checkpoint_problem(path) is None for path in out.glob("checkpoints/checkpoint-*"))
    assert not list(out.glob(".*.json.*"))  # no temporary file of an atomic write left
    assert lock_free(out)
    return result


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_options_are_read_exits_130(signum: int, tiny_model: Path, tmp_path: Path) -> None:
    # the config file is a FIFO: thub is certainly reading its options when the signal arrives
    config = tmp_path / "config.yaml"
    os.mkfifo(config)
    out = tmp_path / "never"
    process = start("train", "sft", "--backend", "trl", "--config", str(config), "--model-path", str(tiny_model),
                    "--ckpt-output-dir", str(out))
    writer = -1
    try:
        while writer < 0:  # opening the write end succeeds once thub has opened the FIFO to read it
            try:
                writer = os.open(config, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                assert process.poll() is None, process.communicate()
                time.sleep(0.02)
        process.send_signal(signum)
        _out, err = process.communicate(timeout=120)
    finally:
        if writer >= 0:
            os.close(writer)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "Aborted!" not in err and "Traceback" not in err and "interrupted" in err, err
    assert not out.exists()


def test_a_signal_once_the_directory_is_prepared_stops_before_the_child(
        tiny_model: Path, demo_data: Path, tmp_path: Path, thub_plugin: Any) -> None:
    from thub import api, hookimpl

    class CtrlC:  # Ctrl-C at the moment the run directory is ready and the child about to start
        @hookimpl
        def thub_on_event(self, event: Any) -> None:
            if event.kind == "started":
                os.kill(os.getpid(), signal.SIGINT)

    thub_plugin(("ctrl-c", CtrlC()))
    out = tmp_path / "prepared"
    kwargs = {"backend": "trl", "model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl"),
              "ckpt_output_dir": str(out), "max_steps": 2}
    result = api.train("sft", **kwargs)  # type: ignore[arg-type]
    assert result["status"] == "interrupted", result
    assert "before the first training step" in result["reason"], result
    assert_stopped_cleanly(out, "")
    assert read_metrics(out / "training_metrics.jsonl") == []
    thub_plugin()  # without the Ctrl-C
    resumed = api.train("sft", resume=True, **kwargs)  # type: ignore[arg-type]
    assert resumed["status"] == "succeeded", resumed


@pytest.mark.parametrize(("phase", "signum"), [("thub child: starting", signal.SIGINT),
                                               ("Loading weights", signal.SIGTERM)])
def test_a_signal_while_the_child_starts_stops_at_once(phase: str, signum: int, tiny_model: Path,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "starting"
    # the child is importing its backend / loading the model
    err = signal_in_phase(start(*demo(tiny_model, out)), out, phase, signum)
    result = assert_stopped_cleanly(out, err)
    name = signal.Signals(signum).name
    assert result["reason"].startswith(f"stopped by {name} before the first training step"), result
    assert result["final_checkpoint"] is None and result["checkpoints"] == []
    assert read_metrics(out / "training_metrics.jsonl") == [] and not list(out.glob("checkpoints/checkpoint-*"))
    assert "continue with the same command and --resume" in err

    resumed = thub(*demo(tiny_model, out, "--max-steps", "2", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert "no complete checkpoint: starting from step 1" in resumed.stderr
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2]


def test_resume_says_where_it_starts_and_shows_kept_steps_as_kept(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept"
    first = thub(*demo(tiny_model, out, "--max-steps", "4", "--save-steps", "2", "--no-save-final-checkpoint"))
    assert first.returncode == 0, first.stderr
    _as_unfinished(out)
    import shutil

    shutil.rmtree(out / "checkpoints" / "checkpoint-4")  # the run was killed before its step-4 save
    # a Ctrl-C while the resumed child starts keeps checkpoint-2 and the kept steps as they were
    err = signal_in_phase(start(*demo(tiny_model, out, "--max-steps", "4", "--resume")), out,
                          "thub child: starting", signal.SIGINT, count=2)
    result = assert_stopped_cleanly(out, err)
    assert "resuming from checkpoint-2 (step 2 of 4)" in err and "kept steps 1-2" in err, err
    assert "checkpoint-2" in result["reason"] and checkpoint_problem(out / "checkpoints" / "checkpoint-2") is None
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2]

    resumed = thub(*demo(tiny_model, out, "--max-steps", "4", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    err = resumed.stderr
    assert "resuming from checkpoint-2 (step 2 of 4)" in err and "kept steps 1-2" in err, err
    assert "step 3/4" in err and "step 4/4" in err
    assert "step 1/4" not in err and "step 2/4" not in err, err  # kept steps are not shown as trained again
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2, 3, 4]
