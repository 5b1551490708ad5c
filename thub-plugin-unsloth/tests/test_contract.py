"""thub's backend contract, and the translation checked against TRL/PEFT's own types and
unsloth's loader signatures."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}

# Keyword parameters of unsloth 2026.10.9, read from the wheel (unsloth/models/llama.py
# FastLlamaModel.get_peft_model, unsloth/models/loader.py FastLanguageModel.from_pretrained,
# unsloth_zoo/cpu/loader.py FastCPUModel). Both accept **kwargs; these are the named ones
# thub relies on, so a rename upstream shows up here and in the GPU smoke test.
UNSLOTH_LOAD = {"model_name", "max_seq_length", "dtype", "load_in_4bit", "load_in_8bit", "full_finetuning",
                "trust_remote_code", "use_gradient_checkpointing"}
UNSLOTH_PEFT = {"r", "target_modules", "lora_alpha", "lora_dropout", "bias", "use_gradient_checkpointing",
                "random_state", "max_seq_length", "use_rslora"}
UNSLOTH_PEFT_KWARGS = {"use_dora"}  # forwarded to peft.LoraConfig through **kwargs


class TestUnslothContract(BackendContract):
    backend = "unsloth"
    plugin_module = "thub_plugin_unsloth"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {"lora_sft": {**BASE, "lora_r": 4, "target_modules": ["q_proj"], "load_in_4bit": True}}
    read_samples = [("lora_sft", {**BASE, "is_pretraining": True, "block_size": 64, "validation_split": 0.1,
                                  "validation_frequency": 5, "wandb_project": "p", "wandb_entity": "e",
                                  "mlflow_tracking_uri": "file:///tmp/m", "mlflow_experiment_name": "x"})]
    checks = frozenset({"unsloth.conflicts", "unsloth.device"})


def _plan(**params):
    registry = load_registry()
    resolved = resolve(registry, "lora_sft", backend="unsloth", flags={**BASE, **params}, environ={})
    return registry.translate("lora_sft", "unsloth", resolved.values())


def test_translation_builds_real_trl_config(tmp_path: Path) -> None:
    import trl

    plan = _plan(ckpt_output_dir=str(tmp_path), warmup_steps=2, weight_decay=0.1, beta1=0.8, wandb_project="p",
                 wandb_run_name="r1", effective_batch_size=32, save_steps=5, validation_split=0.1,
                 validation_frequency=3)
    config = trl.SFTConfig(**plan["config"])
    assert config.output_dir == f"{tmp_path}/checkpoints"
    assert (config.warmup_steps, config.weight_decay, config.adam_beta1, config.run_name) == (2, 0.1, 0.8, "r1")
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (8, 4)
    assert config.use_cpu is True and config.bf16 is False and config.gradient_checkpointing is False
    assert config.dataset_kwargs == {"skip_prepare_dataset": True} and config.remove_unused_columns is False
    assert (config.save_strategy, config.save_steps, config.eval_strategy,
            config.eval_steps) == ("steps", 5, "steps", 3)
    assert config.max_length == 2048


def test_lora_arguments_build_a_real_peft_config() -> None:
    from peft import LoraConfig

    plan = _plan(lora_r=8, lora_alpha=16, lora_dropout=0.05, use_rslora=True, use_dora=True, seed=7)
    lora = plan["lora"]
    # the keys unsloth hands to peft.LoraConfig (FastCPUModel.get_peft_model / FastLlamaModel)
    config = LoraConfig(r=lora["r"], lora_alpha=lora["lora_alpha"], lora_dropout=lora["lora_dropout"],
                        bias=lora["bias"], target_modules=lora["target_modules"], use_rslora=lora["use_rslora"],
                        use_dora=lora["use_dora"], task_type="CAUSAL_LM")
    assert (config.r, config.lora_alpha, config.use_rslora, config.use_dora) == (8, 16, True, True)
    assert lora["random_state"] == 7 and lora["max_seq_length"] == 2048
    assert set(lora) <= UNSLOTH_PEFT | UNSLOTH_PEFT_KWARGS
    assert set(plan["load"]) <= UNSLOTH_LOAD


def test_loader_keys_match_installed_unsloth_signatures() -> None:
    unsloth = pytest.importorskip("unsloth", reason="unsloth is not installed here (it is not in CI)")
    plan = _plan()
    loader = unsloth.FastLanguageModel
    load_params = set(inspect.signature(loader.from_pretrained).parameters)
    peft_params = set(inspect.signature(loader.get_peft_model).parameters)
    assert set(plan["load"]) <= load_params
    assert set(plan["lora"]) - UNSLOTH_PEFT_KWARGS <= peft_params


def test_gradient_checkpointing_and_quantisation() -> None:
    plan = _plan(load_in_4bit=True)
    assert plan["load"]["load_in_4bit"] is True and plan["load"]["use_gradient_checkpointing"] == "unsloth"
    off = _plan(gradient_checkpointing=False)
    assert off["load"]["use_gradient_checkpointing"] is False and off["lora"]["use_gradient_checkpointing"] is False
    assert _plan()["lora"]["target_modules"][0] == "q_proj"


def test_loss_on_assistant_tokens_unless_unmasked() -> None:
    assert _plan()["data"]["loss_on"] == "assistant tokens"
    assert _plan(unmask_messages=True)["data"]["loss_on"] == "all tokens"
    pre = _plan(is_pretraining=True, block_size=64)
    assert pre["data"]["mode"] == "pretraining" and pre["config"]["max_length"] == 64
    assert pre["load"]["max_seq_length"] == 64


@pytest.mark.parametrize("name, value", [("packing", True), ("bnb_4bit_quant_type", "nf4"), ("nproc_per_node", 2),
                                         ("use_liger", True)])
def test_unhonoured_parameters_are_errors(name: str, value: object) -> None:
    with pytest.raises(UsageError, match=rf"does not honour these lora_sft parameters:\n  {name} "):
        _plan(**{name: value})


def test_backend_defaults_and_runs_only_lora_sft() -> None:
    registry = load_registry()
    spec = registry.backends["unsloth"]
    assert set(spec.algorithms) == {"lora_sft"}
    assert spec.defaults_for("lora_sft")["max_grad_norm"] == 0.3
    with pytest.raises(UsageError, match="does not run 'sft'"):
        from thub_plugin_unsloth.translate import translate

        translate("sft", {})


def test_conflicts_read_from_requires_dist() -> None:
    from importlib import metadata

    from thub_plugin_unsloth import unsloth_conflicts

    trl, datasets = metadata.version("trl"), metadata.version("datasets")
    requires = ["trl!=0.19.0,<=1.15.0,>=0.18.2", "datasets!=4.0.*,<5.0.0,>=3.4.1", "tyro", "numpy",
                "bitsandbytes>=0.45.5; sys_platform == 'never'"]
    problems = unsloth_conflicts(requires)
    from packaging.version import Version

    assert any(p.startswith(f"trl {trl} is installed") for p in problems) == (Version(trl) > Version("1.15.0"))
    assert any(p.startswith(f"datasets {datasets}") for p in problems) == (Version(datasets) >= Version("5"))
    assert not any("tyro" in p or "numpy" in p for p in problems)


def test_doctor_checks_registered() -> None:
    registry = load_registry()
    ids = {c for c in registry.checks if c.startswith("unsloth.")}
    assert ids == {"unsloth.conflicts", "unsloth.device"}
    from thub.specs import CheckContext

    for check_id in ids | {"core.backend-requirements"}:
        result = registry.checks[check_id].run(CheckContext(backend="unsloth"))
        assert result.status in ("ok", "warn", "fail") and (result.status == "ok" or result.fix)


def test_missing_library_fix_is_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from thub.specs import CheckContext

    monkeypatch.setattr("thub.selection.requirement_problem",
                        lambda spec: "unsloth is not installed" if spec.startswith("unsloth>=") else None)
    result = load_registry().checks["core.backend-requirements"].run(CheckContext(backend="unsloth"))
    assert (result.status, result.summary) == ("fail", "backend unsloth is missing unsloth>=2026.1.1")
    # what `thub install` runs: an environment of its own with unsloth in it (no index, no hand-made venv)
    assert result.fix.startswith("thub install unsloth --into managed --gpu") and "--extra unsloth" in result.fix
    assert result.details == ("unsloth is not installed",)


def test_collator_pads_labels_with_ignore_index() -> None:
    from thub_plugin_unsloth.runner import LabelPadCollator

    batch = LabelPadCollator(pad_token_id=0)([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
                                              {"input_ids": [8], "labels": [8]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


@pytest.mark.parametrize("unmask", [False, True])
@pytest.mark.parametrize("data", ["demo", "edge_cases"])
def test_rows_get_the_template_marked_labels(data: str, unmask: bool, tiny_model: Path, demo_data: Path,
                                             edge_cases: Path, edge_cases_max_seq_len: int, tmp_path: Path) -> None:
    """The rows the runner trains on are, row by row, the tokens the model's template marks (tool calls,
    odd turn orders, Unicode, unmask rows, the overlong row cut at max_seq_len)."""
    from thub_plugin_unsloth.runner import prepare_rows
    from transformers import AutoTokenizer

    from thub.data import load_dataset_rows
    from thub.runner.context import RunContext
    from thub.runner.rundir import RunDirectory
    from thub.testing.masks import mask_differences

    path = (demo_data if data == "demo" else edge_cases) / "chat.jsonl"
    registry = load_registry()
    flags = {**BASE, "data_path": str(path), "max_seq_len": edge_cases_max_seq_len, "unmask_messages": unmask}
    params = resolve(registry, "lora_sft", backend="unsloth", flags=flags, environ={}).values()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows = prepare_rows(RunContext("lora_sft", "unsloth", params, RunDirectory(tmp_path)),
                        registry.translate("lora_sft", "unsloth", params), tokenizer)
    assert mask_differences(load_dataset_rows(str(path)), rows, tokenizer, edge_cases_max_seq_len,
                            unmask=unmask) == []


def test_save_merged_exports_16_bit_after_the_adapter() -> None:
    assert _plan()["merged"] is None
    assert _plan(save_merged=True)["merged"] == {"dir": "out/merged", "save_method": "merged_16bit"}
    with pytest.raises(UsageError, match="needs save_final_checkpoint"):
        _plan(save_merged=True, save_final_checkpoint=False)


def test_lora_alpha_default_is_thubs_everywhere() -> None:
    assert _plan()["lora"]["lora_alpha"] == 32 and _plan()["lora"]["r"] == 16


def test_unset_parameters_leave_trls_defaults_in_unslotheds_config() -> None:
    """Required-only lora_sft: every SFTConfig field (TRL's dataclass defaults) keeps TRL's value
    except the declared backend defaults and what thub/unsloth set on purpose."""
    import dataclasses

    import trl

    plan = _plan()
    fields = {f.name: f for f in dataclasses.fields(trl.SFTConfig)}

    def default(name: str):
        field = fields[name]
        return field.default if field.default is not dataclasses.MISSING else field.default_factory()

    differing = {name for name, value in plan["config"].items() if value != default(name)}
    declared = {"num_train_epochs", "learning_rate", "max_length", "warmup_steps", "weight_decay", "max_grad_norm"}
    on_purpose = {
        "output_dir", "logging_steps", "use_cpu", "bf16", "disable_tqdm", "save_strategy", "report_to",  # as trl
        "gradient_checkpointing",  # False here: unsloth checkpoints itself (get_peft_model use_gradient_checkpointing)
        "dataset_kwargs", "remove_unused_columns", "dataloader_pin_memory",  # thub hands unsloth tokenized rows
    }
    assert differing == declared | on_purpose, sorted(differing ^ (declared | on_purpose))
    assert plan["lora"]["use_gradient_checkpointing"] == "unsloth"  # unset: unsloth's own default
