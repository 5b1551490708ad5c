"""End to end on a real one-node SLURM started by scripts/slurm-up.sh (munge + slurmctld +
slurmd on 127.0.0.1): the TRL sft demo through ``--launcher slurm`` (one torchrun with 2 gloo
processes, and 2 tasks x torchrun), cancel, and a time limit followed by a restart chain.

Skipped when the SLURM binaries are absent (scripts/system-packages.sh installs them; scripts/test-all.sh
runs it as root, so CI always runs these) or when not run as root.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

ROOT = Path(__file__).parent.parent
BINARIES = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel")
# without them: skipped, naming scripts/system-packages.sh (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.needs_system(*BINARIES)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def slurm_env() -> Iterator[dict[str, str]]:
    """A fresh cluster for the session; yields the environment clients need (SLURM_CONF)."""
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-up.sh runs munged, slurmctld and slurmd as root (SlurmUser=root): "
                    "run these tests as root")
    base = Path(tempfile.mkdtemp(prefix="thub-slurm-", dir="/tmp"))  # short: munge's socket lives here
    env = {**os.environ, "SLURMCTLD_PORT": str(_free_port()), "SLURMD_PORT": str(_free_port())}
    up = subprocess.run([str(ROOT / "scripts" / "slurm-up.sh"), str(base)], capture_output=True, text=True,
                        env=env, timeout=120)
    if up.returncode != 0:
        pytest.fail(f"slurm-up.sh failed:\n{up.stdout}\n{up.stderr}")
    try:
        yield {"SLURM_CONF": str(base / "etc" / "slurm.conf")}
    finally:
        subprocess.run([str(ROOT / "scripts" / "slurm-down.sh"), str(base)], capture_output=True, timeout=120)


def thub(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_", "SLURM_"))}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=environ, timeout=timeout)


def submit(tiny_model: Path, data: Path, out: Path, env: dict[str, str], *extra: str) -> list[str]:
    done = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path", str(data),
                "--ckpt-output-dir", str(out), "--launcher", "slurm", "--json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    submitted = json.loads(done.stdout)
    assert submitted["status"] == "submitted"
    return submitted["job_ids"]


def wait(out: Path, env: dict[str, str], timeout: float) -> dict:
    done = thub("runs", "wait", str(out), "--timeout", str(timeout), "--json", env=env, timeout=timeout + 60)
    status = json.loads(done.stdout)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "logs").glob("*")))
    assert done.returncode in (0, 1), f"timed out: {status}\n{logs}"
    status["_logs"] = logs
    return status


def test_sft_demo_runs_to_completion_on_slurm(slurm_env: dict[str, str], tiny_model: Path, demo_data: Path,
                                              tmp_path: Path) -> None:
    out = tmp_path / "sft on slurm"
    job_ids = submit(tiny_model, demo_data / "chat.jsonl", out, slurm_env, "--cluster", "local", "--nodes", "1",
                     "--gpus-per-node", "2", "--max-steps", "4", "--effective-batch-size", "4", "--time", "5")
    record = json.loads((out / "thub_run.json").read_text())
    assert record["launch"]["job_ids"] == job_ids and record["launch"]["cluster"] == "local"
    assert (out / "thub_data" / "rows.json").is_file()  # validated at submit time; the job's children read it
    status = wait(out, slurm_env, 240)
    assert status["status"] == "succeeded", status["_logs"]
    assert status["jobs"][0]["state"] == "COMPLETED" and status["jobs"][0]["exit_code"] == "0:0"
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3, 4] and all(line["max_steps"] == 4 for line in lines)
    assert all(line["loss"] > 0 for line in lines)
    result = json.loads((out / "result.json").read_text())
    assert result["final_checkpoint"] == str(out / "final") and (out / "final" / "model.safetensors").exists()
    assert (out / "logs" / f"slurm-{job_ids[0]}.out").exists()
    log = (out / "logs" / "train.log").read_text()
    # two training processes ran: each rank prepares its data and says so
    assert log.count("thub: prepared") == 2 or "[rank1]" in log, log[-2000:]


def test_two_tasks_each_running_torchrun(slurm_env: dict[str, str], tiny_model: Path, demo_data: Path,
                                         tmp_path: Path) -> None:
    """The multi-node pattern (one task per node, c10d on the first) with two tasks on this host."""
    profiles = tmp_path / "clusters.yaml"
    profiles.write_text("clusters:\n  two-tasks: {tasks_per_node: 2, default_time: '00:05:00'}\n")
    out = tmp_path / "two"
    submit(tiny_model, demo_data / "chat.jsonl", out, slurm_env, "--cluster", "two-tasks", "--cluster-file",
           str(profiles), "--gpus-per-node", "1", "--max-steps", "3", "--effective-batch-size", "4")
    record = json.loads((out / "thub_run.json").read_text())
    assert record["parameters"]["nnodes"]["value"] == 2  # torchrun agents: world size 2 x 1
    status = wait(out, slurm_env, 240)
    assert status["status"] == "succeeded", status["_logs"]
    assert len(read_metrics(out / "training_metrics.jsonl")) == 3
    assert (out / "logs" / "train-node1.log").exists()


def test_cancel_stops_the_job_and_its_restart_chain(slurm_env: dict[str, str], tiny_model: Path,
                                                   demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "cancel"
    job_ids = submit(tiny_model, demo_data / "chat.jsonl", out, slurm_env, "--max-steps", "100000",
                     "--max-restarts", "1", "--time", "10")
    assert len(job_ids) == 2
    deadline = time.time() + 60
    while time.time() < deadline:
        states = json.loads(thub("runs", "status", str(out), "--json", env=slurm_env).stdout)["jobs"]
        if states[0]["state"] == "RUNNING":
            break
        time.sleep(0.5)
    cancel = thub("runs", "cancel", str(out), env=slurm_env)
    assert cancel.returncode == 0, cancel.stderr
    status = wait(out, slurm_env, 60)
    assert [j["state"] for j in status["jobs"]] == ["CANCELLED", "CANCELLED"], status
    assert status["status"] != "succeeded"


def test_time_limit_then_restart_chain_resumes_to_completion(slurm_env: dict[str, str], tiny_model: Path,
                                                             demo_data: Path, tmp_path: Path) -> None:
    # The first job's steps take >= 0.6 s (a sitecustomize in the training child, active until the
    # run resumes), so 150 steps outlast a 1-minute limit, which SLURM enforces within ~30 s; the
    # chained job resumes from the checkpoint written on SIGTERM and runs the rest at full speed
    # within its own minute.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import json, os, time\n"
        "run = os.environ.get('THUB_RUN_DIR')\n"
        "if run and os.environ.get('THUB_TEST_STEP_SLEEP'):\n"
        "    if json.load(open(os.path.join(run, 'thub_run.json'))).get('resume_from') is None:\n"
        "        from thub.runner import metrics\n"
        "        _log = metrics.MetricsWriter.log\n"
        "        def log(self, *a, **k):\n"
        "            time.sleep(float(os.environ['THUB_TEST_STEP_SLEEP']))\n"
        "            return _log(self, *a, **k)\n"
        "        metrics.MetricsWriter.log = log\n")
    env = {**slurm_env, "PYTHONPATH": str(hooks), "THUB_TEST_STEP_SLEEP": "0.6"}
    out = tmp_path / "chain"
    job_ids = submit(tiny_model, demo_data / "chat.jsonl", out, env, "--max-steps", "150", "--save-steps", "25",
                     "--effective-batch-size", "2", "--time", "1", "--max-restarts", "1")
    status = wait(out, env, 330)
    assert status["status"] == "succeeded", status["_logs"]
    assert status["jobs"][0]["state"] == "TIMEOUT" and status["jobs"][1]["state"] == "COMPLETED", status["jobs"]
    attempts = [json.loads(line) for line in (out / "slurm" / "attempts.jsonl").read_text().splitlines()]
    assert [a["job_id"] for a in attempts] == job_ids
    assert attempts[1]["resume_from"] and "checkpoint-" in attempts[1]["resume_from"]
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == list(range(1, 151))  # each step once, none lost or repeated
