"""A tracker's secondary parameter without the parameter that turns the tracker on
(``wandb_entity``/``wandb_run_name`` without ``wandb_project``, ``mlflow_experiment_name``/
``mlflow_run_name`` without ``mlflow_tracking_uri``) changes nothing: an error naming the missing
key (exit 2), on every surface that resolves a run. A backend that uses such a parameter alone
declares it (``BackendSpec.tracker_params_alone``): ART's model name is ``wandb_run_name``."""

from __future__ import annotations

from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry

REQUIRED = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}

#: secondary parameter -> the key it needs
SECONDARY = {"wandb_entity": "wandb_project", "wandb_run_name": "wandb_project",
             "mlflow_experiment_name": "mlflow_tracking_uri", "mlflow_run_name": "mlflow_tracking_uri"}


@pytest.mark.parametrize("name", list(SECONDARY))
def test_a_secondary_parameter_without_its_key_is_refused(name: str) -> None:
    key = SECONDARY[name]
    with pytest.raises(UsageError, match=rf"{name} \(from flag --{name.replace('_', '-')}\): changes nothing "
                                         rf"without {key}"):
        resolve(load_registry(), "sft", backend="trl", flags={**REQUIRED, name: "x"}, environ={})
    # with its key it is honoured as before
    key_value = "file:///tmp/mlruns" if key == "mlflow_tracking_uri" else "p"
    values = resolve(load_registry(), "sft", backend="trl", flags={**REQUIRED, name: "x", key: key_value},
                     environ={}).values()
    assert values[name] == "x"


def test_every_missing_key_is_named_at_once_and_allow_ignored_records_them() -> None:
    flags = {**REQUIRED, "wandb_run_name": "r", "mlflow_experiment_name": "e"}
    with pytest.raises(UsageError) as refused:
        resolve(load_registry(), "sft", backend="trl", flags=flags, environ={"THUB_MLFLOW_RUN_NAME": "m"})
    message = str(refused.value)
    for name in ("wandb_run_name", "mlflow_experiment_name", "mlflow_run_name (from env THUB_MLFLOW_RUN_NAME)"):
        assert name in message, message
    resolved = resolve(load_registry(), "sft", backend="trl", flags=flags, environ={}, allow_ignored=True)
    assert [line.split(" ")[0] for line in resolved.ignored] == ["mlflow_experiment_name", "wandb_run_name"]


def test_art_uses_wandb_run_name_alone_as_its_model_name() -> None:
    registry = load_registry()
    assert registry.backend("art").tracker_params_alone == frozenset({"wandb_run_name"})
    base = {**REQUIRED, "group_size": 4, "reward": ["math"]}
    resolved = resolve(registry, "lora_grpo", backend="art", flags={**base, "wandb_run_name": "my-model"}, environ={})
    assert registry.translate("lora_grpo", "art", resolved.values())["model"]["name"] == "my-model"
    with pytest.raises(UsageError, match=r"wandb_entity \(from flag --wandb-entity\): changes nothing without "
                                         r"wandb_project"):
        resolve(registry, "lora_grpo", backend="art", flags={**base, "wandb_entity": "team"}, environ={})


def test_the_cli_exits_2_naming_the_key(thub_cli, demo_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = thub_cli("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path",
                      str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--wandb-run-name", "r",
                      "--dry-run")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "wandb_run_name (from flag --wandb-run-name): changes nothing without wandb_project" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
