"""nproc_per_node=auto|gpu: the batch is split over the processes torchrun really starts.

The unit tests pin how ``world_size`` counts (torchrun's own rule for ``auto``/``gpu``; in the
torchrun child, ``WORLD_SIZE``). The slow test runs a real two-process torchrun (gloo, CPU) with
``--nproc-per-node auto`` pinned to two CPUs, and counts the samples every rank feeds each
optimizer step with a ``sitecustomize`` hook on ``Trainer.training_step``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from thub.errors import UsageError
from thub.runner.batching import world_size

HOOK = """
import os
if os.environ.get("THUB_RUN_DIR") and os.environ.get("COUNT_DIR") and os.environ.get("LOCAL_RANK") is not None:
    import json
    from transformers import Trainer

    _step = Trainer.training_step

    def training_step(self, model, inputs, *args, **kwargs):
        rank = int(os.environ.get("RANK", "0"))
        with open(os.path.join(os.environ["COUNT_DIR"], f"rank{rank}.jsonl"), "a") as out:
            out.write(json.dumps({"step": self.state.global_step, "samples": int(inputs["input_ids"].shape[0]),
                                  "world": int(os.environ["WORLD_SIZE"])}) + "\\n")
        return _step(self, model, inputs, *args, **kwargs)

    Trainer.training_step = training_step
"""


def test_auto_and_gpu_count_what_torchrun_starts() -> None:
    assert world_size({"nproc_per_node": 4, "nnodes": 2}, {}) == 8
    assert world_size({}, {}) == 1
    # gpu: the visible GPUs (torchrun: torch.cuda.device_count())
    assert world_size({"nproc_per_node": "gpu"}, {"CUDA_VISIBLE_DEVICES": "0,1,2"}) == 3
    assert world_size({"nproc_per_node": "gpu", "nnodes": 2}, {"CUDA_VISIBLE_DEVICES": "4,5"}) == 4
    with pytest.raises(UsageError, match="nproc_per_node gpu .* no NVIDIA GPU is visible"):
        world_size({"nproc_per_node": "gpu"}, {"CUDA_VISIBLE_DEVICES": ""})
    # auto: the GPUs, else the CPUs this process may run on (torchrun: torch._utils.cpu_count())
    assert world_size({"nproc_per_node": "auto"}, {"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert world_size({"nproc_per_node": "auto"}, {"CUDA_VISIBLE_DEVICES": "-1"}) == len(os.sched_getaffinity(0))
    # in the torchrun child: what torchrun resolved
    assert world_size({"nproc_per_node": "auto"}, {"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "3"}) == 6


def test_trl_splits_the_batch_over_the_resolved_world(monkeypatch: pytest.MonkeyPatch) -> None:
    from thub.config.resolve import resolve
    from thub.manager import load_registry

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    import thub_plugin_trl  # noqa: F401  (the package binds `translate` to the function)

    monkeypatch.setattr(sys.modules["thub_plugin_trl.translate"], "cuda_visible", lambda: True)
    registry = load_registry()
    flags = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o", "effective_batch_size": 32,
             "nproc_per_node": "gpu"}
    plan = registry.translate("sft", "trl", resolve(registry, "sft", backend="trl", flags=flags, environ={}).values())
    assert plan["world_size"] == 4
    config = plan["config"]
    assert config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] * 4 == 32
    grpo = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o", "group_size": 4,
            "prompt_batch_size": 8, "nproc_per_node": "gpu"}
    plan = registry.translate("grpo", "trl", resolve(registry, "grpo", backend="trl", flags=grpo, environ={}).values())
    assert plan["config"]["per_device_train_batch_size"] * 4 == 8 * 4  # 8 prompts x 4 completions per step


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs for two processes")
def test_two_process_torchrun_feeds_effective_batch_size_per_step(tiny_model: Path, demo_data: Path,
                                                                  tmp_path: Path) -> None:
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(HOOK)
    counts = tmp_path / "counts"
    counts.mkdir()
    out = tmp_path / "auto"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update({"PYTHONPATH": str(tmp_path / "hook"), "COUNT_DIR": str(counts), "CUDA_VISIBLE_DEVICES": ""})
    cpus = sorted(os.sched_getaffinity(0))[:2]
    done = subprocess.run(["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-m", "thub", "train", "sft",
                           "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                           str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--nproc-per-node", "auto",
                           "--effective-batch-size", "8", "--max-steps", "2"],
                          capture_output=True, text=True, env=environ, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    per_step: dict[int, int] = defaultdict(int)
    ranks = sorted(counts.glob("rank*.jsonl"))
    assert [p.name for p in ranks] == ["rank0.jsonl", "rank1.jsonl"], "two processes, each training"
    for path in ranks:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert record["world"] == 2
            per_step[record["step"]] += record["samples"]
    assert dict(per_step) == {0: 8, 1: 8}, "samples per optimizer step, summed over ranks and accumulation"
