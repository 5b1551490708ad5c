"""``thub checkpoint verify DIR --source SHARDED``: a consolidated FSDP2 DCP checkpoint compared, logits for logits,
with the checkpoint loaded by torch's own DCP loader (the source model built on the CPU with every buffer the
checkpoint does not save, e.g. Llama's rotary ``inv_freq``); a consolidated output with one tensor changed fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("torch", "safetensors", "transformers")]

ROOT = Path(__file__).resolve().parents[1]


#: a thub subprocess (the ``thub`` fixture of tests/conftest.py)
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def consolidated(fsdp2_dcp: Path, tiny_model: Path, thub: Run,
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the session's FSDP2 DCP checkpoint of the tiny model from 2 gloo processes, its consolidated HF folder)."""
    hf = tmp_path_factory.mktemp("fsdp2-source") / "hf"
    done = thub("checkpoint", "consolidate", str(fsdp2_dcp), "--out", str(hf), "--base", str(tiny_model))
    assert done.returncode == 0, done.stderr
    return fsdp2_dcp, hf


def test_verify_source_compares_logits_with_the_dcp_checkpoint(consolidated: tuple[Path, Path], thub: Run) -> None:
    dcp, hf = consolidated
    done = thub("checkpoint", "verify", str(hf), "--source", str(dcp), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    logits = next(c for c in report["checks"] if c["check"] == "logits")
    assert logits["ok"] is True and "loaded by its own library" in logits["message"], logits


def test_verify_source_fails_on_a_changed_tensor(consolidated: tuple[Path, Path], thub: Run,
                                                 tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    dcp, hf = consolidated
    changed = tmp_path / "changed"
    shutil.copytree(hf, changed)
    tensors = load_file(str(changed / "model.safetensors"))
    name = next(n for n in tensors if n.endswith("layers.0.self_attn.q_proj.weight"))
    tensors[name] = tensors[name] * 3 + 0.5  # finite and the right shape: only the logits can tell
    save_file(tensors, str(changed / "model.safetensors"), metadata={"format": "pt"})
    done = thub("checkpoint", "verify", str(changed), "--source", str(dcp), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["failed"]["check"] == "logits", report["failed"]
    checks = {c["check"]: c["ok"] for c in report["checks"]}
    assert checks["shapes"] is True and checks["finite"] is True
    assert str(dcp) in report["failed"]["message"] and "tolerance" in report["failed"]["message"]


def test_export_consolidates_a_sharded_final_model_and_verifies_it(consolidated: tuple[Path, Path],
                                                                   tiny_model: Path, tmp_path: Path) -> None:
    """The export of a run whose final model is a DCP checkpoint (the SLURM export job's entry point)."""
    from thub.checkpoint.layouts import final_model

    dcp, _ = consolidated
    run = tmp_path / "run"
    shutil.copytree(dcp, run / "final")
    (run / "thub_run.json").write_text(json.dumps({"parameters": {"model_path": {"value": str(tiny_model)}}}))
    result = {"status": "succeeded", "final_model": final_model(str(run / "final"))}
    (run / "result.json").write_text(json.dumps(result))
    done = subprocess.run([sys.executable, "-m", "thub.checkpoint.export", str(run), str(tmp_path / "hf")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    export = json.loads((run / "result.json").read_text())["export"]
    assert export["action"] == "consolidate" and export["layout"] == "torch-dcp" and export["ok"] is True, export
    checks = {c["check"]: c["ok"] for c in export["checks"]}
    assert checks["logits"] is True and checks["tokenizer"] is True  # against the DCP checkpoint and the base
    assert (tmp_path / "hf" / "chat_template.jinja").read_bytes() == (tiny_model / "chat_template.jinja").read_bytes()
