"""End to end on a real one-node SLURM started by scripts/slurm-up.sh (munge + slurmctld +
slurmd on 127.0.0.1): the TRL sft demo through ``--launcher slurm`` (one torchrun with 2 gloo
processes, and 2 tasks x torchrun), cancel, and a time limit followed by a restart chain.

Skipped when the SLURM binaries are absent (scripts/system-packages.sh installs them; scripts/test-all.sh
runs it as root, so CI always runs these) or when not run as root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

ROOT = Path(__file__).parent.parent
BINARIES = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel")
# without them: skipped, naming scripts/system-packages.sh (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.needs_system(*BINARIES)]


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
                     "--gpus-per-node", "2", "--max-steps", "4", "--effective-batch-size", "4", "--time", "30")
    record = json.loads((out / "thub_run.json").read_text())
    assert record["launch"]["job_ids"] == job_ids and record["launch"]["cluster"] == "local"
    assert (out / "thub_data" / "rows.json").is_file()  # validated at submit time; the job's children read it
    status = wait(out, slurm_env, 1800)  # a hang guard (the job's own limit is 30 minutes)
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
    profiles.write_text("clusters:\n  two-tasks: {tasks_per_node: 2, default_time: '00:30:00'}\n")
    out = tmp_path / "two"
    submit(tiny_model, demo_data / "chat.jsonl", out, slurm_env, "--cluster", "two-tasks", "--cluster-file",
           str(profiles), "--gpus-per-node", "1", "--max-steps", "3", "--effective-batch-size", "4")
    record = json.loads((out / "thub_run.json").read_text())
    assert record["parameters"]["nnodes"]["value"] == 2  # torchrun agents: world size 2 x 1
    status = wait(out, slurm_env, 1800)  # a hang guard
    assert status["status"] == "succeeded", status["_logs"]
    assert len(read_metrics(out / "training_metrics.jsonl")) == 3
    assert (out / "logs" / "train-node1.log").exists()


def test_cancel_stops_the_job_and_its_restart_chain(slurm_env: dict[str, str], tiny_model: Path,
                                                   demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "cancel"
    job_ids = submit(tiny_model, demo_data / "chat.jsonl", out, slurm_env, "--max-steps", "100000",
                     "--max-restarts", "1", "--time", "10")
    assert len(job_ids) == 2
    deadline = time.time() + 300  # cancelled while pending is fine too: the test's outcome is the same
    while time.time() < deadline:
        states = json.loads(thub("runs", "status", str(out), "--json", env=slurm_env).stdout)["jobs"]
        if states[0]["state"] == "RUNNING":
            break
        time.sleep(0.5)
    cancel = thub("runs", "cancel", str(out), env=slurm_env)
    assert cancel.returncode == 0, cancel.stderr
    status = wait(out, slurm_env, 600)  # a hang guard
    assert [j["state"] for j in status["jobs"]] == ["CANCELLED", "CANCELLED"], status
    assert status["status"] != "succeeded"


def _all_ended(out: Path, env: dict[str, str]) -> list[dict]:
    """The chain's jobs once every one has ended (jobs after the one that finished the run start,
    see it finished and exit at once). Polls; the deadline only guards against a hang."""
    deadline = time.time() + 900
    while True:
        jobs = json.loads(thub("runs", "status", str(out), "--json", env=env).stdout)["jobs"]
        if all(j.get("state") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for j in jobs):
            return jobs
        assert time.time() < deadline, jobs
        time.sleep(1)


def test_time_limit_then_restart_chain_resumes_to_completion(slurm_env: dict[str, str], tiny_model: Path,
                                                             demo_data: Path, tmp_path: Path) -> None:
    # In the chain's first attempt each step sleeps 1.5 s (THUB_TEST_STEP_SLEEP, which a sitecustomize
    # in the training child keeps for the first attempt only), so its 100 steps cannot fit in the
    # 1-minute limit, which SLURM enforces within ~30 s (+ KillWait): it ends TIMEOUT after a checkpoint
    # on SIGTERM. Later attempts run at full speed; how many of them the remaining steps take depends
    # on the machine (one when idle, more under load), so the chain has 4 restarts and the test asserts
    # what holds for any number of attempts: the last one succeeded, every earlier one timed out, each
    # resumed from the newest checkpoint and continued at the next step, and the run's metrics hold each
    # of the 100 steps exactly once.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os\n"
        "run = os.environ.get('THUB_RUN_DIR')\n"
        "if run and os.environ.get('THUB_TEST_STEP_SLEEP'):\n"
        "    try:\n"
        "        with open(os.path.join(run, 'slurm', 'attempts.jsonl')) as attempts:\n"
        "            first_attempt = len(attempts.read().splitlines()) == 1\n"
        "    except OSError:\n"
        "        first_attempt = False\n"
        "    if not first_attempt:\n"
        "        del os.environ['THUB_TEST_STEP_SLEEP']\n")
    env = {**slurm_env, "PYTHONPATH": str(hooks), "THUB_TEST_STEP_SLEEP": "1.5"}
    out = tmp_path / "chain"
    job_ids = submit(tiny_model, demo_data / "chat.jsonl", out, env, "--max-steps", "100", "--save-steps", "20",
                     "--effective-batch-size", "2", "--time", "1", "--max-restarts", "4")
    # each job ends within SLURM's limit (1 min + its ~30 s enforcement + KillWait): a hang guard
    status = wait(out, env, 300 * len(job_ids))
    assert status["status"] == "succeeded", status["_logs"]
    attempts = [json.loads(line) for line in (out / "slurm" / "attempts.jsonl").read_text().splitlines()]
    tried = len(attempts)
    assert 2 <= tried <= len(job_ids) and [a["job_id"] for a in attempts] == job_ids[:tried], attempts
    states = [j["state"] for j in _all_ended(out, env)]
    # the attempts before the last hit the limit; the last one finished the run (its job may still hit
    # the limit while the worker exits, on a busy machine); the jobs after it found the run finished
    assert states[:tried - 1] == ["TIMEOUT"] * (tried - 1) and states[tried - 1] in ("COMPLETED", "TIMEOUT")
    assert states[tried:] == ["COMPLETED"] * (len(job_ids) - tried), (states, attempts)
    logs = {job: (out / "logs" / f"slurm-{job}.out").read_text() for job in job_ids}
    assert "thub worker 0: succeeded" in logs[job_ids[tried - 1]], logs[job_ids[tried - 1]]
    assert all("thub worker 0: interrupted" in logs[job] for job in job_ids[:tried - 1]), logs
    assert all("the run already finished (succeeded)" in logs[job] for job in job_ids[tried:]), logs
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == list(range(1, 101))  # each step once, none lost or repeated
    assert attempts[0]["resume_from"] is None
    resumed_at = 0
    for attempt in attempts[1:]:
        assert attempt["resume_from"] and Path(attempt["resume_from"]).parent == out / "checkpoints", attempt
        step = int(Path(attempt["resume_from"]).name.removeprefix("checkpoint-"))
        assert step >= resumed_at  # never back to an older checkpoint
        before = [line["step"] for line in lines if line["timestamp"] < attempt["started"]]
        after = [line["step"] for line in lines if line["timestamp"] >= attempt["started"]]
        # the newest checkpoint: every step kept from earlier attempts is in it; this one went on from the next
        assert before and max(before) == step and (not after or after[0] == step + 1), (attempt, before[-3:], after[:3])
        resumed_at = step
    assert resumed_at > 0  # the first attempt saved progress before its limit


def test_export_runs_as_a_cpu_job_after_training(slurm_env: dict[str, str], tiny_model: Path, demo_data: Path,
                                                 tmp_path: Path) -> None:
    """--export DIR: lora_sft trains in one job; the export job (afterok) merges and verifies the adapter."""
    out, hf = tmp_path / "lora", tmp_path / "hf"
    done = thub("train", "lora_sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--launcher", "slurm", "--max-steps",
                "2", "--lora-r", "4", "--effective-batch-size", "2", "--export", str(hf), "--json", env=slurm_env)
    assert done.returncode == 0, done.stderr
    job_ids = json.loads(done.stdout)["job_ids"]
    assert len(job_ids) == 2  # training, then the export job
    jobs = _all_ended(out, slurm_env)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "logs").glob("*")))
    assert [j["state"] for j in jobs] == ["COMPLETED", "COMPLETED"], (jobs, logs)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and result["export"]["ok"] is True, result.get("export")
    assert result["export"]["action"] == "merge" and (hf / "model.safetensors").is_file()
    assert "verified" in (out / "logs" / f"slurm-export-{job_ids[1]}.out").read_text()


def test_runs_wait_waits_for_the_export_job_and_reports_its_failure(slurm_env: dict[str, str], tiny_model: Path,
                                                                    demo_data: Path, tmp_path: Path) -> None:
    """``thub runs wait`` on a run submitted with --export returns once the export job has written
    its outcome (not when training succeeded) and exits 1 when the export failed (here: its folder
    was filled after submission, so the export job refuses to write into it)."""
    out, hf = tmp_path / "run", tmp_path / "hf"
    done = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--launcher", "slurm", "--max-steps",
                "1", "--effective-batch-size", "2", "--export", str(hf), "--json", env=slurm_env)
    assert done.returncode == 0, done.stderr
    hf.mkdir()
    (hf / "someone-elses.txt").write_text("x")  # before the export job can start: training runs first
    waited = thub("runs", "wait", str(out), "--timeout", "1200", "--json", env=slurm_env, timeout=1300)
    status = json.loads(waited.stdout)
    assert waited.returncode == 1, (waited.returncode, status, waited.stderr)
    assert status["status"] == "succeeded"  # training did; the export did not
    export = status["export"]
    assert export["outcome"]["ok"] is False and "already exists and is not an empty folder" in \
        export["outcome"]["error"], export
    assert export["job_id"] == json.loads(done.stdout)["job_ids"][-1]
    assert "export FAILED" in thub("runs", "wait", str(out), env=slurm_env).stderr
