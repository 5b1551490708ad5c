"""After a run, each checkpoint's chat template is rendered on a tool-call sample and compared with
the input model's (thub.data.template_check): result.json, the run summary and thub doctor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from thub.data.template_check import attach, check_checkpoints, load_template

# A 4-line template without tool support: what the stripped axolotl checkpoint held
STRIPPED = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
            "{{ message['content'] }}<|im_end|>\n{% endfor %}")


def _copy(model: Path, to: Path) -> Path:
    shutil.copytree(model, to)
    return to


def _strip_template(folder: Path) -> None:
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def test_same_template_matches_and_adapters_are_not_checked(tiny_model: Path, tmp_path: Path) -> None:
    same = _copy(tiny_model, tmp_path / "checkpoint-2")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    report = check_checkpoints(str(tiny_model), [str(same), str(adapter)])
    assert report["checked"] == [str(same)] and report["not_checked"] == [str(adapter)]
    assert report["mismatches"] == []
    source, _special = load_template(tiny_model)
    assert source and "tool_calls" in source  # the sample really exercises tool calls


def test_stripped_and_toolless_templates_are_mismatches(tiny_model: Path, tmp_path: Path) -> None:
    stripped = _copy(tiny_model, tmp_path / "checkpoint-4")
    _strip_template(stripped)
    toolless = _copy(tiny_model, tmp_path / "checkpoint-6")
    (toolless / "chat_template.jinja").write_text(STRIPPED)
    result = {"status": "succeeded", "checkpoints": [{"path": str(stripped), "step": 4}],
              "final_checkpoint": str(toolless)}
    warnings = attach(result, str(tiny_model))
    assert len(warnings) == 2 and result["warnings"] == warnings
    problems = {m["checkpoint"]: m["problem"] for m in result["template_check"]["mismatches"]}
    assert problems[str(stripped)].startswith("no chat template saved")
    assert problems[str(toolless)].startswith("renders differently from character")
    assert "copy the input model's tokenizer files" in warnings[0]


def test_hub_id_or_no_template_means_nothing_to_compare(tiny_model: Path, tmp_path: Path) -> None:
    assert check_checkpoints("Qwen/Qwen3-0.6B", [str(tiny_model)])["checked"] == []
    bare = _copy(tiny_model, tmp_path / "bare")
    _strip_template(bare)
    report = check_checkpoints(str(bare), [str(tiny_model)])
    assert "has no chat template" in report["reference"] and report["mismatches"] == []


def _thub(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=600)


@pytest.mark.slow
def test_every_run_checks_its_checkpoints_and_doctor_reports_a_mismatch(tiny_model: Path, demo_data: Path,
                                                                        tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                 str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "2", "--save-steps", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    check = result["template_check"]
    # TRL saves the tokenizer with each checkpoint and the final model: all render like the input
    assert len(check["checked"]) == 3 and check["mismatches"] == [] and "warnings" not in result
    assert "warning:" not in done.stderr

    doctor = _thub("doctor", "--output-dir", str(out), "--json", "--timeout", "600")  # a hang guard
    checks = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["core.checkpoint-templates"]["status"] == "ok", checks["core.checkpoint-templates"]

    _strip_template(out / "checkpoints" / "checkpoint-1")  # as axolotl's stripped save did
    doctor = _thub("doctor", "--output-dir", str(out), "--json", "--timeout", "600")  # a hang guard
    found = {c["id"]: c for c in json.loads(doctor.stdout)["checks"]}["core.checkpoint-templates"]
    assert found["status"] == "warn" and "checkpoint-1" in " ".join(found["details"]), found
