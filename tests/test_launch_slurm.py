"""SLURM rendering without a cluster: golden scripts for several profiles, hostile values,
profile validation, time limits, the --dry-run CLI and the batch-size mapping.

Regenerate the goldens after an intended change with ``THUB_UPDATE_GOLDEN=1 pytest tests/test_launch_slurm.py``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from thub.errors import UsageError
from thub.launch.profiles import ClusterProfile, format_time, get_profile, load_profiles, parse_time
from thub.launch.slurm import SlurmRequest, directives, render_script, sbatch_commands

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).parent.parent
HOSTILE = ["x; rm -rf /tmp/thub-pwned", "$(touch /tmp/thub-pwned)", "a\nb`id`", "it's \"quoted\" $HOME"]

PROFILES = {
    "local": {},
    "gpu_cluster": {
        "description": "4 x A100 per node, modules + venv, offline compute nodes",
        "partition": "gpu", "account": "proj-123", "qos": "normal", "max_time": "2-00:00:00",
        "gpus_per_node": 4, "gpu_type": "a100", "cpus_per_node": 64, "mem_per_node": "480G",
        "preamble": ["module purge", "module load cuda/12.4", "source /shared/venvs/thub/bin/activate"],
        "env": {"HF_HOME": "/scratch/hf cache", "NCCL_DEBUG": "WARN"}, "offline": True,
        "python": "/shared/venvs/thub/bin/python", "sbatch_extra": ["--exclusive"],
    },
    "apptainer": {
        "partition": "booster", "gpus_per_node": 4, "gpu_directive": "gpus-per-node", "tmpdir": "refuse",
        "container": {"runtime": "apptainer", "image": "/images/thub.sif", "mounts": ["/scratch"]},
        "python": "python3",
    },
    "pyxis": {
        "gpus_per_node": 8, "tmpdir": "keep", "reservation": "big-run",
        "container": {"runtime": "pyxis", "image": "nvcr.io#nvidia/pytorch:25.01-py3",
                      "options": ["--container-writable"]},
        "python": "python",
    },
}


def request(name: str, **kw: object) -> SlurmRequest:
    profile = ClusterProfile(name=name, **PROFILES[name])  # type: ignore[arg-type]
    defaults: dict[str, object] = dict(run_dir=Path("/runs/sft-demo"), algorithm="sft", nodes=2, procs_per_node=2,
                                       time="04:00:00", python=profile.python or "/opt/venv/bin/python",
                                       thub_version="TEST", workdir=Path("/home/user/project"))
    if name == "local":
        defaults.update(nodes=1, time=None)
    defaults.update(kw)
    return SlurmRequest(profile=profile, **defaults)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_golden_scripts(name: str) -> None:
    script = render_script(request(name))
    golden = GOLDEN / f"slurm_{name}.sbatch"
    if os.environ.get("THUB_UPDATE_GOLDEN"):
        golden.write_text(script)
    assert script == golden.read_text(), f"rendered script differs from {golden}"
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_directives_follow_the_profile() -> None:
    lines = directives(request("gpu_cluster"))
    assert "--gres=gpu:a100:2" in lines and "--partition=gpu" in lines and "--account=proj-123" in lines
    assert "--cpus-per-task=64" in lines and "--mem=480G" in lines and "--exclusive" in lines
    assert "--gpus-per-node=2" in directives(request("apptainer"))
    script = render_script(request("gpu_cluster"))
    assert "export PYTORCH_CUDA_ALLOC_CONF=\"${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}\"" in script
    assert "export HF_HUB_OFFLINE=1" in script and "export WANDB_MODE=offline" in script
    assert "PYTORCH_CUDA_ALLOC_CONF" not in render_script(request("local"))  # CPU: no CUDA settings


def test_restart_chain_commands() -> None:
    commands = sbatch_commands(request("local", max_restarts=2))
    assert len(commands) == 3 and "--dependency=afterany:{prev}" in commands[1]
    assert all(c[-1] == "/runs/sft-demo/slurm/job.sbatch" for c in commands)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_are_quoted_and_reach_argv_intact(hostile: str, tmp_path: Path) -> None:
    """Run the rendered script with stub scontrol/srun/python: the values arrive as one argv item."""
    run_dir = tmp_path / hostile.replace("/", "_")
    profile = ClusterProfile(name="t", env={"HOSTILE": hostile}, tmpdir_base=str(tmp_path))
    req = SlurmRequest(profile=profile, run_dir=run_dir, algorithm="sft", python=str(tmp_path / "py"),
                       workdir=tmp_path, thub_version="TEST")
    script = render_script(req)
    assert "\n#SBATCH" not in script.split("set -euo pipefail")[1]  # nothing smuggled into directives
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            directive = line.removeprefix("#SBATCH ")
            assert all(c not in directive for c in ";$`'\" \n"), line
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.jsonl"
    recorder = f"#!{sys.executable}\nimport json, os, sys\nopen({str(log)!r}, 'a').write(json.dumps(" \
               "{'argv': sys.argv, 'HOSTILE': os.environ.get('HOSTILE')}) + '\\n')\n"
    for name in ("srun", "py"):
        path = (bin_dir if name == "srun" else tmp_path) / name
        path.write_text(recorder)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho NodeName=n1 NodeAddr=127.0.0.1 State=IDLE\n")
    (bin_dir / "scontrol").chmod(0o755)
    run_dir.mkdir()
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n1"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0]["argv"][1:] == ["-m", "thub.launch.worker", "prepare", str(run_dir)]
    assert calls[1]["argv"][0].endswith("srun") and calls[1]["argv"][-5:] == [
        str(tmp_path / "py"), "-m", "thub.launch.worker", "node", str(run_dir)]
    assert calls[1]["argv"][-1] == str(run_dir) and calls[1]["HOSTILE"] == hostile
    assert not Path("/tmp/thub-pwned").exists()


@pytest.mark.parametrize("field,value,message", [
    ("partition", "gpu; rm -rf /", r"partition\n.*'gpu; rm -rf /' is not a plain token"),
    ("account", "a\n#SBATCH --x", r"account\n.*is not a plain token"),
    ("qos", "$(id)", r"qos\n.*'\$\(id\)' is not a plain token"),
    ("sbatch_extra", ["--comment=a b"], r"sbatch_extra\n.*'--comment=a b': expected --option or --option=token"),
    ("env", {"BAD NAME": "x"}, r"env\n.*'BAD NAME' is not a valid environment variable name"),
    ("max_time", "soon", r"time 'soon': expected MM, HH:MM:SS or D-HH:MM:SS")])
def test_profiles_reject_values_that_cannot_be_directives(field: str, value: object, message: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(UsageError if field == "max_time" else ValidationError, match=message):
        ClusterProfile(name="x", **{field: value})  # type: ignore[arg-type]


def test_job_name_is_sanitised() -> None:
    req = request("local", run_dir=Path("/r/a b;$(id)\n"))
    assert req.job_name == "thub-sft-a_b___id__"


def test_time_parsing_and_limits() -> None:
    assert parse_time("30") == 1800 and parse_time("01:02:03") == 3723 and parse_time("1-00:00:00") == 86400
    assert parse_time("2-12") == 2 * 86400 + 12 * 3600 and format_time(90061) == "1-01:01:01"
    with pytest.raises(UsageError, match="allows at most 2-00:00:00"):
        request("gpu_cluster", time="3-00:00:00")
    with pytest.raises(UsageError, match="have 4 GPUs"):
        request("apptainer", procs_per_node=8)


def test_profile_files_override_and_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg" / "thub").mkdir(parents=True)
    (tmp_path / "cfg" / "thub" / "clusters.yaml").write_text("clusters:\n  hpc: {partition: a}\n")
    (tmp_path / "thub-clusters.yaml").write_text("hpc: {partition: b, gpus_per_node: 4}\n")
    extra = tmp_path / "extra.yaml"
    extra.write_text("clusters:\n  other: {qos: high}\n")
    loaded = load_profiles(extra)
    assert loaded.profiles["hpc"].partition == "b" and loaded.origins["hpc"].endswith("thub-clusters.yaml")
    assert get_profile("other", extra).qos == "high" and "local" in loaded.profiles
    with pytest.raises(UsageError, match="did you mean 'hpc'"):
        get_profile("hcp")
    extra.write_text("clusters:\n  bad: {partition: 'a b'}\n")
    with pytest.raises(UsageError, match="not a plain token"):
        load_profiles(extra)
    listed = subprocess.run([sys.executable, "-m", "thub", "clusters", "--cluster-file", str(extra), "--json"],
                            capture_output=True, text=True, cwd=tmp_path, env={**os.environ})
    assert listed.returncode == 2 and "not a plain token" in listed.stdout
    assert {c["name"] for c in json.loads(listed.stdout)["clusters"]} >= {"local", "hpc"}


def thub(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_"))}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, cwd=cwd, env=environ)


def _data(folder: Path) -> None:
    """``d.jsonl`` in ``folder``: a SLURM dry run validates its data as the submission does."""
    (folder / "d.jsonl").write_text((ROOT / "examples" / "data" / "chat.jsonl").read_text())


def test_dry_run_writes_and_shows_the_script_only(tmp_path: Path) -> None:
    out = tmp_path / "run; $(touch pwned)"
    _data(tmp_path)
    done = thub("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path", "d.jsonl",
                "--ckpt-output-dir", str(out), "--launcher", "slurm", "--nodes", "2", "--gpus-per-node", "2",
                "--effective-batch-size", "8", "--time", "10", "--max-restarts", "1", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    script = (out / "slurm" / "job.sbatch").read_text()
    assert script in done.stdout and "#SBATCH --nodes=2" in script and "#SBATCH --time=00:10:00" in script
    assert "--dependency=afterany:{prev}" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["slurm"] and not (tmp_path / "pwned").exists()
    plan = json.loads(thub("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path", "d.jsonl",
                           "--ckpt-output-dir", str(out), "--launcher", "slurm", "--nodes", "2",
                           "--gpus-per-node", "2", "--effective-batch-size", "8", "--dry-run", "--json",
                           cwd=tmp_path).stdout)
    assert plan["parameters"]["nnodes"] == {"value": 2, "source": "flag --nodes"}
    assert plan["translation"]["world_size"] == 4
    assert plan["translation"]["config"]["per_device_train_batch_size"] * \
        plan["translation"]["config"]["gradient_accumulation_steps"] * 4 == 8
    assert plan["launch"]["script"] == script.replace("00:10:00", "00:30:00")


def test_more_nodes_keep_the_global_batch_or_name_valid_values(tmp_path: Path) -> None:
    base = ["train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
            str(ROOT / "examples" / "data" / "chat.jsonl"),
            "--ckpt-output-dir", str(tmp_path / "o"), "--launcher", "slurm", "--effective-batch-size", "12",
            "--dry-run", "--json"]
    for nodes, procs in (("1", "2"), ("3", "2"), ("1", "4")):
        plan = json.loads(thub(*base, "--nodes", nodes, "--gpus-per-node", procs).stdout)
        config = plan["translation"]["config"]
        assert config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] * \
            int(nodes) * int(procs) == 12
    bad = thub(*base, "--nodes", "5", "--gpus-per-node", "1")
    assert bad.returncode == 2 and "nearest valid values: 10, 15" in bad.stderr


def test_local_launcher_rejects_slurm_only_flags() -> None:
    done = thub("train", "sft", "--model-path", "m", "--data-path", "d", "--ckpt-output-dir", "o",
                "--cluster", "local", "--dry-run")
    assert done.returncode == 2 and "only apply with --launcher slurm" in done.stderr


def test_runs_commands_without_a_scheduler(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl",
                                                   "launch": {"launcher": "slurm", "job_ids": ["7", "8"]}}))
    (run / "training_metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "max_steps": 10, "loss": 1.0 / s, "timestamp": 100.0 + s}) + "\n"
                for s in (1, 2, 3, 4)))
    done = thub("runs", "cancel", str(run), "--dry-run")
    assert done.returncode == 0 and done.stdout.strip() == "$ scancel 7 8"
    status = json.loads(thub("runs", "status", str(run), "--json", env={"PATH": "/nonexistent"}).stdout)
    assert status["progress"]["percent"] == 40.0 and status["progress"]["eta_seconds"] == 6.0
    assert thub("runs", "status", str(tmp_path)).returncode == 2


def test_a_refused_submission_leaves_no_directory_behind(tmp_path: Path) -> None:
    # issue 16: submit repeated the local run's lock/prepare/record steps and missed one: a run
    # directory made only to be locked stayed behind when preparing it refused (here --resume)
    out = tmp_path / "never-ran"
    done = thub("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
                str(ROOT / "examples" / "data" / "chat.jsonl"), "--ckpt-output-dir", str(out),
                "--launcher", "slurm", "--resume", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "nothing to resume" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
