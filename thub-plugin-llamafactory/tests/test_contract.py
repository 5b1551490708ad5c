"""thub's backend contract, and the translation into LLaMA-Factory's arguments (pure Python).

LLaMA-Factory's own parser checks the same output in ``test_training.py`` (its managed environment).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


class TestLlamaFactoryContract(BackendContract):
    backend = "llamafactory"
    plugin_module = "thub_plugin_llamafactory"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {
        "sft": {**BASE, "learning_rate": 1e-4, "packing": True},
        "lora_sft": {**BASE, "lora_r": 4, "target_modules": ["q_proj", "v_proj"]},
        "dpo": {**BASE, "beta": 0.2, "label_smoothing": 0.1},
        "kto": {**BASE, "desirable_weight": 1.5, "reference_model_path": "ref"},
    }
    # conditional reads: the SimPO margin, a reference model
    read_samples = [("dpo", {**BASE, "loss_type": "simpo", "simpo_gamma": 0.3}),
                    ("dpo", {**BASE, "reference_model_path": "ref"})]
    # contract kit (issue 14.6): honoured parameters this translation did not read on the samples when
    # the kit began checking; narrow with read_samples (conditional reads) or keep the runner's reads
    read_elsewhere = frozenset({"block_size", "mlflow_experiment_name", "validation_frequency", "wandb_entity"})
    checks = frozenset()


def _plan(algorithm: str, **params: Any) -> dict[str, Any]:
    registry = load_registry()
    resolved = resolve(registry, algorithm, backend="llamafactory", flags={**BASE, **params}, environ={})
    return registry.translate(algorithm, "llamafactory", resolved.values())


def test_sft_arguments() -> None:
    plan = _plan("sft", max_steps=5, save_steps=2, warmup_steps=1, weight_decay=0.1, beta1=0.8)
    args = plan["args"]
    assert (args["stage"], args["finetuning_type"], args["do_train"]) == ("sft", "full", True)
    assert (args["dataset"], args["tokenized_path"], args["output_dir"]) == ("thub_train", "out/llamafactory/tokenized",
                                                                             "out/checkpoints")
    # thub's decision on resuming, never LLaMA-Factory's get_last_checkpoint (the runner resumes explicitly)
    assert args["overwrite_output_dir"] is True and "resume_from_checkpoint" not in args
    assert (args["max_steps"], args["save_strategy"], args["save_steps"]) == (5, "steps", 2)
    assert (args["warmup_steps"], args["weight_decay"], args["adam_beta1"]) == (1, 0.1, 0.8)
    # thub tokenizes (model's chat template, its masks); LLaMA-Factory's converter, template and packing are unused
    assert args["cutoff_len"] == 1024 and args["packing"] is False
    assert not {"template", "train_on_prompt", "dataset_dir", "val_size"} & set(args)
    assert args["disable_gradient_checkpointing"] is True
    # unset: LLaMA-Factory's own scheduler (its TrainingArguments' linear; test_training.py parses it)
    assert "lr_scheduler_type" not in args
    assert _plan("sft", lr_scheduler="cosine")["args"]["lr_scheduler_type"] == "cosine"
    assert plan["command"] == "llamafactory-cli train out/llamafactory/train.yaml"
    assert _plan("sft", nproc_per_node=4, nnodes=2)["command"] == (
        "FORCE_TORCHRUN=1 NNODES=2 NPROC_PER_NODE=4 NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR "
        "MASTER_PORT=$MASTER_PORT llamafactory-cli train out/llamafactory/train.yaml")
    data = plan["data"]
    assert (data["tokenized_by"], data["tokenized_path"], data["loss_on"]) == (
        "thub", "out/llamafactory/tokenized", "assistant tokens (thub's mask; rows with unmask: every token)")
    assert (data["max_seq_len"], data["overlong"], data["packing"], data["validation_split"]) == (
        1024, "truncate", False, None)
    assert "skips its own converter" in data["note"]
    assert _plan("sft", unmask_messages=True)["data"]["loss_on"] == "all tokens"
    valid = _plan("sft", validation_split=0.2, validation_frequency=5)
    assert valid["data"]["validation_split"] == valid["args"]["val_size"] == 0.2 and valid["args"]["eval_steps"] == 5


def test_lora_and_pretraining_arguments() -> None:
    args = _plan("lora_sft", lora_r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj", "v_proj"],
                 use_rslora=True)["args"]
    assert (args["finetuning_type"], args["lora_rank"], args["lora_alpha"], args["lora_dropout"]) == ("lora", 4, 8, 0.1)
    assert (args["lora_target"], args["use_rslora"], args["use_dora"]) == ("q_proj,v_proj", True, False)
    assert _plan("lora_sft")["args"]["lora_target"] == "all"
    pre = _plan("sft", is_pretraining=True, block_size=64)
    # thub's blocks (documents joined with EOS): LLaMA-Factory's own pt packing (BOS over each block's
    # first token, cutoff_len - 1) is off
    assert (pre["args"]["stage"], pre["args"]["cutoff_len"], pre["args"]["packing"]) == ("pt", 64, False)
    assert (pre["data"]["mode"], pre["data"]["block_size"], pre["data"]["loss_on"]) == ("pretraining", 64, "all tokens")
    packed = _plan("sft", packing=True, max_seq_len=128)
    assert (packed["args"]["cutoff_len"], packed["args"]["packing"], packed["data"]["packing"]) == (128, False, True)
    assert "train_on_prompt" not in pre["args"]  # LLaMA-Factory rejects it outside sft


@pytest.mark.parametrize(("batch", "nproc", "nnodes", "expected"), [
    (8, None, None, (8, 1)), (32, None, None, (8, 4)), (96, 4, 2, (6, 2)), (12, 2, None, (6, 1)),
])
def test_effective_batch_split(batch: int, nproc: int | None, nnodes: int | None, expected: tuple[int, int]) -> None:
    params: dict[str, Any] = {"effective_batch_size": batch}
    if nproc:
        params["nproc_per_node"] = nproc
    if nnodes:
        params["nnodes"] = nnodes
    plan = _plan("sft", **params)
    args = plan["args"]
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == expected
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] * plan["world_size"] == batch


def test_batch_that_does_not_divide_is_an_error() -> None:
    with pytest.raises(UsageError, match="effective_batch_size 10 is not a multiple of the world size 8.*8, 16"):
        _plan("sft", effective_batch_size=10, nproc_per_node=4, nnodes=2)


def test_unhonoured_parameters_are_rejected() -> None:
    assert _plan("sft", overlong="drop")["data"]["overlong"] == "drop"  # thub tokenizes: its policy applies
    with pytest.raises(UsageError, match="max_tokens_per_gpu"):
        _plan("sft", max_tokens_per_gpu=4096)


def test_loggers() -> None:
    plan = _plan("sft", wandb_project="p", tensorboard_log_dir="tb", wandb_run_name="r")
    assert plan["args"]["report_to"] == ["wandb", "tensorboard"]
    assert plan["args"]["run_name"] == "r"
    assert plan["environment"]["WANDB_PROJECT"] == "p"  # thub.runner.hf_trainer.report_settings, as for trl


def test_slurm_dry_run_splits_the_global_batch_over_nodes(tmp_path: Path) -> None:
    """--launcher slurm: one thub worker per node starts torchrun (the backend's launcher); the job
    script shortens a long TMPDIR for AF_UNIX sockets; the global batch stays fixed."""
    demo = Path(__file__).parents[2] / "examples" / "data" / "chat.jsonl"
    (tmp_path / "d.jsonl").write_text(demo.read_text())  # the dry run's plan validates the data
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    args = [sys.executable, "-m", "thub", "train", "sft", "--backend", "llamafactory", "--model-path", "m",
            "--data-path", "d.jsonl", "--ckpt-output-dir", str(tmp_path / "run"), "--launcher", "slurm",
            "--nodes", "2", "--gpus-per-node", "4", "--effective-batch-size", "96", "--dry-run", "--json"]
    done = subprocess.run(args, capture_output=True, text=True, env=environ, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    translation = plan["translation"]
    native = translation.get("args") or translation.get("config")
    micro = native.get("per_device_train_batch_size") or native.get("micro_batch_size")
    assert translation["world_size"] == 8 and micro * native["gradient_accumulation_steps"] * 8 == 96
    script = plan["launch"]["script"]
    assert "thub.launch.worker node" in script and 'export TMPDIR=/tmp/thub_"$SLURM_JOB_ID"' in script
    bad = subprocess.run([*args[:-6], "--nodes", "5", "--gpus-per-node", "2", "--effective-batch-size", "96",
                          "--dry-run"], capture_output=True, text=True, env=environ, timeout=300, cwd=tmp_path)
    assert bad.returncode == 2 and "nearest valid values: 90, 100" in bad.stderr


def test_cuda_torchvision_next_to_cpu_torch_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what importing LLaMA-Factory raises with PyPI's (CUDA) torchvision next to a +cpu torch
    package = tmp_path / "llamafactory" / "train"
    package.mkdir(parents=True)
    (tmp_path / "llamafactory" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "tuner.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "llamafactory" or m.startswith("llamafactory.")]:
        monkeypatch.delitem(sys.modules, name)
    from thub_plugin_llamafactory.runner import _import_run_exp

    with pytest.raises(RuntimeError, match="torchvision/torchaudio are CUDA builds next to a CPU torch.*whl/cpu"):
        _import_run_exp()
