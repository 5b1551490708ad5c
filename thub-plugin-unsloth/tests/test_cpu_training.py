"""A real unsloth run on its CPU fallback (UNSLOTH_FORCE_CPU=1) with the tiny local model.

Skipped where unsloth does not import: it is not in CI's environment (see README, Tests).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("unsloth") is None, reason="unsloth is not installed here"),
]


def test_lora_sft_on_unsloth_cpu_fallback(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    env.update(UNSLOTH_FORCE_CPU="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, "-m", "thub", "train", "lora_sft", "--backend", "unsloth", "--model-path", str(tiny_model),
         "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "3",
         "--learning-rate", "1e-3", "--lora-r", "4", "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    log = (out / "logs" / "train.log").read_text()
    assert "no GPU found, training on CPU" in log  # unsloth's own CPU backend, not plain transformers
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert all(line["max_steps"] == 3 and "loss" in line for line in lines)
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    assert adapter["r"] == 4
    assert (out / "final" / "adapter_model.safetensors").exists()
