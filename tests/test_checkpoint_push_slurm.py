"""``thub checkpoint push DIR --to URI --launcher slurm``: the push as a CPU job on the cluster profile's
``push_partition`` (where the network is), chained ``afterok`` after a job given with ``--after`` (training,
a consolidate job). The dry run shows the script and writes nothing; on the real local cluster
(scripts/slurm-up.sh) the job runs after the job it waits for and sends the folder with its card."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

BINARIES = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel")


def _environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_", "SLURM_"))}
    return {**environ, **(extra or {})}


def thub(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=env or _environ(), cwd=cwd, timeout=600)


def test_dry_run_shows_the_job_on_the_push_partition_chained_afterok(tiny_model: Path, tmp_path: Path) -> None:
    (tmp_path / "clusters.yaml").write_text("c:\n  partition: gpu\n  export_partition: cpu\n"
                                            "  push_partition: xfer\n  offline: true\n")
    run = tmp_path / "run"
    run.mkdir()
    env = _environ({"THUB_CLUSTER_FILE": str(tmp_path / "clusters.yaml")})
    done = thub("checkpoint", "push", str(tmp_path / "later"), "--to", "hf://org/tuned", "--run", str(run),
                "--launcher", "slurm", "--cluster", "c", "--after", "41", "--dry-run", "--json", env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["partition"] == "xfer" and plan["job_id"] is None and plan["after"] == "41"
    assert plan["sbatch"] == ["sbatch", "--parsable", "--dependency=afterok:41", "--kill-on-invalid-dep=yes",
                              str(run / "slurm" / "checkpoint-push.sbatch")]
    script = plan["script"]
    assert "#SBATCH --partition=xfer" in script and "HF_HUB_OFFLINE" not in script  # the network is there
    assert script.rstrip().endswith(f'"$PYTHON" -m thub checkpoint push {tmp_path / "later"} --to hf://org/tuned '
                                    f"--run {run}")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert not (run / "slurm").exists()  # nothing written
    text = thub("checkpoint", "push", str(tiny_model), "--to", "file:///tmp/x", "--job-dir", str(tmp_path / "jobs"),
                "--launcher", "slurm", "--cluster", "c", "--dry-run", env=env)
    assert text.returncode == 0, text.stderr
    assert "nothing submitted (--dry-run)" in text.stdout and not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(("args", "said"), [
    (("--launcher", "slurm"), "give --run RUN_DIR"),
    (("--launcher", "slurm", "--job-dir", "j", "--after", "next"), "--after: expected a SLURM job id"),
    (("--cluster", "local"), "--cluster: only with --launcher slurm"),
    (("--launcher", "slurm", "--job-dir", "j", "--public"), "--public: only an hf:// target"),
], ids=["no job folder", "bad job id", "cluster without slurm", "public without hf"])
def test_bad_slurm_push_options_are_exit_2(tiny_model: Path, tmp_path: Path, args: tuple[str, ...],
                                           said: str) -> None:
    done = thub("checkpoint", "push", str(tiny_model), "--to", f"file://{tmp_path / 'out'}", *args, "--dry-run",
                cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


def test_a_folder_not_there_needs_the_job_that_writes_it(tmp_path: Path) -> None:
    done = thub("checkpoint", "push", str(tmp_path / "missing"), "--to", f"file://{tmp_path / 'out'}",
                "--launcher", "slurm", "--job-dir", str(tmp_path), "--dry-run")
    assert done.returncode == 2 and "give --after JOB_ID when an earlier job writes it" in done.stderr


@pytest.mark.slow
@pytest.mark.needs_system(*BINARIES)
def test_the_push_job_runs_after_the_job_it_waits_for(slurm_env: dict[str, str], tiny_model: Path,
                                                      tmp_path: Path) -> None:
    env = _environ(slurm_env)
    model, pushed, jobs = tmp_path / "model", tmp_path / "pushed", tmp_path / "jobs"
    shutil.copytree(tiny_model, model)
    # the job it waits for: here a stand-in for training or a consolidate job, writing a marker file last
    first = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/first-%j.out",
                            f"--wrap=sleep 2; touch {tmp_path / 'first.done'}"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.strip().split(";")[0]
    done = thub("checkpoint", "push", str(model), "--to", f"file://{pushed}", "--launcher", "slurm",
                "--job-dir", str(jobs), "--after", first_id, "--json", env=env)
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["job_id"]
    deadline = time.monotonic() + 900  # a hang guard only
    while subprocess.run(["squeue", "-h", "-j", f"{first_id},{job_id}"], capture_output=True, text=True,
                         env=env).stdout.strip():
        assert time.monotonic() < deadline, "the jobs did not end"
        time.sleep(1)
    log = jobs / "logs" / f"slurm-push-{job_id}.out"
    assert (tmp_path / "first.done").is_file()
    assert (pushed / "README.md").is_file() and (pushed / "model.safetensors").is_file(), log.read_text()
    # it ran after the first job: the pushed files are newer than the first job's marker
    assert (pushed / "README.md").stat().st_mtime >= (tmp_path / "first.done").stat().st_mtime
    assert f"pushed {model} to file://{pushed}" in log.read_text()
