"""Unset means the library's default: translating only the required parameters gives TRL's and
PEFT's own dataclass defaults for every field thub does not set on purpose; and bf16 only where
the GPU has it."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from thub.config.resolve import resolve
from thub.manager import load_registry

REQUIRED = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o"}

# Every TRL field a required-only translation sets to something other than TRL's default, and why.
# Anything else differing from TRL's default is a silent change of meaning (the defect: unset
# gradient_checkpointing became False, TRL's default is True).
SET_ON_PURPOSE = {
    "output_dir": "thub's run layout (<ckpt_output_dir>/checkpoints)",
    "num_train_epochs": "thub's declared backend default num_epochs=1 (shown in --dry-run)",
    "logging_steps": "thub's declared default logging_steps=1 (thub's metrics stream, every step)",
    "use_cpu": "the device: CPU when no NVIDIA GPU is visible",
    "bf16": "the device: bf16 on a GPU that has it (None is TRL's 'decide yourself')",
    "disable_tqdm": "thub shows progress from its metrics stream",
    "save_strategy": "thub saves checkpoints only when save_steps/checkpoint_at_epoch ask (README)",
    "report_to": "['none'] is TRL's 'none' as a list",
}
GRPO_SET_ON_PURPOSE = {
    "per_device_train_batch_size": "prompt_batch_size x group_size / world size (declared defaults)",
    "temperature": "thub's declared default temperature=0.7",
}


def field_default(cls: type, name: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def required_only(algorithm: str) -> dict[str, Any]:
    registry = load_registry()
    flags = {**REQUIRED, **({"reward": ["math"]} if "grpo" in algorithm else {})}
    return registry.translate(algorithm, "trl", resolve(registry, algorithm, backend="trl", flags=flags,
                                                       environ={}).values())


@pytest.mark.parametrize("algorithm", ["sft", "lora_sft", "grpo", "lora_grpo", "dpo", "kto"])
def test_unset_parameters_leave_trls_defaults(algorithm: str) -> None:
    import trl
    from peft import LoraConfig

    plan = required_only(algorithm)
    config_class = getattr(trl, plan["config_class"])
    differing = {name for name, value in plan["config"].items() if value != field_default(config_class, name)}
    expected = set(SET_ON_PURPOSE) | (set(GRPO_SET_ON_PURPOSE) if "grpo" in algorithm else set())
    if algorithm.startswith("lora_"):
        expected.add("learning_rate")  # thub's declared backend default for LoRA (2e-4 / 1e-5), in --dry-run
    assert differing == expected, {name: (plan["config"][name], field_default(config_class, name))
                                   for name in differing ^ expected if name in plan["config"]}
    if plan["peft"]:
        # thub's declared LoRA defaults (r 16, alpha 32, dropout, all-linear) and the task type
        lora_differing = {name for name, value in plan["peft"].items() if value != field_default(LoraConfig, name)}
        assert lora_differing <= {"r", "lora_alpha", "lora_dropout", "target_modules", "task_type"}, lora_differing


def test_gradient_checkpointing_unset_is_trls_default_and_set_is_passed() -> None:
    import trl

    assert "gradient_checkpointing" not in required_only("sft")["config"]
    assert field_default(trl.SFTConfig, "gradient_checkpointing") is True
    registry = load_registry()
    for value in (True, False):
        flags = {**REQUIRED, "gradient_checkpointing": value}
        plan = registry.translate("sft", "trl", resolve(registry, "sft", backend="trl", flags=flags,
                                                       environ={}).values())
        assert plan["config"]["gradient_checkpointing"] is value


@pytest.mark.parametrize(("supported", "expected"), [(True, (True, False)), (False, (False, True))])
def test_bf16_falls_back_to_fp16_on_a_gpu_without_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                     supported: bool, expected: tuple[bool, bool]) -> None:
    """The GPU boundary is mocked (no GPU here): torch.cuda reports a GPU with or without bf16."""
    import thub_plugin_trl  # noqa: F401  (the package binds `translate` to the function)
    import torch
    from thub_plugin_trl.runner import mixed_precision

    monkeypatch.setattr(sys.modules["thub_plugin_trl.translate"], "cuda_visible", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: supported)
    config = dict(required_only("sft")["config"])
    assert config["bf16"] is True and config["use_cpu"] is False
    mixed_precision(config)
    assert (config["bf16"], config.get("fp16", False)) == expected
    assert ("no bf16: training in fp16" in capsys.readouterr().out) is not supported
