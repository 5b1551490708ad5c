"""Run safety, round 3 (issue 23 items 1, 3, 7): real ``thub`` processes on the trl backend with
the tiny local model, real signals, a real tmpfs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from thub.runner.lock import LOCK_NAME
from thub.runner.metrics import read_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update(extra or {})
    return environ


def thub(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=_environ(env), timeout=900, cwd=ROOT)  # a hang guard, not a timing assert


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "thub", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_environ(env), cwd=ROOT)


def sft(model: Path | str, data: Path | str, out: Path | str, *extra: str) -> list[str]:
    return ["train", "sft", "--backend", "trl", "--model-path", str(model), "--data-path", str(data),
            "--ckpt-output-dir", str(out), *extra]


def result_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text())


def wait_for(condition: Any, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.time() + 600  # a hang guard
    while time.time() < deadline:
        if condition():
            return
        if process.poll() is not None:
            raise AssertionError(f"run ended before {what}: {process.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


def training_child(out: Path) -> int:
    """The training child's pid, as the run's lock file names it (thub.runner.lock)."""
    holder = json.loads((out / LOCK_NAME).read_text().strip("\0") or "{}")
    return int(holder["child"])


# --- item 3: a child killed by a signal (the OOM killer) ---------------------------------------

def test_a_child_killed_by_sigkill_is_the_root_cause(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "oom"
    process = start(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "5000",
                         "--effective-batch-size", "2"))
    try:
        wait_for(lambda: len(read_metrics(out / "training_metrics.jsonl")) >= 2, process, "step 2")
        os.kill(training_child(out), signal.SIGKILL)  # what the kernel's OOM killer does
        _out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err
    result = result_of(out)
    assert result["status"] == "failed" and result["exit_code"] == -9, result
    error = result["error"]
    assert error.startswith("the training process was killed by SIGKILL (signal 9); out of memory? "
                            "(see `dmesg`)"), error
    assert "peak memory" in error and " MiB" in error, error
    assert result["root_cause"] == [error] and "{" not in error
    assert "Traceback" not in err and "killed by SIGKILL" in err


# --- item 7: a run that never reached step 1 runs again with the same command ------------------

def test_a_bad_value_found_late_leaves_a_directory_the_same_command_reuses(tiny_model: Path, demo_data: Path,
                                                                           tmp_path: Path) -> None:
    out = tmp_path / "late"
    bad = thub(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "1", "--lr-scheduler", "nonsense"))
    assert bad.returncode == 1, bad.stderr
    result = result_of(out)
    assert result["status"] == "failed" and result["reached_step"] == 0, result
    fixed = thub(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "1"))  # no --resume/--overwrite
    assert fixed.returncode == 0, fixed.stderr
    assert result_of(out)["status"] == "succeeded" and result_of(out)["reached_step"] == 1


def test_sigterm_before_the_child_exists_then_the_same_command_runs(tiny_model: Path, demo_data: Path,
                                                                    tmp_path: Path) -> None:
    # a real SIGTERM to the thub process at the moment it builds the child's command (the directory
    # is prepared, no child exists yet)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, signal\n"
        "if not os.environ.get('THUB_RUN_DIR'):\n"
        "    import thub.runner.supervisor as s\n"
        "    _command = s.child_command\n"
        "    def child_command(*a, **k):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return _command(*a, **k)\n"
        "    s.child_command = child_command\n")
    out = tmp_path / "term"
    args = sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "1")
    stopped = thub(*args, env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))})
    assert stopped.returncode == 130, (stopped.returncode, stopped.stderr)
    assert "Traceback" not in stopped.stderr
    result = result_of(out)
    assert result["status"] == "interrupted" and result["reached_step"] == 0, result
    again = thub(*args)
    assert again.returncode == 0, again.stderr
    assert result_of(out)["status"] == "succeeded"


def test_a_run_that_trained_still_needs_resume_or_overwrite(tiny_model: Path, demo_data: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "trained"
    first = thub(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "1"))
    assert first.returncode == 0, first.stderr
    result = result_of(out)
    (out / "result.json").write_text(json.dumps({**result, "status": "interrupted"}))  # as if stopped after step 1
    again = thub(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "1"))
    assert again.returncode == 2 and "holds an unfinished run" in again.stderr, again.stderr


def _small_filesystem(path: Path, size: str) -> bool:
    path.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_disk_full_while_keeping_the_rows_leaves_nothing_that_refuses_the_rerun(tiny_model: Path, demo_data: Path,
                                                                                tmp_path: Path) -> None:
    mount = tmp_path / "small"
    if not _small_filesystem(mount, "256k"):
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        big = tmp_path / "big.jsonl"
        row = (demo_data / "chat.jsonl").read_text().splitlines()[0]
        big.write_text("\n".join([row] * 4000) + "\n")  # its kept rows do not fit in 256 KiB
        out = mount / "run"
        full = thub(*sft(tiny_model, big, out, "--max-steps", "1", "--no-save-final-checkpoint", "--force-launch"))
        assert full.returncode != 0 and "Traceback" not in full.stderr, full.stderr
        assert "No space left on device" in full.stderr, full.stderr
        again = thub(*sft(tiny_model, demo_data / "chat.jsonl", out, "--max-steps", "1",
                          "--no-save-final-checkpoint", "--force-launch"))
        assert again.returncode == 0, again.stderr
        assert result_of(out)["status"] == "succeeded"
    finally:
        subprocess.run(["umount", str(mount)], check=False)


# --- item 1: `~` means the home directory for thub and the library alike ----------------------

def test_tilde_paths_are_one_run_under_home(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    import shutil

    home = tmp_path / "home"
    home.mkdir()
    shutil.copytree(tiny_model, home / "tiny")
    shutil.copy(demo_data / "chat.jsonl", home / "x.jsonl")
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run([sys.executable, "-m", "thub", *sft("~/tiny", "~/x.jsonl", "~/runs/z", "--max-steps", "2",
                                                              "--save-steps", "1")],
                          capture_output=True, text=True, env=_environ({"HOME": str(home)}), timeout=900, cwd=work)
    assert done.returncode == 0, done.stderr
    out = home / "runs" / "z"
    assert not (work / "~").exists()  # no literal ./~ beside the real run
    record = json.loads((out / "thub_run.json").read_text())
    parameters = record["parameters"]
    assert parameters["ckpt_output_dir"]["value"] == str(out)
    assert parameters["model_path"]["value"] == str(home / "tiny")
    assert parameters["data_path"]["value"] == str(home / "x.jsonl")
    result = result_of(out)
    assert result["status"] == "succeeded" and result["final_checkpoint"] == str(out / "final")
    # HF Trainer saved its checkpoints in the same directory (it expands ~ itself)
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_tilde_paths_from_the_training_hub_api(tiny_model: Path, demo_data: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import thub

    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(demo_data / "chat.jsonl", tmp_path / "x.jsonl")
    monkeypatch.chdir(tmp_path)
    result = thub.sft(model_path=str(tiny_model), data_path="~/x.jsonl", ckpt_output_dir="~/th", backend="trl",
                      max_steps=1, progress=False)
    assert result["status"] == "succeeded", result
    assert (tmp_path / "th" / "result.json").exists() and not (tmp_path / "~").exists()
    record = json.loads((tmp_path / "th" / "thub_run.json").read_text())
    assert record["parameters"]["data_path"]["value"] == str(tmp_path / "x.jsonl")
