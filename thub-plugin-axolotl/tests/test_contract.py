"""thub's backend contract, the translation (sft, lora_sft, dpo, kto), and the translation checked
by axolotl's own code.

axolotl's checks run in a subprocess on the axolotl wheel unpacked without dependencies
(``build/axolotl-0.19.0``, installed by .ci/run), with this environment's transformers/pydantic.
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

ROOT = Path(__file__).parents[2]
AXOLOTL = ROOT / "build" / "axolotl-0.19.0"
CHECKS = Path(__file__).parent / "axolotl_own_checks.py"
BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


class TestAxolotlContract(BackendContract):
    backend = "axolotl"
    plugin_module = "thub_plugin_axolotl"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {
        "sft": {**BASE, "learning_rate": 1e-4, "packing": True},
        "lora_sft": {**BASE, "lora_r": 4, "target_modules": ["q_proj", "v_proj"]},
        "dpo": {**BASE, "beta": 0.2, "label_smoothing": 0.1},
        "kto": {**BASE, "desirable_weight": 1.5},
    }
    # conditional reads: the SimPO margin; a plain dpo sample for the loss_type differential
    read_samples = [("dpo", {**BASE, "loss_type": "simpo", "simpo_gamma": 0.3}), ("dpo", dict(BASE))]
    # contract kit (issue 14.6): honoured parameters this translation did not read on the samples when
    # the kit began checking; narrow with read_samples (conditional reads) or keep the runner's reads
    read_elsewhere = frozenset({"block_size", "mlflow_experiment_name", "mlflow_run_name", "validation_frequency",
                                "wandb_entity", "wandb_run_name"})
    checks = frozenset()


def _plan(algorithm: str, **params: Any) -> dict[str, Any]:
    registry = load_registry()
    resolved = resolve(registry, algorithm, backend="axolotl", flags={**BASE, **params}, environ={})
    return registry.translate(algorithm, "axolotl", resolved.values())


def test_sft_config() -> None:
    plan = _plan("sft", max_steps=5, save_steps=2, warmup_steps=1, beta1=0.8, unmask_messages=True)
    config = plan["config"]
    assert (config["base_model"], config["output_dir"], config["chat_template"]) == ("m", "out/checkpoints",
                                                                                     "tokenizer_default")
    assert (config["max_steps"], config["save_strategy"], config["save_steps"]) == (5, "steps", 2)
    assert (config["warmup_steps"], config["adam_beta1"]) == (1, 0.8)
    # unset: axolotl's own scheduler (its schema's cosine; test_axolotl_validates_the_translation checks it)
    assert "lr_scheduler" not in config
    assert _plan("sft", lr_scheduler="constant")["config"]["lr_scheduler"] == "constant"
    # thub's tokenized examples, used by axolotl as they are (no type: its pre-tokenized path)
    assert config["datasets"] == [{"path": "out/axolotl/train.jsonl", "ds_type": "json"}]
    assert plan["data"]["tokenized_by"] == "thub" and plan["data"]["unmask_messages"] is True
    # nothing thub keeps is left out: thub applied overlong; axolotl keeps 1-token examples and thub's order
    assert (config["excess_length_strategy"], config["min_sample_len"], config["shuffle_merged_datasets"]) == (
        "truncate", 1, False)
    assert [_plan("sft", overlong=o)["config"]["excess_length_strategy"] for o in ("drop", "error")] == [
        "drop", "raise"]
    assert _plan("sft", overlong="drop")["data"]["overlong"] == "drop"
    # thub decides whether a run resumes: axolotl never picks a checkpoint itself (issue 25 item 6)
    assert config["auto_resume_from_checkpoints"] is False and "resume_from_checkpoint" not in config
    assert "adapter" not in config and config["plugins"] == ["thub_plugin_axolotl.hooks.ThubPlugin"]
    assert plan["command"] == "python -m axolotl.cli.train out/axolotl/config.yaml"
    assert _plan("sft", nproc_per_node=2)["command"] == (
        "axolotl train out/axolotl/config.yaml --launcher torchrun -- --nnodes 1 --nproc_per_node 2")


def test_lora_pretraining_and_liger() -> None:
    config = _plan("lora_sft", lora_r=4, target_modules=["q_proj"], use_dora=True)["config"]
    assert (config["adapter"], config["lora_r"], config["lora_target_modules"], config["peft_use_dora"]) == (
        "lora", 4, ["q_proj"], True)
    assert _plan("lora_sft")["config"]["lora_target_linear"] is True
    pre = _plan("sft", is_pretraining=True, block_size=64)["config"]
    assert pre["datasets"][0] == {"path": "out/axolotl/train.jsonl", "ds_type": "json"}
    assert pre["sequence_len"] == 64
    liger = _plan("sft", use_liger=True)["config"]
    assert "axolotl.integrations.liger.LigerPlugin" in liger["plugins"] and liger["liger_rms_norm"] is True


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
    config = plan["config"]
    assert (config["micro_batch_size"], config["gradient_accumulation_steps"]) == expected
    assert config["micro_batch_size"] * config["gradient_accumulation_steps"] * plan["world_size"] == batch


def test_batch_that_does_not_divide_is_an_error() -> None:
    with pytest.raises(UsageError, match="effective_batch_size 12 is not a multiple of the world size 8.*8, 16"):
        _plan("sft", effective_batch_size=12, nproc_per_node=4, nnodes=2)


def test_unhonoured_parameter_is_rejected() -> None:
    with pytest.raises(UsageError, match="max_tokens_per_gpu"):
        _plan("sft", max_tokens_per_gpu=1000)


def _axolotl_checks(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not AXOLOTL.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{AXOLOTL} missing: .ci/run unpacks the axolotl wheel there")
        pytest.skip(f"{AXOLOTL} missing (pip install --no-deps --target {AXOLOTL} axolotl==0.19.0 addict colorama)")
    done = subprocess.run([sys.executable, str(CHECKS), str(AXOLOTL)], input=json.dumps(configs), capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "AXOLOTL_DO_NOT_TRACK": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(configs):]]


def test_axolotl_validates_the_translation(tiny_model: Path) -> None:
    plans = [
        _plan("sft", model_path=str(tiny_model), effective_batch_size=16, max_steps=7, save_steps=3, warmup_steps=2,
              validation_split=0.1, validation_frequency=5, save_total_limit=2),
        _plan("lora_sft", model_path=str(tiny_model), lora_r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
              use_rslora=True, effective_batch_size=6, nproc_per_node=3),
        _plan("sft", model_path=str(tiny_model), is_pretraining=True, block_size=64, packing=True),
        # issue 28: a separate held-out file as axolotl's test_datasets, the best checkpoint by eval_loss
        _plan("sft", model_path=str(tiny_model), validation_data_path="held_out.jsonl", validation_frequency=2,
              save_steps=2, save_total_limit=1),
    ]
    bad = json.loads(json.dumps(plans[0]["config"]))
    bad["sequence_len"] = "long"  # the schema is real: a wrong type is rejected by axolotl
    sft, lora, pre, held, rejected = _axolotl_checks([p["config"] for p in plans] + [bad])
    assert "error" not in held, held
    assert (held["val_set_size"], held["eval_steps"], held["metric_for_best_model"]) == (0.0, 2, "eval_loss")
    assert held["test_dataset"]["path"].endswith("/axolotl/validation.jsonl") and held["test_dataset"]["type"] is None
    assert "error" not in sft, sft
    assert (sft["micro_batch_size"], sft["gradient_accumulation_steps"], sft["batch_size"]) == (8, 2, 16)
    assert (sft["max_steps"], sft["save_strategy"], sft["save_steps"], sft["eval_steps"]) == (7, "steps", 3, 5)
    assert sft["save_total_limit"] == 2 and lora["save_total_limit"] is None  # axolotl's schema keeps it
    assert sft["val_set_size"] == 0.1 and sft["world_size"] == 1 and sft["bf16"] is False
    assert sft["lr_scheduler"] == "cosine"  # lr_scheduler unset: axolotl's default, as the README says
    assert sft["dataset"]["type"] is None and sft["dataset"]["ds_type"] == "json"
    assert (sft["excess_length_strategy"], sft["min_sample_len"], sft["shuffle_merged_datasets"],
            sft["auto_resume_from_checkpoints"]) == ("truncate", 1, False, False)
    assert "error" not in lora, lora
    assert (lora["adapter"], lora["lora_r"], lora["lora_alpha"], lora["lora_target_modules"],
            lora["peft_use_rslora"]) == (
        "lora", 4, 8, ["q_proj", "v_proj"], True)
    assert (lora["micro_batch_size"], lora["gradient_accumulation_steps"]) == (2, 1)
    assert "error" not in pre, pre
    assert (pre["dataset"]["type"], pre["sequence_len"], pre["sample_packing"]) == (None, 64, True)
    assert "ValidationError" in rejected["error"] and "sequence_len" in rejected["error"]


def _preview(tiny_model: Path, files: list[Path], *extra: str) -> list[dict[str, Any]]:
    if not AXOLOTL.is_dir():
        pytest.skip(f"{AXOLOTL} missing")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update({"PYTHONPATH": str(AXOLOTL), "CUDA_VISIBLE_DEVICES": "", "AXOLOTL_DO_NOT_TRACK": "1"})
    done = subprocess.run([sys.executable, "-m", "thub", "data", "preview", "--model", str(tiny_model),
                           *map(str, files), "-n", "1000", "--backend", "axolotl", "--json", *extra],
                          capture_output=True, text=True, env=environ, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["examples"]


@pytest.mark.slow
def test_mask_comparison_with_thub_on_the_demo_data(tiny_model: Path, demo_data: Path) -> None:
    """axolotl's own data preparation on every demo conversation vs thub's assistant mask."""
    examples = _preview(tiny_model, [demo_data / "chat.jsonl", demo_data / "sharegpt.jsonl"])
    assert len(examples) == 80 and all("comparison" in e for e in examples)
    assert [e for e in examples if not e["comparison"]["equal"]] == []
    assert all(e["backend"]["trained_tokens"] == e["trained_tokens"] for e in examples)


@pytest.mark.slow
@pytest.mark.parametrize("unmask", [False, True])
def test_preview_on_the_edge_cases_shows_thubs_tokens(unmask: bool, tiny_model: Path, edge_cases: Path,
                                                      edge_cases_max_seq_len: int) -> None:
    """``thub data preview --backend axolotl`` shows what axolotl trains: on tool calls, odd turn
    orders, Unicode, per-row unmask and the overlong row (cut), thub's tokens, no row dropped."""
    examples = _preview(tiny_model, [edge_cases / "chat.jsonl"], "--max-seq-len", str(edge_cases_max_seq_len),
                        *(["--unmask"] if unmask else []))
    assert len(examples) == 10 and [e for e in examples if not e["comparison"]["equal"]] == []
    assert all(e["backend"]["tokens"] == e["tokens"] for e in examples)
    assert examples[6]["backend"]["tokens"] == edge_cases_max_seq_len
    if unmask:
        assert all(e["backend"]["trained_tokens"] == e["backend"]["tokens"] for e in examples)


def test_slurm_dry_run_splits_the_global_batch_over_nodes(tmp_path: Path) -> None:
    """--launcher slurm: one thub worker per node starts torchrun (the backend's launcher); the job
    script shortens a long TMPDIR for AF_UNIX sockets; the global batch stays fixed."""
    (tmp_path / "d.jsonl").write_text((ROOT / "examples" / "data" / "chat.jsonl").read_text())  # the plan reads it
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    args = [sys.executable, "-m", "thub", "train", "sft", "--backend", "axolotl", "--model-path", "m",
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


# -- preference tuning (dpo, kto): translation, axolotl's own schema, the rendered strings --------


@pytest.mark.parametrize(("params", "expected"), [
    ({}, {"rl": "dpo", "dpo_loss_type": ["sigmoid"], "rl_beta": 0.1}),
    ({"loss_type": "ipo", "beta": 0.3}, {"rl": "dpo", "dpo_loss_type": ["ipo"], "rl_beta": 0.3}),
    ({"loss_type": "hinge"}, {"rl": "dpo", "dpo_loss_type": ["hinge"]}),
    ({"label_smoothing": 0.2}, {"rl": "dpo", "dpo_label_smoothing": 0.2}),
    ({"loss_type": "orpo"}, {"rl": "orpo", "dpo_loss_type": None}),
    # pure SimPO (no behaviour-cloning term), TRL's own margin unless set
    ({"loss_type": "simpo"}, {"rl": "simpo", "simpo_gamma": 0.5, "cpo_alpha": 0.0}),
    ({"loss_type": "simpo", "simpo_gamma": 1.0}, {"rl": "simpo", "simpo_gamma": 1.0}),
])
def test_dpo_losses(params: dict[str, Any], expected: dict[str, Any]) -> None:
    plan = _plan("dpo", **params)
    config = plan["config"]
    assert {k: config.get(k) for k in expected} == expected
    assert config["datasets"] == [{"path": "out/axolotl/train.jsonl", "ds_type": "json"}]  # no type: used as given
    assert "sample_packing" not in config and config["val_set_size"] == 0.0 and config["learning_rate"] == 5e-6
    assert plan["data"]["mode"] == "dpo" and plan["data"]["rendered_by"] == "thub"


def test_kto_config() -> None:
    config = _plan("kto", desirable_weight=1.5, undesirable_weight=0.5, beta=0.2)["config"]
    assert (config["rl"], config["rl_beta"], config["kto_desirable_weight"], config["kto_undesirable_weight"]) == (
        "kto", 0.2, 1.5, 0.5)


@pytest.mark.parametrize("name, value", [
    ("reference_model_path", "ref"),  # axolotl loads base_model again: it has no reference-model path
])
def test_what_axolotl_preference_does_not_honour_is_refused(name: str, value: Any) -> None:
    with pytest.raises(UsageError, match=name):
        _plan("dpo", **{name: value})


def test_axolotl_validates_the_preference_configs(tiny_model: Path) -> None:
    cases = [("dpo", {}), ("dpo", {"loss_type": "ipo"}), ("dpo", {"loss_type": "hinge", "overlong": "drop"}),
             ("dpo", {"loss_type": "orpo"}), ("dpo", {"loss_type": "simpo", "simpo_gamma": 0.8}),
             ("dpo", {"label_smoothing": 0.1, "overlong": "error"}),
             ("kto", {"desirable_weight": 1.3, "effective_batch_size": 4})]
    plans = [_plan(algorithm, model_path=str(tiny_model), **params) for algorithm, params in cases]
    bad = {**plans[0]["config"], "rl": "dpo-typo"}  # the schema is real: an unknown rl is rejected
    *checked, rejected = _axolotl_checks([p["config"] for p in plans] + [bad])
    for (algorithm, params), plan, result in zip(cases, plans, checked, strict=True):
        assert "error" not in result, (algorithm, params, result)
        config = plan["config"]
        for key in ("rl", "rl_beta", "dpo_loss_type", "dpo_label_smoothing", "simpo_gamma", "cpo_alpha",
                    "kto_desirable_weight", "kto_undesirable_weight", "excess_length_strategy"):
            assert result[key] == config.get(key), (key, result[key], config.get(key))
        assert result["dataset"]["type"] is None and result["remove_unused_columns"] is False
    assert checked[2]["excess_length_strategy"] == "drop" and checked[5]["excess_length_strategy"] == "raise"
    assert (checked[-1]["micro_batch_size"], checked[-1]["batch_size"]) == (4, 4)
    assert "error" in rejected and "rl" in rejected["error"]


def test_rows_rendered_with_the_models_chat_template(tiny_model: Path) -> None:
    from thub_plugin_axolotl.runner import preference_texts
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    prompt = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    rows = [{"prompt": prompt, "chosen": [{"role": "assistant", "content": "hello"}],
             "rejected": [{"role": "assistant", "content": "go"}]}]
    (pair,) = preference_texts("dpo", rows, ["p.jsonl:1"], tokenizer)
    assert pair["prompt"] == tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    assert pair["prompt"].endswith("<|im_start|>assistant\n")
    assert (pair["chosen"], pair["rejected"]) == ("hello<|im_end|>\n", "go<|im_end|>\n")
    kto = [{"prompt": prompt, "completion": [{"role": "assistant", "content": "ok"}], "label": False}]
    assert preference_texts("kto", kto, ["k.jsonl:1"], tokenizer)[0] == {
        "prompt": pair["prompt"], "completion": "ok<|im_end|>\n", "label": False}


def test_a_template_that_rewrites_the_prompt_is_refused_by_row(tiny_model: Path) -> None:
    """A template whose generation prompt is not the start of prompt + answer (here: a system turn
    it only adds with an assistant turn present) leaves no place where the answer starts."""
    from thub_plugin_axolotl.runner import preference_texts
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = ("{% if messages[-1].role == 'assistant' %}SYSTEM {% endif %}"
                               "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant: {% endif %}")
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "a"}],
             "rejected": [{"role": "assistant", "content": "b"}]}]
    with pytest.raises(UsageError, match=r"p.jsonl:3.chosen: the model's chat template does not render the prompt"):
        preference_texts("dpo", rows, ["p.jsonl:3"], tokenizer)
