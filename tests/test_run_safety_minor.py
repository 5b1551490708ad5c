"""Run safety, round 3, the minor items (issue 23 item 14): each with real files, processes and
signals: a truncated optimizer.pt, Ctrl-Z (SIGTSTP) of a live run, a diverged run's exit code, a
live run in ``history list``, the Kubeflow CA file, a read-only disk's fix, and the Training Hub
keyword nits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import thub
from thub.errors import UsageError
from thub.runner.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
DATA = str(ROOT / "examples" / "data" / "chat.jsonl")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=900)  # a hang guard


def _sft(model: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "sft", "--backend", "trl", "--model-path", str(model), "--data-path", DATA,
            "--ckpt-output-dir", str(out), *extra]


# a truncated optimizer.pt -------------------------------------------------------------------------

def test_a_truncated_optimizer_state_is_not_a_complete_checkpoint(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from thub.runner.checkpoints import checkpoint_problem

    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": []}))
    save_file({"w": torch.zeros(4, 4)}, str(checkpoint / "model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.zeros(256, 256)}}}, checkpoint / "optimizer.pt")
    torch.save({"last_epoch": 2}, checkpoint / "scheduler.pt")
    assert checkpoint_problem(checkpoint) is None
    data = (checkpoint / "optimizer.pt").read_bytes()
    (checkpoint / "optimizer.pt").write_bytes(data[: len(data) // 2])  # killed mid-save
    assert checkpoint_problem(checkpoint) == "optimizer.pt is unreadable or cut short"
    (checkpoint / "optimizer.pt").unlink()  # not saved at all (save_only_model): no problem of its own
    assert checkpoint_problem(checkpoint) is None


# Training Hub nits -------------------------------------------------------------------------------

def _plan(tmp_path: Path, **extra: object) -> dict[str, object]:
    return thub.dry_run("sft", backend="trl", model_path="m", data_path=DATA, ckpt_output_dir=str(tmp_path / "o"),
                        **extra)  # type: ignore[arg-type]


def test_training_hub_defaults_pairs_and_every_refused_keyword(tmp_path: Path) -> None:
    assert _plan(tmp_path, use_dolomite=False)  # Training Hub's default: changes nothing, accepted
    with pytest.raises(UsageError, match="use_dolomite"):
        _plan(tmp_path, use_dolomite=True)
    with pytest.raises(UsageError) as betas:
        _plan(tmp_path, adamw_betas=0.9)
    assert "adamw_betas=0.9" in str(betas.value) and "(beta1, beta2) pair" in str(betas.value)
    assert "unpack" not in str(betas.value)
    assert _plan(tmp_path, adamw_betas=(0.9, 0.95))["parameters"]["beta2"]["value"] == 0.95  # type: ignore[index]
    with pytest.raises(UsageError) as several:
        _plan(tmp_path, use_dolomite=True, chat_tmpl_path="t.jinja", adamw_betas=0.9)
    message = str(several.value)
    assert "use_dolomite" in message and "chat_tmpl_path" in message and "adamw_betas" in message, message
    with pytest.raises(UsageError) as unknown:
        _plan(tmp_path, lora_rank=2, no_such_name=1)
    assert "lora_rank" in str(unknown.value) and "no_such_name" in str(unknown.value)
    assert not (tmp_path / "o").exists()


def test_a_bool_is_not_an_integer(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as error:
        _plan(tmp_path, max_steps=True)
    assert "max_steps" in str(error.value) and "boolean" in str(error.value), error.value
    with pytest.raises(UsageError, match="learning_rate"):
        _plan(tmp_path, learning_rate=False)
    plan = _plan(tmp_path, max_steps=1, packing=True)  # a bool field still takes a bool
    assert plan["parameters"]["max_steps"]["value"] == 1  # type: ignore[index]


# the Kubeflow CA file ----------------------------------------------------------------------------

def test_a_missing_kubeflow_ca_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from thub_builtins.kubeflow import StatusReporter

    missing = tmp_path / "no-such" / "ca.crt"
    reporter = StatusReporter("https://127.0.0.1:9/status", str(missing), None, interval=0, timeout=2)
    assert reporter.post({"progressPercentage": 1}) is False
    err = capsys.readouterr().err
    assert str(missing) in err and "CA certificate" in err, err


# a read-only disk --------------------------------------------------------------------------------

def test_a_read_only_disk_is_not_fixed_with_chown(tmp_path: Path) -> None:
    from thub.specs import CheckContext
    from thub_builtins.checks.storage import check_output_dir

    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.strip()}")
    try:
        for target in (mount, mount / "run"):
            result = check_output_dir(CheckContext(output_dir=str(target)))
            assert result.status == "fail", result
            assert "read-only" in result.summary and "chown" not in (result.fix or ""), result
    finally:
        subprocess.run(["umount", str(mount)], check=False)


# live runs: Ctrl-Z, history list, divergence -------------------------------------------------------

def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _until(condition, what: str, limit: float = 300) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + limit  # a hang guard, not a timing assert
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


@pytest.mark.slow
def test_ctrl_z_stops_the_training_with_thub_and_fg_continues_it(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "live"
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    process = subprocess.Popen([sys.executable, "-m", "thub", *_sft(tiny_model, out, "--max-steps", "5000",
                                                                     "--effective-batch-size", "2")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        _until(lambda: len(read_metrics(out / "training_metrics.jsonl")) >= 2 or process.poll() is not None,
               "two steps")
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        child = json.loads((out / ".thub.lock").read_text())["child"]
        listed = _cli("history", "list", str(tmp_path), "--json")
        live = json.loads(listed.stdout)["runs"][0]
        assert live["status"] == "running" and live["pids"] == [process.pid, child], live  # the lock's live ones

        process.send_signal(signal.SIGTSTP)  # what Ctrl-Z sends to the terminal's foreground group
        _until(lambda: _state(process.pid) == "T" and _state(child) == "T", "thub and its child stopped", 120)
        steps = len(read_metrics(out / "training_metrics.jsonl"))
        time.sleep(2)  # (no assert on time: only that nothing was trained while stopped)
        assert len(read_metrics(out / "training_metrics.jsonl")) <= steps + 1  # a line being written may land

        process.send_signal(signal.SIGCONT)  # fg / bg
        _until(lambda: _state(process.pid) not in ("T", "t") and _state(child) not in ("T", "t"), "both continue")
        _until(lambda: len(read_metrics(out / "training_metrics.jsonl")) > steps + 1, "training goes on")
        process.send_signal(signal.SIGTERM)
        assert process.wait(600) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert json.loads((out / "result.json").read_text())["status"] == "interrupted"


def test_history_list_tells_a_dead_run_from_a_live_one(tmp_path: Path) -> None:
    run = tmp_path / "dead"
    run.mkdir()
    (run / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl", "created": 1.0}))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run / ".thub.lock").write_text(json.dumps({"pid": int(gone.stdout), "started": 1.0}))
    listed = json.loads(_cli("history", "list", str(tmp_path), "--json").stdout)["runs"][0]
    assert listed["status"] == "stopped", listed  # killed before it wrote result.json


@pytest.mark.slow
def test_a_diverged_run_has_a_failing_exit_code(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "diverged"
    done = _cli(*_sft(tiny_model, out, "--max-steps", "40", "--learning-rate", "1e30", "--divergence-steps", "2"))
    assert done.returncode == 1, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed" and result["error"].startswith("diverged at step")
    assert result["exit_code"] == 1, result
    assert "stopped by thub" in result.get("note", ""), result
