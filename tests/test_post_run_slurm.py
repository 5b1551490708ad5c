"""The post-run steps on ``--launcher slurm`` (thub.runner.poststeps.STEPS): train → export → eval → push, each
a CPU job chained ``afterok`` on its profile partition (export and eval: ``export_partition``; push:
``push_partition``, a partition with network: not told the compute nodes are offline). The dry run renders and
shows every script; on the real local cluster (scripts/slurm-up.sh) train → export → push(file://) runs and
``thub runs wait`` waits for the last job and reports each step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.launch.profiles import ClusterProfile
from thub.launch.slurm import SlurmRequest, render_step_script, sbatch_commands, step_directives

ROOT = Path(__file__).parent.parent
BINARIES = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel")


def _environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "PET_", "SLURM_"))}
    return {**environ, **(extra or {})}


def _request(**profile: object) -> SlurmRequest:
    return SlurmRequest(profile=ClusterProfile(name="c", **profile), run_dir=Path("/runs/r"),  # type: ignore[arg-type]
                        algorithm="sft", python="/venv/bin/python", thub_version="TEST", workdir=Path("/p"),
                        export="/models/hf", post_steps=("export", "eval", "push"))


def test_each_step_is_a_job_chained_afterok_after_the_one_before() -> None:
    commands = sbatch_commands(_request())
    assert [c[-1].rsplit("/", 1)[-1] for c in commands] == ["job.sbatch", "export.sbatch", "eval.sbatch",
                                                             "push.sbatch"]
    assert all(c[2] == "--dependency=afterok:{prev}" and "--kill-on-invalid-dep=yes" in c for c in commands[1:])


def test_steps_run_on_their_partitions_and_push_has_the_network() -> None:
    profile = {"partition": "gpu", "export_partition": "cpu", "push_partition": "xfer", "gpus_per_node": 4,
               "offline": True}
    assert "--partition=cpu" in step_directives(_request(**profile), "eval")
    assert "--partition=xfer" in step_directives(_request(**profile), "push")
    assert "--output=logs/slurm-push-%j.out" in step_directives(_request(**profile), "push")
    # without push_partition: the export partition (and the offline environment of the compute nodes)
    assert "--partition=cpu" in step_directives(_request(**{**profile, "push_partition": None}), "push")
    push = render_step_script(_request(**profile), "push")
    assert push.rstrip().endswith('"$PYTHON" -m thub.runner.poststeps push "$RUN_DIR"')
    assert "HF_HUB_OFFLINE" not in push and "chained afterok after the eval job" in push
    evaluate = render_step_script(_request(**profile), "eval")
    assert "export HF_HUB_OFFLINE=1" in evaluate and not [line for line in evaluate.splitlines() if "gres" in line]
    assert evaluate.rstrip().endswith('"$PYTHON" -m thub.runner.poststeps eval "$RUN_DIR"')
    for name in ("export", "eval", "push"):
        assert subprocess.run(["bash", "-n"], input=render_step_script(_request(**profile), name),
                              text=True).returncode == 0


def test_dry_run_renders_and_shows_every_script(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text((ROOT / "examples" / "data" / "chat.jsonl").read_text())
    (tmp_path / "mem.jsonl").write_text('{"prompt": "a", "answer": "b"}\n')
    (tmp_path / "clusters.yaml").write_text("c:\n  partition: gpu\n  export_partition: cpu\n"
                                            "  push_partition: xfer\n  offline: true\n")
    base = [sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
            "d.jsonl", "--ckpt-output-dir", str(tmp_path / "run"), "--launcher", "slurm", "--cluster", "c",
            "--export", "hf", "--eval", "mem.jsonl", "--push", "hf://org/tuned", "--dry-run"]
    env = _environ({"THUB_CLUSTER_FILE": str(tmp_path / "clusters.yaml")})
    done = subprocess.run([*base, "--json"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [s["name"] for s in plan["launch"]["post_steps"]] == ["export", "eval", "push"]
    assert len(plan["launch"]["sbatch"]) == 4 and plan["post_run"]["push"]["private"] is True
    assert plan["post_run"]["eval"]["tasks"] == [{"name": "mem", "path": str(tmp_path / "mem.jsonl")}]
    for step in plan["launch"]["post_steps"]:
        assert Path(step["script_path"]).read_text() == step["script"]
    assert "--partition=xfer" in (tmp_path / "run" / "slurm" / "push.sbatch").read_text()
    text = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert text.returncode == 0, text.stderr
    assert all(f"SLURM {name} script" in text.stderr for name in ("export", "eval", "push")), text.stderr
    assert '-m thub.checkpoint.export "$RUN_DIR" hf' in text.stdout
    assert all(f'-m thub.runner.poststeps {name} "$RUN_DIR"' in text.stdout for name in ("eval", "push"))
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
@pytest.mark.needs_system(*BINARIES)
def test_train_export_push_run_as_a_chain_on_the_local_cluster(slurm_env: dict[str, str], tiny_model: Path,
                                                               demo_data: Path, tmp_path: Path) -> None:
    """lora_sft trains; the export job merges and verifies the adapter; the eval job scores it with the real
    lm-evaluation-harness (where thub-plugin-lmeval is installed); the push job sends the folder to file://
    with its card; ``thub runs wait`` returns after the push job and reports every step."""
    out, hf, pushed = tmp_path / "run", tmp_path / "hf", tmp_path / "pushed"
    env = _environ(slurm_env)
    from importlib.util import find_spec

    evaluate = find_spec("thub_plugin_lmeval") is not None and find_spec("lm_eval") is not None
    task = tmp_path / "capitals.jsonl"
    task.write_text((ROOT / "examples" / "eval" / "capitals.jsonl").read_text())
    eval_args = ["--eval", str(task)] if evaluate else []
    done = subprocess.run([sys.executable, "-m", "thub", "train", "lora_sft", "--backend", "trl", "--model-path",
                           str(tiny_model), "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir",
                           str(out), "--launcher", "slurm", "--max-steps", "2", "--lora-r", "4",
                           "--effective-batch-size", "2", "--export", str(hf), *eval_args, "--push",
                           f"file://{pushed}", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    job_ids = json.loads(done.stdout)["job_ids"]
    steps = ["export", *(["eval"] if evaluate else []), "push"]
    assert len(job_ids) == 1 + len(steps)  # training, then one job per step
    waited = subprocess.run([sys.executable, "-m", "thub", "runs", "wait", str(out), "--timeout", "1200", "--json"],
                            capture_output=True, text=True, env=env, timeout=1300)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "logs").glob("*")))
    assert waited.returncode == 0, (waited.stdout[-3000:], waited.stderr, logs)
    status = json.loads(waited.stdout)
    assert [(s["name"], s["job_id"], s["outcome"]["ok"]) for s in status["steps"]] == [
        (name, job_id, True) for name, job_id in zip(steps, job_ids[1:])]
    if evaluate:  # scored on the eval job's node, results with the run
        scored = json.loads((out / "eval" / "capitals.json").read_text())
        assert scored["models"]["final"]["model_path"] == str(hf) and scored["models"]["final"]["samples"] == 8
    assert (pushed / "README.md").is_file() and (pushed / "model.safetensors").is_file()
    result = json.loads((out / "result.json").read_text())
    assert result["post_run"]["push"]["source"] == str(hf) and result["push"][-1]["to"] == f"file://{pushed}"
    assert "push: " in (out / "logs" / f"slurm-push-{job_ids[-1]}.out").read_text()
    text = subprocess.run([sys.executable, "-m", "thub", "runs", "wait", str(out)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert text.returncode == 0 and "verified" in text.stderr and f"push: {hf} -> file://{pushed}" in text.stderr
