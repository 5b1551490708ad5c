"""``thub checkpoint merge`` and ``verify`` on a real adapter: trl ``lora_sft`` on the tiny model (CPU), merged with
PEFT, verified (logits equal the adapter on its base), then corrupted (a NaN tensor, a changed chat template) and
refused by ``verify`` with exit 1 and a message naming what is wrong (issue 27's CI test)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import ExportedLoraRun  # tests/conftest.py

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("peft", "safetensors"), pytest.mark.needs_backend("trl")]


#: a thub subprocess (the ``thub`` fixture of tests/conftest.py)
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def lora_run(trl_lora_run: ExportedLoraRun) -> Path:
    """The session's trl lora_sft run of 3 steps with a checkpoint at step 2 (an adapter in
    checkpoints/checkpoint-2), tests/conftest.py."""
    return trl_lora_run.run


@pytest.fixture(scope="module")
def merged(lora_run: Path, thub: Run) -> Path:
    out = lora_run.parent / "merged"
    done = thub("checkpoint", "merge", str(lora_run / "final"), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["base"] and report["dtype"] == "float32" and "model.safetensors" in report["files"]
    return out


def _verify(thub: Run, folder: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = thub("checkpoint", "verify", str(folder), "--json", *extra)
    return done, json.loads(done.stdout)


def test_the_run_lists_its_adapters_and_names_its_final_model(thub: Run, lora_run: Path) -> None:
    result = json.loads((lora_run / "result.json").read_text())
    assert result["final_model"]["layout"] == "peft-adapter" and result["final_model"]["loadable"] is False
    assert result["final_model"]["next"] == f"thub checkpoint merge {lora_run / 'final'} --out DIR"
    done = thub("checkpoint", "ls", str(lora_run), "--json")
    assert done.returncode == 0, done.stderr
    found = {Path(c["path"]).name: c for c in json.loads(done.stdout)["checkpoints"]}
    assert set(found) == {"checkpoint-2", "checkpoint-3", "final"}
    assert found["checkpoint-2"]["step"] == 2 and found["checkpoint-2"]["complete"] is True
    assert found["checkpoint-2"]["writer"] == "HF Trainer checkpoint-N" and found["final"]["dtype"] == "F32"
    assert all(c["layout"] == "peft-adapter" and c["details"]["base_model"] for c in found.values())


def test_merge_is_peft_merge_and_unload(lora_run: Path, merged: Path, tiny_model: Path) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    saved = load_file(str(merged / "model.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    expected = PeftModel.from_pretrained(base, lora_run / "final").merge_and_unload().state_dict()
    assert set(saved) == set(expected)
    for name, tensor in saved.items():
        assert torch.equal(tensor, expected[name]), name
    untouched = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert any(not torch.equal(saved[n], untouched[n]) for n in saved if "proj" in n)  # the adapter is in
    assert (merged / "chat_template.jinja").read_text() == (tiny_model / "chat_template.jinja").read_text()
    assert (merged / "generation_config.json").exists() and (merged / "tokenizer.json").exists()
    record = json.loads((merged / "thub_merge.json").read_text())
    assert record["adapter"] == str(lora_run / "final") and record["base"] == str(tiny_model)


def test_verify_passes_every_check_on_the_merge(thub: Run, merged: Path) -> None:
    done, report = _verify(thub, merged)
    assert done.returncode == 0, done.stderr
    checks = {c["check"]: c for c in report["checks"]}
    assert [c["check"] for c in report["checks"]] == ["self-contained", "complete", "config", "shapes", "finite",
                                                      "tokenizer", "logits", "manifest"]
    assert all(c["ok"] is True for c in checks.values()), checks
    assert "tolerance 0.0001 for float32" in checks["logits"]["message"]
    assert report["tolerance"]["value"] == 1e-4 and report["ok"] is True


def test_verify_fails_on_a_nan_tensor(thub: Run, merged: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "nan"
    shutil.copytree(merged, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj.weight"
    tensors[name][0, 3] = float("nan")
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    done, report = _verify(thub, broken)
    assert done.returncode == 1
    assert report["failed"]["check"] == "finite"
    assert f"tensor {name} has 1 non-finite value(s)" in report["failed"]["message"]
    assert f"check finite failed: model.safetensors: tensor {name} has 1 non-finite" in done.stderr
    assert "Traceback" not in done.stderr
    assert torch.isnan(load_file(str(broken / "model.safetensors"))[name]).any()  # verify changed nothing


def test_verify_fails_on_a_changed_chat_template(thub: Run, merged: Path, tmp_path: Path) -> None:
    broken = tmp_path / "template"
    shutil.copytree(merged, broken)
    template = broken / "chat_template.jinja"
    # what an axolotl save did to OpenThoughts' model: the tool-call branch dropped
    text = template.read_text()
    stripped = text.replace("tool_calls", "no_tool_calls")
    assert stripped != text
    template.write_text(stripped)
    done, report = _verify(thub, broken)
    assert done.returncode == 1, done.stdout
    assert report["failed"]["check"] == "tokenizer"
    assert "the chat template renders the tool-call probe unlike the base" in report["failed"]["message"]
    assert "check tokenizer failed" in done.stderr and "Traceback" not in done.stderr
    checks = {c["check"]: c["ok"] for c in report["checks"]}
    assert checks["finite"] is True and checks["shapes"] is True  # every check is reported, not only the first


def test_verify_text_output_and_dry_run(thub: Run, merged: Path, lora_run: Path) -> None:
    done = thub("checkpoint", "verify", str(merged))
    assert done.returncode == 0, done.stderr
    assert "logits" in done.stdout and f"{merged}: verified" in done.stdout
    dry = thub("checkpoint", "verify", str(merged), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True and plan["source"] == str(lora_run / "final") and "checks" in plan


def test_merge_dry_run_writes_nothing_and_bad_input_exits_2(thub: Run, lora_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "never"
    dry = thub("checkpoint", "merge", str(lora_run / "final"), "--out", str(out), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would merge" in dry.stdout and not out.exists()
    # not an adapter
    done = thub("checkpoint", "merge", str(lora_run / "logs"), "--out", str(out))
    assert done.returncode == 2 and "not a PEFT adapter" in done.stderr and "Traceback" not in done.stderr
    # a base that is not there: the adapter's config is named
    adapter = tmp_path / "adapter"
    shutil.copytree(lora_run / "final", adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    done = thub("checkpoint", "merge", str(adapter), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert f"{adapter / 'adapter_config.json'}: base_model_name_or_path: {tmp_path / 'gone'}" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
    # verify: an adapter is not a model; a folder of nothing is no checkpoint
    done = thub("checkpoint", "verify", str(lora_run / "final"))
    assert done.returncode == 2 and "is a PEFT adapter: merge it first" in done.stderr
    done = thub("checkpoint", "verify", str(lora_run / "logs"))
    assert done.returncode == 2 and "not a checkpoint of a known layout" in done.stderr
