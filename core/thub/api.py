"""The Python API: the same resolution and validation as the CLI.

    import thub
    plan = thub.dry_run("sft", backend="trl", model_path="m", data_path="d.jsonl", ckpt_output_dir="out")
    result = thub.sft(backend="trl", model_path="m", data_path="d.jsonl", ckpt_output_dir="out")

Keyword arguments rank like CLI flags in the precedence order (they override ``config`` and
``THUB_*``). Errors raise :class:`thub.errors.UsageError` (bad input) or return a result with
``status`` ``failed``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thub.config.resolve import ResolvedConfig, resolve
from thub.manager import get_registry


def _resolve(algorithm: str, backend: str | None, config: str | Path | None, allow_ignored: bool,
             params: dict[str, Any]) -> ResolvedConfig:
    return resolve(get_registry(), algorithm, backend=backend, config_file=config, flags=params,
                   flag_label="api", allow_ignored=allow_ignored)


def plan_data(resolved: ResolvedConfig) -> dict[str, Any]:
    """The dry-run plan: every value with its source, and the backend-native translation."""
    values = resolved.values()
    return {
        "schema_version": 1,
        "algorithm": resolved.algorithm.name,
        "backend": resolved.backend.name,
        "backend_reason": resolved.backend_reason,
        "parameters": {k: {"value": v, "source": resolved.sources[k]} for k, v in values.items()},
        "ignored": resolved.ignored,
        "translation": get_registry().translate(resolved.algorithm.name, resolved.backend.name, values),
    }


def dry_run(algorithm: str, *, backend: str | None = None, config: str | Path | None = None,
            allow_ignored: bool = False, **params: Any) -> dict[str, Any]:
    """Resolve and validate; return the plan without running anything."""
    return plan_data(_resolve(algorithm, backend, config, allow_ignored, params))


def train(algorithm: str, *, backend: str | None = None, config: str | Path | None = None,
          overwrite: bool = False, resume: bool = False, allow_ignored: bool = False,
          progress: bool = False, **params: Any) -> dict[str, Any]:
    """Run ``algorithm`` to its end in a supervised child process; returns ``result.json``."""
    from thub.runner import run_training

    resolved = _resolve(algorithm, backend, config, allow_ignored, params)
    return run_training(resolved, overwrite=overwrite, resume=resume,
                        command_line=["thub.train", algorithm], quiet_json=not progress)


def sft(**kwargs: Any) -> dict[str, Any]:
    """``train("sft", ...)``: full fine-tuning (continued pretraining with is_pretraining)."""
    return train("sft", **kwargs)


def osft(**kwargs: Any) -> dict[str, Any]:
    """``train("osft", ...)``: orthogonal-subspace fine-tuning."""
    return train("osft", **kwargs)


def lora_sft(**kwargs: Any) -> dict[str, Any]:
    """``train("lora_sft", ...)``: LoRA/QLoRA supervised fine-tuning."""
    return train("lora_sft", **kwargs)


def grpo(**kwargs: Any) -> dict[str, Any]:
    """``train("grpo", ...)``: full-parameter GRPO."""
    return train("grpo", **kwargs)


def lora_grpo(**kwargs: Any) -> dict[str, Any]:
    """``train("lora_grpo", ...)``: GRPO on LoRA adapters."""
    return train("lora_grpo", **kwargs)
