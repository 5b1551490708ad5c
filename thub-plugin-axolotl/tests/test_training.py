"""axolotl for real, in its managed environment: a CPU run of the tiny model through ``thub train``
(metrics with max_steps, checkpoints, the template check), SIGTERM -> checkpoint -> ``--resume``.

The environment is 4.3 GB and takes 5-13 minutes to build on two cores, too much for CI: these
tests run where ``AXOLOTL_TEST_DATA_DIR`` names a thub data directory holding it
(``THUB_DATA_DIR=DIR thub install axolotl --into managed --extra axolotl``). They passed on
2026-12-01 with axolotl 0.19.0 and the CPU torch 2.13.0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.install]


@pytest.fixture(scope="module")
def ax_env() -> dict[str, str]:
    data_dir = os.environ.get("AXOLOTL_TEST_DATA_DIR")
    if not data_dir or not (Path(data_dir) / "envs" / "axolotl" / "thub-env.json").exists():
        pytest.skip("axolotl's managed environment (4.3 GB) is not built in CI: set AXOLOTL_TEST_DATA_DIR")
    from thub.envs.installer import refresh_manifest
    from thub.envs.manifest import read_manifest

    # the manifest keeps the backend's registration as installed: describe the plugin (installed
    # editable there) again, so that an algorithm new in this checkout is the managed env's too
    refresh_manifest(read_manifest(Path(data_dir) / "envs" / "axolotl" / "thub-env.json"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update({"THUB_DATA_DIR": data_dir, "THUB_DISABLE_PLUGINS": "axolotl", "CUDA_VISIBLE_DEVICES": ""})
    return environ


def common(model: Path, data: Path, out: Path) -> list[str]:
    return ["train", "sft", "--backend", "axolotl", "--model-path", str(model), "--data-path", str(data),
            "--ckpt-output-dir", str(out)]


def test_cpu_run_metrics_checkpoints_and_templates(ax_env: dict[str, str], tiny_model: Path, demo_data: Path,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "sft"
    done = subprocess.run([sys.executable, "-m", "thub", *common(tiny_model, demo_data / "chat.jsonl", out),
                           "--max-steps", "4", "--save-steps", "2", "--effective-batch-size", "4"],
                          capture_output=True, text=True, env=ax_env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded"
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3, 4] and all(line["max_steps"] == 4 for line in lines)
    paths = [c["path"] for c in result["checkpoints"]]
    assert paths == [str(out / "checkpoints" / "checkpoint-2"), str(out / "checkpoints" / "checkpoint-4"),
                     str(out / "checkpoints")]
    assert len(result["template_check"]["checked"]) == 3 and result["template_check"]["mismatches"] == []


def test_sigterm_checkpoints_and_resume_continues(ax_env: dict[str, str], tiny_model: Path, demo_data: Path,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "resume"
    args = [sys.executable, "-m", "thub", *common(tiny_model, demo_data / "chat.jsonl", out), "--max-steps", "60",
            "--effective-batch-size", "2"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ax_env)
    deadline = time.time() + 600
    while len(read_metrics(out / "training_metrics.jsonl")) < 5:
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    stopped_at = read_metrics(out / "training_metrics.jsonl")[-1]["step"]
    assert result["status"] == "interrupted"
    assert result["final_checkpoint"] == str(out / "checkpoints" / f"checkpoint-{stopped_at}")
    resumed = subprocess.run([*args, "--resume"], capture_output=True, text=True, env=ax_env, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == list(range(1, 61))


@pytest.mark.parametrize("algorithm, extra, data", [
    ("lora_sft", ["--lora-r", "4"], "chat.jsonl"),
    ("sft", ["--is-pretraining", "--block-size", "32"], "documents.jsonl"),
])
def test_lora_and_pretraining_runs(ax_env: dict[str, str], tiny_model: Path, demo_data: Path, tmp_path: Path,
                                   algorithm: str, extra: list[str], data: str) -> None:
    out = tmp_path / algorithm
    args = [a if a != "sft" else algorithm for a in common(tiny_model, demo_data / data, out)]
    done = subprocess.run([sys.executable, "-m", "thub", *args, "--max-steps", "2", *extra],
                          capture_output=True, text=True, env=ax_env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2]
    if algorithm == "lora_sft":
        assert (out / "checkpoints" / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("unmask", [False, True])
def test_measured_examples_and_masks_equal_thubs_on_the_edge_cases(
        ax_env: dict[str, str], unmask: bool, tiny_model: Path, edge_cases: Path, edge_cases_max_seq_len: int,
        tmp_path: Path) -> None:
    """issue 25 items 3 and 5 for real: what axolotl's Trainer built (its train dataset through its
    collator, measured by thub's callback before step 1) is every edge-case row, the overlong one
    cut, with thub's masks (unmask_messages: every token)."""
    out = tmp_path / "edge"
    done = subprocess.run([sys.executable, "-m", "thub", *common(tiny_model, edge_cases / "chat.jsonl", out),
                           "--max-steps", "1", "--max-seq-len", str(edge_cases_max_seq_len),
                           "--set", f"unmask_messages={str(unmask).lower()}"],
                          capture_output=True, text=True, env=ax_env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    built = json.loads((out / "result.json").read_text())["built"]
    assert built["by"].startswith("axolotl ") and built["examples"] == 10
    assert built["matches"] is True and built["masks_equal"] is True, built
    if unmask:  # every token but each example's first (never predicted) has a loss
        assert built["trained_tokens"] == built["tokens"] - 10


def test_measured_pretraining_blocks_equal_thubs(ax_env: dict[str, str], tiny_model: Path, edge_cases: Path,
                                                 tmp_path: Path) -> None:
    """issue 25 item 4 for real: 5 documents + 5 EOS = 5535 tokens, 86 blocks of 64, as thub builds them."""
    out = tmp_path / "pt"
    done = subprocess.run([sys.executable, "-m", "thub", *common(tiny_model, edge_cases / "documents.jsonl", out),
                           "--max-steps", "1", "--is-pretraining", "--block-size", "64"],
                          capture_output=True, text=True, env=ax_env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    built = json.loads((out / "result.json").read_text())["built"]
    assert (built["examples"], built["tokens"], built["trained_tokens"], built["matches"]) == (86, 5504, 5418, True)


def test_compare_with_trl_on_the_edge_cases_finds_no_difference(ax_env: dict[str, str], tiny_model: Path,
                                                                edge_cases: Path, edge_cases_max_seq_len: int,
                                                                tmp_path: Path) -> None:
    """``thub compare sft --backends trl,axolotl``: the same examples and masks, and (thub's row order,
    the Trainer's seeded sampler on both) the same loss at each step. Measured 2026-12-01: 6.47, 6.557."""
    done = subprocess.run([sys.executable, "-m", "thub", "compare", "sft", "--backends", "trl,axolotl", "--steps", "2",
                           "--out", str(tmp_path / "cmp"), "--set", f"model_path={tiny_model}",
                           "--set", f"data_path={edge_cases / 'chat.jsonl'}",
                           "--set", f"max_seq_len={edge_cases_max_seq_len}", "--set", "effective_batch_size=2",
                           "--json"], capture_output=True, text=True, env=ax_env, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    document = json.loads(done.stdout)
    trl, axolotl = document["backends"]
    assert (trl["backend"], axolotl["backend"]) == ("trl", "axolotl")
    for record in (trl, axolotl):
        assert record["status"] == "succeeded" and record["examples"] == 10 and record["as_validated"] is True
    assert trl["trained_tokens"] == axolotl["trained_tokens"]
    assert document["differences"] == [] and document["first_difference"] is None
    for ours, theirs in zip(trl["steps"], axolotl["steps"], strict=True):
        assert theirs["loss"] == pytest.approx(ours["loss"], rel=1e-3)


def _preference_file(path: Path, algorithm: str) -> Path:
    """Six rows with one learnable preference (a friendly answer over a curt one), in thub's canonical
    dpo (prompt/chosen/rejected) or kto (prompt/completion/label) shape."""
    rows = []
    for i in range(6):
        prompt = [{"role": "user", "content": f"Can you help with task {i}?"}]
        good, bad = [{"role": "assistant", "content": f"Of course, task {i} is done."}], [
            {"role": "assistant", "content": "No."}]
        rows.append({"prompt": prompt, "chosen": good, "rejected": bad} if algorithm == "dpo" else
                    {"prompt": prompt, "completion": good if i % 2 else bad, "label": bool(i % 2)})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("algorithm", ["dpo", "kto"])
def test_cpu_preference_run_logs_rewards(ax_env: dict[str, str], tiny_model: Path, tmp_path: Path,
                                         algorithm: str) -> None:
    """axolotl's RL trainers (TRL's) on the strings thub rendered: the reference is the initial
    policy, so the first DPO loss is ln 2 (KTO's 0.5), and TRL's rewards reach thub's metrics."""
    import math

    out = tmp_path / algorithm
    done = subprocess.run([sys.executable, "-m", "thub", "train", algorithm, "--backend", "axolotl", "--model-path",
                           str(tiny_model), "--data-path", str(_preference_file(tmp_path / "p.jsonl", algorithm)),
                           "--ckpt-output-dir", str(out), "--max-steps", "4", "--effective-batch-size", "2",
                           "--learning-rate", "5e-3"], capture_output=True, text=True, env=ax_env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    assert lines[0]["loss"] == pytest.approx(math.log(2) if algorithm == "dpo" else 0.5, abs=1e-3)
    assert all("rewards/chosen" in line or "rewards/rejected" in line for line in lines)
    if algorithm == "dpo":
        assert lines[-1]["rewards/margins"] > lines[0]["rewards/margins"]
    assert json.loads((out / "built.json").read_text())["examples"] == 6
