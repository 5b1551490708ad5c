"""``thub checkpoint`` on a real LLaMA-Factory LoRA run (CPU, the managed environment): LLaMA-Factory saves the
adapter into output_dir itself beside its checkpoint-N folders; ``ls`` lists both, ``merge`` merges it with PEFT
in thub's environment and ``verify`` finds the logits equal to the adapter on its base (issue 27)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_module("peft")


def _thub(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # a cache of this test process's own: ~/.cache/thub is shared with every checkout using this venv
    env = {**environ, "XDG_CACHE_HOME": os.path.join(tempfile.gettempdir(), f"thub-lf-checkpoint-{os.getpid()}")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env,
                          timeout=900)


def test_llamafactory_lora_adapter_lists_merges_and_verifies(lf_env: dict, tiny_model: Path, demo_data: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "lora"
    done = _thub(lf_env["environ"], "train", "lora_sft", "--backend", "llamafactory", "--model-path", str(tiny_model),
                 "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "2",
                 "--save-steps", "1", "--lora-r", "4", "--learning-rate", "5e-2")
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["final_model"]["layout"] == "peft-adapter" and result["final_model"]["loadable"] is False
    listed = _thub(lf_env["environ"], "checkpoint", "ls", str(out), "--json")
    assert listed.returncode == 0, listed.stderr
    found = {Path(c["path"]).name: c for c in json.loads(listed.stdout)["checkpoints"]}
    assert found["checkpoints"]["layout"] == "peft-adapter" and found["checkpoints"]["complete"] is True
    assert found["checkpoint-2"]["step"] == 2 and found["checkpoint-2"]["complete"] is True
    merged = tmp_path / "merged"
    done = _thub(lf_env["environ"], "checkpoint", "merge", str(out / "checkpoints"), "--out", str(merged))
    assert done.returncode == 0, done.stderr
    verified = _thub(lf_env["environ"], "checkpoint", "verify", str(merged), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    checks = {c["check"]: c for c in json.loads(verified.stdout)["checks"]}
    assert all(c["ok"] is True for c in checks.values()), checks
