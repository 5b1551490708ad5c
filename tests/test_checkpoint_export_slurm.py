"""``--export DIR`` on ``--launcher slurm``: a CPU job chained ``afterok`` after the last training job, on the
profile's ``export_partition`` (unset: the training partition), without GPUs, running
``python -m thub.checkpoint.export RUN_DIR DIR``; rendered and dry-run here (tests/test_slurm_cluster.py runs it
on the real local cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.launch.profiles import ClusterProfile
from thub.launch.slurm import SlurmRequest, export_directives, render_export_script, render_script, sbatch_commands

ROOT = Path(__file__).parent.parent


def _request(export: str | None = "/models/sft final", **profile: object) -> SlurmRequest:
    return SlurmRequest(profile=ClusterProfile(name="c", **profile), run_dir=Path("/runs/sft-demo"),  # type: ignore[arg-type]
                        algorithm="sft", procs_per_node=4, python="/opt/venv/bin/python", thub_version="TEST",
                        workdir=Path("/home/user/project"), max_restarts=1, export=export)


def test_the_export_job_is_chained_afterok_after_the_last_training_job() -> None:
    commands = sbatch_commands(_request())
    assert len(commands) == 3 and commands[1][-1].endswith("job.sbatch")
    assert commands[2] == ["sbatch", "--parsable", "--dependency=afterok:{prev}", "--kill-on-invalid-dep=yes",
                           "/runs/sft-demo/slurm/export.sbatch"]
    assert len(sbatch_commands(_request(None))) == 2  # no export, no job


def test_the_export_job_runs_on_the_cpu_partition_without_gpus() -> None:
    gpu = {"partition": "gpu", "gpus_per_node": 4, "gpu_type": "a100", "cpus_per_node": 32, "account": "p1",
           "constraint": "a100", "offline": True, "preamble": ["module load cuda"]}
    lines = export_directives(_request(**gpu, export_partition="cpu"))
    assert "--partition=cpu" in lines and "--account=p1" in lines and "--nodes=1" in lines and "--ntasks=1" in lines
    assert not [line for line in lines if "gres" in line or "gpus" in line or "constraint" in line], lines
    assert "--partition=gpu" in export_directives(_request(**gpu))  # unset: the training partition
    script = render_export_script(_request(**gpu, export_partition="cpu"))
    assert "#SBATCH --output=logs/slurm-export-%j.out" in script and "module load cuda" in script
    assert "export HF_HUB_OFFLINE=1" in script and "PYTORCH_CUDA_ALLOC_CONF" in script
    assert script.rstrip().endswith('"$PYTHON" -m thub.checkpoint.export "$RUN_DIR" \'/models/sft final\'')
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "thub.checkpoint.export" not in render_script(_request(**gpu))  # the training job does not export


def test_a_container_profile_runs_the_export_in_its_container() -> None:
    pyxis = render_export_script(_request(container={"runtime": "pyxis", "image": "nvcr.io#img"}))
    assert "srun --ntasks=1 '--container-image=nvcr.io#img' --container-mounts=/runs/sft-demo:/runs/sft-demo " \
           '"$PYTHON" -m thub.checkpoint.export' in pyxis
    apptainer = render_export_script(_request(container={"runtime": "apptainer", "image": "/i.sif"}))
    assert 'apptainer exec --bind /runs/sft-demo /i.sif "$PYTHON" -m thub.checkpoint.export' in apptainer


def test_profiles_refuse_an_export_partition_that_is_no_directive_token() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="export_partition"):
        ClusterProfile(name="c", export_partition="cpu; rm -rf /")


def test_dry_run_shows_and_writes_the_export_job(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text((ROOT / "examples" / "data" / "chat.jsonl").read_text())
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_"))}
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", "m",
                           "--data-path", "d.jsonl", "--ckpt-output-dir", str(tmp_path / "run"), "--launcher",
                           "slurm", "--export", "hf", "--dry-run", "--json"], capture_output=True, text=True,
                          cwd=tmp_path, env=environ)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["export"]["path"] == "hf" and "CPU job chained afterok" in plan["export"]["when"]
    assert plan["launch"]["sbatch"][-1][2] == "--dependency=afterok:{prev}"
    script = (tmp_path / "run" / "slurm" / "export.sbatch").read_text()
    assert f"cd {tmp_path}" in script and "thub.checkpoint.export \"$RUN_DIR\" hf" in script
    assert not (tmp_path / "hf").exists()
