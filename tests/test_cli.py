"""The CLI surface: listings, dry run, config helpers, exit codes."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DRY = ["--model-path", "m", "--data-path", str(ROOT / "examples/data/chat.jsonl"), "--ckpt-output-dir", "out"]


def test_help_lists_commands(thub_cli) -> None:
    result = thub_cli("-h")
    assert result.exit_code == 0
    for command in ("train", "plugins", "backends", "algorithms", "config", "doctor"):
        assert command in result.stdout


def test_version_lists_plugins(thub_cli) -> None:
    result = thub_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("thub 0.1.0")
    assert "plugin trl: thub-plugin-trl" in result.stdout


def test_plugins_json_lists_builtins(thub_cli) -> None:
    data = thub_cli("plugins", "--json").json()
    names = {p["name"]: p for p in data["plugins"]}
    assert data["schema_version"] == 1
    assert names["thub_builtins.algorithms"]["registered"]["algorithms"] == ["sft", "osft", "lora_sft", "grpo",
                                                                             "lora_grpo", "dpo", "kto"]
    assert names["thub_builtins.rewards"]["registered"]["rewards"] == ["binary", "math", "tool_call"]
    assert names["trl"]["distribution"] == "thub-plugin-trl"
    assert "thub_register_backends" in names["trl"]["hooks"]


@pytest.mark.needs_backend("mini-trainer")  # the one osft backend
def test_algorithms_and_backends_json(thub_cli) -> None:
    algorithms = {a["name"]: a for a in thub_cli("algorithms", "--json").json()["algorithms"]}
    assert algorithms["sft"]["backends"][0] == "trl"
    assert algorithms["osft"]["backends"] == ["mini-trainer"]
    backends = thub_cli("backends", "sft", "--json").json()["backends"]
    assert backends[0]["name"] == "trl" and backends[0]["ready"] is True
    assert thub_cli("backends", "nope").exit_code == 2


def test_dry_run_shows_every_value_with_source_and_translation(thub_cli) -> None:
    result = thub_cli("train", "sft", "--backend", "trl", "--dry-run", *DRY, "--learning-rate", "1e-4")
    assert result.exit_code == 0, result.stderr
    assert "learning_rate" in result.stdout and "flag --learning-rate" in result.stdout
    assert "effective_batch_size" in result.stdout and "backend trl" in result.stdout
    assert "per_device_train_batch_size: 8" in result.stdout
    assert result.stderr == ""  # the plan is what was asked for: stdout


def test_dry_run_json(thub_cli, tmp_path: Path) -> None:
    result = thub_cli("train", "lora_sft", "--dry-run", "--json", *DRY, "--target-modules", "q_proj,k_proj",
                      "--target-modules", "v_proj", "--no-packing")
    assert result.exit_code == 0, result.stderr
    plan = result.json()
    assert plan["backend"] == "trl" and "highest-priority" in plan["backend_reason"]
    assert plan["parameters"]["target_modules"] == {"value": ["q_proj", "k_proj", "v_proj"],
                                                    "source": "flag --target-modules"}
    assert plan["parameters"]["packing"]["value"] is False
    assert plan["translation"]["peft"]["target_modules"] == ["q_proj", "k_proj", "v_proj"]
    assert not (tmp_path / "out").exists()


def test_bad_input_exits_2_without_traceback(thub_cli) -> None:
    result = thub_cli("train", "sft", "--backend", "trl", "--dry-run", *DRY, "--set", "learning_rate=abc")
    assert result.exit_code == 2
    assert "learning_rate (from --set learning_rate)" in result.stderr
    assert "Traceback" not in result.stderr
    unknown = thub_cli("train", "sft", "--dry-run", *DRY, "--set", "lerning_rate=1")
    assert unknown.exit_code == 2 and "did you mean 'learning_rate'" in unknown.stderr
    batch = thub_cli("train", "sft", "--dry-run", *DRY, "--nproc-per-node", "3", "--effective-batch-size", "8")
    assert batch.exit_code == 2 and "nearest valid values: 6, 9" in batch.stderr


def test_config_schema_validates_a_template(thub_cli) -> None:
    schema = thub_cli("config", "schema", "sft").json()
    jsonschema.validate({"model_path": "m", "data_path": "d", "ckpt_output_dir": "o", "learning_rate": 1e-5}, schema)
    try:
        jsonschema.validate({"model_path": "m", "data_path": "d", "ckpt_output_dir": "o", "learning_rate": -1}, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("negative learning rate accepted by the schema")


def test_config_init_template_round_trips(thub_cli, tmp_path: Path) -> None:
    result = thub_cli("config", "init", "grpo")
    assert result.exit_code == 0
    assert "# Completions sampled per prompt." in result.stdout and "# group_size: 8" in result.stdout
    filled = result.stdout.replace("model_path:   # required", "model_path: m").replace(
        "# data_path: null", f"data_path: {ROOT / 'examples/data/grpo.jsonl'}").replace("ckpt_output_dir:   # required",
                                                                                        "ckpt_output_dir: o")
    config = tmp_path / "grpo.yaml"
    config.write_text(filled)
    assert yaml.safe_load(filled)["algorithm"] == "grpo"
    dry = thub_cli("train", "grpo", "--config", str(config), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    source = dry.json()["parameters"]["model_path"]["source"]
    assert source.endswith("grpo.yaml:4") or "grpo.yaml" in source


def test_train_help_is_generated_from_the_model(thub_cli) -> None:
    result = thub_cli("train", "lora_sft", "--help")
    assert result.exit_code == 0
    for option in ("--lora-r", "--lora-alpha", "--target-modules", "--unmask-messages / --no-unmask-messages",
                   "--learning-rate"):
        assert option in result.stdout
    assert "LoRA rank. [lora; default: 16; x >= 1]" in " ".join(result.stdout.split())


def test_every_example_config_resolves(thub_cli) -> None:
    configs = sorted((Path(__file__).parents[1] / "examples" / "configs").glob("*.yaml"))
    assert configs
    for config in configs:
        algorithm = yaml.safe_load(config.read_text()).get("algorithm") or config.stem
        result = thub_cli("train", algorithm, "--config", str(config), "--dry-run", "--json")
        assert result.exit_code == 0, f"{config}: {result.stderr}"
