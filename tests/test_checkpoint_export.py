"""``thub train ... --export DIR`` (issue 27 item 5) on real trl CPU runs of the tiny model: ``lora_sft`` ends with
its adapter merged into a verified HF folder, ``sft`` with its final model copied into one; both load with
``AutoModelForCausalLM`` and pass ``thub checkpoint verify``. The export's outcome is result.json's ``export``; a
dry run shows the step; a non-empty export folder is refused before training; a final model that fails a check
(the SLURM export job's entry point on a corrupted run) leaves the training ``succeeded`` and exits 1."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import ExportedLoraRun  # tests/conftest.py

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("peft", "safetensors"), pytest.mark.needs_backend("trl")]


#: a thub subprocess (the ``thub`` fixture of tests/conftest.py)
Run = Callable[..., subprocess.CompletedProcess[str]]


def _train(thub: Run, algorithm: str, model: Path, data: Path, run: Path,
           *extra: str) -> subprocess.CompletedProcess[str]:
    lora = ("--lora-r", "4") if algorithm == "lora_sft" else ()
    return thub("train", algorithm, "--backend", "trl", "--model-path", str(model), "--data-path",
                str(data / "chat.jsonl"), "--ckpt-output-dir", str(run), "--max-steps", "2", "--learning-rate",
                "5e-2", *lora, *extra)


def _loads(folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([[1, 5, 9, 42]])).logits).all()


def _verified(thub: Run, folder: Path) -> dict:
    done = thub("checkpoint", "verify", str(folder), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {c["check"]: c["ok"] for c in json.loads(done.stdout)["checks"]}


@pytest.fixture(scope="module")
def lora_export(trl_lora_run: ExportedLoraRun) -> tuple[Path, Path]:
    """The session's trl lora_sft run with ``--export`` (tests/conftest.py): (its run folder, the export)."""
    assert "export: " in trl_lora_run.stdout and "verified" in trl_lora_run.stdout
    return trl_lora_run.run, trl_lora_run.hf


def test_lora_sft_export_is_a_merged_verified_hf_folder(thub: Run, lora_export: tuple[Path, Path]) -> None:
    run, hf = lora_export
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "succeeded" and result["final_model"]["layout"] == "peft-adapter"
    export = result["export"]
    assert export["path"] == str(hf) and export["action"] == "merge" and export["ok"] is True, export
    assert export["source"] == str(run / "final") and export["failed"] is None and export["error"] is None
    checks = {c["check"]: c["ok"] for c in export["checks"]}
    assert checks["logits"] is True and checks["tokenizer"] is True and checks["finite"] is True
    _loads(hf)
    verified = _verified(thub, hf)  # again, from the folder alone (its merge record names base and adapter)
    assert verified["logits"] is True and verified["tokenizer"] is True
    assert not [p for p in hf.parent.iterdir() if p.name.startswith(".")], "staging folder left behind"


def test_sft_export_copies_the_final_model_without_training_state(thub: Run, tiny_model: Path, demo_data: Path,
                                                                   tmp_path: Path) -> None:
    done = _train(thub, "sft", tiny_model, demo_data, tmp_path / "run", "--export", str(tmp_path / "hf"), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["export"]["action"] == "copy" and result["export"]["ok"] is True, result["export"]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["export"] == result["export"]
    assert "export: " in done.stderr  # --json: stdout is the result alone
    hf = tmp_path / "hf"
    assert (hf / "model.safetensors").is_file() and (hf / "chat_template.jinja").is_file()
    assert not (hf / "training_args.bin").exists() and not (hf / "optimizer.pt").exists()
    _loads(hf)
    verified = thub("checkpoint", "verify", str(hf), "--base", str(tiny_model), "--source",
                    str(tmp_path / "run" / "final"), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert {c["check"]: c["ok"] for c in json.loads(verified.stdout)["checks"]}["logits"] is True


def test_config_key_and_dry_run_show_the_export_step(thub: Run, tiny_model: Path, demo_data: Path,
                                                     tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"export: {tmp_path / 'hf'}\n")
    done = _train(thub, "lora_sft", tiny_model, demo_data, tmp_path / "run", "--config", str(config), "--dry-run",
                  "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["parameters"]["export"]["value"] == str(tmp_path / "hf")
    assert plan["export"]["path"] == str(tmp_path / "hf") and "verify" in plan["export"]["steps"][-1]
    assert not (tmp_path / "run").exists() and not (tmp_path / "hf").exists()


def test_a_non_empty_export_folder_is_refused_before_training(thub: Run, tiny_model: Path, demo_data: Path,
                                                               tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("someone's file\n")
    done = _train(thub, "lora_sft", tiny_model, demo_data, tmp_path / "run", "--export", str(tmp_path / "hf"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "export" in done.stderr and "not an empty folder" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["keep.txt"]
    no_final = _train(thub, "lora_sft", tiny_model, demo_data, tmp_path / "run2", "--export", str(tmp_path / "hf2"),
                      "--no-save-final-checkpoint")
    assert no_final.returncode == 2 and "save_final_checkpoint" in no_final.stderr, no_final.stderr


def test_a_final_model_failing_verify_leaves_the_run_succeeded_and_exits_1(thub: Run, lora_export: tuple[Path, Path],
                                                                         tmp_path: Path) -> None:
    """The SLURM export job's entry point on a copy of the run whose merged output would hold a NaN: here the
    adapter's own weights are corrupted, so the merge refuses to write the NaN it makes (issue 35)."""
    import torch
    from safetensors.torch import load_file, save_file

    run, _ = lora_export
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    result = json.loads((copy / "result.json").read_text())
    result["final_model"]["path"] = result["final_checkpoint"] = str(copy / "final")
    (copy / "result.json").write_text(json.dumps(result))
    adapter = copy / "final" / "adapter_model.safetensors"
    tensors = load_file(str(adapter))
    name = next(n for n in tensors if "lora_B" in n)
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(adapter), metadata={"format": "pt"})
    done = subprocess.run([sys.executable, "-m", "thub.checkpoint.export", str(copy), str(tmp_path / "hf")],
                          capture_output=True, text=True, env=thub.environ(), timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "export FAILED" in done.stdout and "finite" in done.stdout and "Traceback" not in done.stderr
    written = json.loads((copy / "result.json").read_text())
    assert written["status"] == "succeeded"
    assert written["export"]["ok"] is False and "non-finite values (NaN or inf)" in written["export"]["error"]
    assert not (tmp_path / "hf").exists()
