"""LLaMA-Factory for real, in its managed environment (``thub install llamafactory --into managed``):
the translation parsed by LLaMA-Factory's own argument parser and dataset registry, a real CPU run
of the tiny model through ``thub train``, SIGTERM -> checkpoint -> ``--resume``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from thub.config.resolve import resolve
from thub.manager import load_registry
from thub.runner.metrics import read_metrics
from thub.testing.interrupt import sigterm_then_resume

pytestmark = [pytest.mark.slow, pytest.mark.install]

# Runs in the managed environment: LLaMA-Factory's get_train_args (its HfArgumentParser over its
# ModelArguments/DataArguments/Seq2SeqTrainingArguments/FinetuningArguments, unknown keys rejected,
# then its own cross-checks), for each YAML file given (one interpreter start for all: importing
# LLaMA-Factory takes seconds).
PARSE = textwrap.dedent("""
    import json, sys, yaml
    from llamafactory.hparams import get_train_args
    for path in sys.argv[1:]:
        args = yaml.safe_load(open(path))
        try:
            model, data, training, finetuning, _ = get_train_args(args)
        except Exception as exc:
            print("PARSED", json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            continue
        print("PARSED", json.dumps({
            "stage": finetuning.stage, "finetuning_type": finetuning.finetuning_type,
            "lora_rank": finetuning.lora_rank, "lora_alpha": finetuning.lora_alpha,
            "lora_target": finetuning.lora_target, "cutoff_len": data.cutoff_len, "dataset": data.dataset,
            "packing": data.packing, "train_on_prompt": data.train_on_prompt,
            "per_device_train_batch_size": training.per_device_train_batch_size,
            "gradient_accumulation_steps": training.gradient_accumulation_steps,
            "max_steps": training.max_steps, "learning_rate": training.learning_rate,
            "lr_scheduler_type": str(getattr(training.lr_scheduler_type, "value", training.lr_scheduler_type)),
            "output_dir": training.output_dir, "use_cpu": training.use_cpu, "save_steps": training.save_steps,
            "disable_gradient_checkpointing": model.disable_gradient_checkpointing,
            "tokenized_path": data.tokenized_path, "overwrite_output_dir": training.overwrite_output_dir,
            "resume_from_checkpoint": training.resume_from_checkpoint,
        }))
""")

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("sft", {"effective_batch_size": 16, "max_steps": 7, "save_steps": 3, "unmask_messages": True},
     {"stage": "sft", "finetuning_type": "full", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
      "max_steps": 7, "save_steps": 3, "packing": False, "cutoff_len": 1024,
      "lr_scheduler_type": "linear",  # lr_scheduler unset: LLaMA-Factory's default, as the README says
      # no auto-resume: LLaMA-Factory's get_last_checkpoint is skipped (the runner resumes explicitly)
      "overwrite_output_dir": True, "resume_from_checkpoint": None}),
    ("lora_sft", {"lora_r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "effective_batch_size": 6,
                  "nproc_per_node": 3},
     {"stage": "sft", "finetuning_type": "lora", "lora_rank": 4, "lora_alpha": 8, "lora_target": ["q_proj", "v_proj"],
      "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1}),
    # thub's blocks: LLaMA-Factory's own pt packing (which takes one off cutoff_len) stays off
    ("sft", {"is_pretraining": True, "block_size": 64}, {"stage": "pt", "packing": False, "cutoff_len": 64}),
]


def _plan(algorithm: str, tiny_model: Path, out: Path, **params: Any) -> dict[str, Any]:
    registry = load_registry()
    flags = {"model_path": str(tiny_model), "data_path": "d.jsonl", "ckpt_output_dir": str(out), **params}
    resolved = resolve(registry, algorithm, backend="llamafactory", flags=flags, environ={})
    return registry.translate(algorithm, "llamafactory", resolved.values())


def test_llamafactory_parses_the_translation(lf_env: dict, tiny_model: Path, tmp_path: Path) -> None:
    configs = []
    plans = [_plan(algorithm, tiny_model, tmp_path / f"run{i}", **params)
             for i, (algorithm, params, _) in enumerate(CASES)]
    bad = json.loads(json.dumps(plans[0]))
    bad["args"]["max_seq_len"] = 128  # the parse is real: a key LLaMA-Factory does not have fails there
    for i, plan in enumerate([*plans, bad]):
        configs.append(tmp_path / f"train{i}.yaml")
        configs[-1].write_text(yaml.safe_dump(plan["args"]))
    done = subprocess.run([lf_env["python"], "-c", PARSE, *map(str, configs)], capture_output=True, text=True,
                          timeout=600, env=lf_env["environ"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("PARSED ")]
    assert len(lines) == len(configs), done.stdout[-3000:]
    *parsed, rejected = lines
    for i, ((_algorithm, _params, expected), result) in enumerate(zip(CASES, parsed, strict=True)):
        assert "error" not in result, result
        assert result["dataset"] == ["thub_train"]
        assert result["tokenized_path"] == f"{tmp_path}/run{i}/llamafactory/tokenized"
        assert result["output_dir"] == f"{tmp_path}/run{i}/checkpoints" and result["use_cpu"] is True
        assert result["disable_gradient_checkpointing"] is True
        assert {k: result[k] for k in expected} == expected
    assert "Some keys are not used by the HfArgumentParser" in rejected["error"] and "max_seq_len" in rejected["error"]


def thub(lf_env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env=lf_env["environ"], timeout=timeout)


def common(model: Path, data: Path, out: Path) -> list[str]:
    return ["--backend", "llamafactory", "--model-path", str(model), "--data-path", str(data),
            "--ckpt-output-dir", str(out)]


def test_dry_run_shows_yaml_dataset_entry_and_command(lf_env: dict, tiny_model: Path, demo_data: Path,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "dry"
    done = thub(lf_env, "train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--dry-run")
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    assert f"llamafactory-cli train {out}/llamafactory/train.yaml" in text
    assert "stage: sft" in text and "gradient_accumulation_steps: 1" in text
    assert f"tokenized_path: {out}/llamafactory/tokenized" in text and "tokenized_by: thub" in text
    assert not out.exists()


def test_real_cpu_run_metrics_and_checkpoints(lf_env: dict, tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    done = thub(lf_env, "train", "sft", *common(tiny_model, demo_data / "chat.jsonl", out), "--max-steps", "6",
                "--save-steps", "3", "--learning-rate", "5e-3", "--effective-batch-size", "4", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    record = json.loads((out / "thub_run.json").read_text())
    assert record["environment"]["kind"] == "managed" and record["environment"]["name"] == "llamafactory"
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert all(line["max_steps"] == 6 and "loss" in line and "learning_rate" in line for line in lines)
    paths = [c["path"] for c in result["checkpoints"]]
    assert str(out / "checkpoints" / "checkpoint-3") in paths and str(out / "checkpoints" / "checkpoint-6") in paths
    assert result["final_checkpoint"] == str(out / "checkpoints")
    assert (out / "checkpoints" / "model.safetensors").exists()
    # LLaMA-Factory read thub's files: its own log, the generated YAML and thub's tokenized examples
    assert (out / "checkpoints" / "trainer_log.jsonl").exists()
    assert yaml.safe_load((out / "llamafactory" / "train.yaml").read_text())["stage"] == "sft"
    assert "Loaded tokenized dataset from" in (out / "logs" / "train.log").read_text()
    saved = json.loads((out / "llamafactory" / "tokenized" / "thub_tokenized.json").read_text())
    assert saved["examples"] == 64


@pytest.mark.parametrize("algorithm, extra, data", [
    ("lora_sft", ["--lora-r", "4"], "chat.jsonl"),
    ("sft", ["--is-pretraining", "--block-size", "32"], "documents.jsonl"),
])
def test_lora_and_pretraining_runs(lf_env: dict, tiny_model: Path, demo_data: Path, tmp_path: Path,
                                   algorithm: str, extra: list[str], data: str) -> None:
    out = tmp_path / algorithm
    done = thub(lf_env, "train", algorithm, *common(tiny_model, demo_data / data, out), "--max-steps", "2", *extra)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads((out / "result.json").read_text())["status"] == "succeeded"
    assert [line["step"] for line in read_metrics(out / "training_metrics.jsonl")] == [1, 2]
    if algorithm == "lora_sft":
        assert (out / "checkpoints" / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("algorithm", ["sft", "dpo"])
def test_sigterm_checkpoints_and_resume_continues(lf_env: dict, tiny_model: Path, demo_data: Path,
                                                  preference_files: dict[str, Path], tmp_path: Path,
                                                  algorithm: str) -> None:
    out = tmp_path / "resume"
    data = demo_data / "chat.jsonl" if algorithm == "sft" else preference_files["dpo"]
    steps = 20
    args = ["train", algorithm, *common(tiny_model, data, out), "--max-steps", str(steps),
            "--effective-batch-size", "2"]
    sigterm_then_resume(args, out, steps=steps, environ=lf_env["environ"])


def test_mask_comparison_with_thub_on_the_demo_data(lf_env: dict, tiny_model: Path, demo_data: Path) -> None:
    """LLaMA-Factory's own pipeline (its get_dataset on what a run writes) on every demo
    conversation, vs thub's assistant mask."""
    done = subprocess.run([sys.executable, "-m", "thub", "data", "preview", "--model", str(tiny_model),
                           str(demo_data / "chat.jsonl"), str(demo_data / "sharegpt.jsonl"), "-n", "1000",
                           "--backend", "llamafactory", "--json"], capture_output=True, text=True,
                          env=lf_env["environ"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    examples = json.loads(done.stdout)["examples"]
    assert len(examples) == 80
    # LLaMA-Factory loads thub's tokenized examples (tokenized_path): the same trained text on every
    # row (it used to train the newline after <|im_end|> too, from the template it parsed itself)
    for example in examples:
        assert example["comparison"] == {"equal": True, "thub_only": [], "backend_only": []}, example["location"]
        assert example["backend"]["trained_tokens"] == example["trained_tokens"]
