"""Parameter resolution: precedence, sources, clear errors, honoured parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError

REQUIRED = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


def test_precedence_and_sources(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: out\nlearning_rate: 1.0e-3\nnum_epochs: 3\nseed: 7\nmax_seq_len: 64\n")
    resolved = resolve(
        thub_registry, "sft", backend="trl", config_file=config,
        environ={"THUB_NUM_EPOCHS": "4", "THUB_SEED": "8", "THUB_MAX_SEQ_LEN": "99"},
        flags={"seed": 9, "max_seq_len": 100}, overrides=["max_seq_len=128"],
    )
    values, sources = resolved.values(), resolved.sources
    assert (values["effective_batch_size"], sources["effective_batch_size"]) == (8, "backend trl")
    assert (values["learning_rate"], sources["learning_rate"]) == (1e-3, f"{config}:4")
    assert (values["num_epochs"], sources["num_epochs"]) == (4, "env THUB_NUM_EPOCHS")
    assert (values["seed"], sources["seed"]) == (9, "flag --seed")
    assert (values["max_seq_len"], sources["max_seq_len"]) == (128, "--set max_seq_len")
    assert sources["packing"] == "default"


def test_unknown_key_in_config_names_file_line_and_suggestion(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("model_path: m\nlearning_rat: 1e-5\n")
    with pytest.raises(UsageError, match=r"c\.yaml:2: unknown parameter 'learning_rat' \(did you mean 'learning_rate'\?\)"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_invalid_yaml_has_line(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("model_path: m\nlearning_rate: [1,\n")
    with pytest.raises(UsageError, match=r"bad\.yaml:\d+: invalid YAML"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_invalid_value_names_field_and_source(thub_registry) -> None:
    with pytest.raises(UsageError) as info:
        resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, overrides=["learning_rate=-1"], environ={})
    assert "learning_rate (from --set learning_rate): Input should be greater than 0, got -1" in str(info.value)


def test_missing_required_says_how_to_set_it(thub_registry) -> None:
    with pytest.raises(UsageError, match="ckpt_output_dir: required; set it in the config file, with --ckpt-output-dir"):
        resolve(thub_registry, "sft", backend="trl", flags={"model_path": "m", "data_path": "d"}, environ={})


def test_bounds_checked(thub_registry) -> None:
    with pytest.raises(UsageError, match="effective_batch_size .*greater than or equal to 1, got 0"):
        resolve(thub_registry, "sft", backend="trl", flags={**REQUIRED, "effective_batch_size": 0}, environ={})
    from pydantic import ValidationError
    from thub_builtins.params import OSFTParams

    with pytest.raises(ValidationError, match="unfreeze_rank_ratio"):
        OSFTParams(**REQUIRED, unfreeze_rank_ratio=1.5)
    assert OSFTParams(**REQUIRED, unfreeze_rank_ratio=1).unfreeze_rank_ratio == 1


def test_pretraining_requires_block_size(thub_registry) -> None:
    with pytest.raises(UsageError, match="block_size is required when is_pretraining"):
        resolve(thub_registry, "sft", backend="trl", flags={**REQUIRED, "is_pretraining": True}, environ={})


def test_not_honoured_is_an_error_naming_alternatives(thub_registry) -> None:
    with pytest.raises(UsageError) as info:
        resolve(thub_registry, "sft", backend="trl", flags={**REQUIRED, "max_tokens_per_gpu": 4096}, environ={})
    assert "backend 'trl' does not honour" in str(info.value)
    assert "max_tokens_per_gpu (from flag --max-tokens-per-gpu)" in str(info.value)


def test_allow_ignored_turns_it_into_a_warning(thub_registry) -> None:
    resolved = resolve(thub_registry, "sft", backend="trl", flags={**REQUIRED, "max_tokens_per_gpu": 4096},
                       environ={}, allow_ignored=True)
    assert resolved.ignored and "max_tokens_per_gpu" in resolved.ignored[0]


def test_unknown_backend_and_wrong_algorithm(thub_registry) -> None:
    with pytest.raises(UsageError, match="unknown backend 'trll' \\(did you mean 'trl'\\?\\)"):
        resolve(thub_registry, "sft", backend="trll", flags=REQUIRED, environ={})
    with pytest.raises(UsageError, match="unknown algorithm 'sfft' \\(did you mean 'sft'\\?\\)"):
        resolve(thub_registry, "sfft", flags=REQUIRED, environ={})


def test_backend_chosen_automatically_with_reason(thub_registry) -> None:
    resolved = resolve(thub_registry, "lora_sft", flags=REQUIRED, environ={})
    assert resolved.backend.name == "trl"
    assert "highest-priority backend for lora_sft" in resolved.backend_reason


def test_list_values_from_env_and_set(thub_registry) -> None:
    resolved = resolve(thub_registry, "lora_sft", backend="trl", flags=REQUIRED,
                       environ={"THUB_TARGET_MODULES": "q_proj,v_proj"}, overrides=["lora_r=4"])
    assert resolved.values()["target_modules"] == ["q_proj", "v_proj"]
    assert resolved.values()["lora_r"] == 4


def test_config_file_for_another_algorithm_is_rejected(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("algorithm: grpo\n")
    with pytest.raises(UsageError, match="config is for algorithm 'grpo', not 'sft'"):
        resolve(thub_registry, "sft", config_file=config, environ={})


def test_datasets_mix_from_flags_and_yaml(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "mix.yaml"
    config.write_text("model_path: m\nckpt_output_dir: o\ndatasets:\n  - {path: a.jsonl, prob: 0.7}\n"
                      "  - path: b.jsonl\n    format: sharegpt\n    role_tag: speaker\nmix_strategy: interleave_under\n")
    resolved = resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    assert resolved.values()["datasets"][1] == {"path": "b.jsonl", "format": "sharegpt", "role_tag": "speaker"}
    flagged = resolve(thub_registry, "sft", backend="trl", environ={},
                      flags={"model_path": "m", "ckpt_output_dir": "o",
                             "datasets": ["a.jsonl:prob=0.3,format=messages", "b.jsonl"]})
    assert flagged.values()["datasets"] == ["a.jsonl:prob=0.3,format=messages", "b.jsonl"]
    with pytest.raises(UsageError, match="data_path or datasets is required"):
        resolve(thub_registry, "sft", backend="trl", flags={"model_path": "m", "ckpt_output_dir": "o"}, environ={})


def test_dataset_flag_is_repeatable_and_not_split_on_commas(thub_cli) -> None:
    result = thub_cli("train", "sft", "--dry-run", "--json", "--model-path", "m", "--ckpt-output-dir", "o",
                      "--dataset", "a.jsonl:prob=0.3,format=messages", "--dataset", "b.jsonl",
                      "--mix-strategy", "interleave_over", "--mix-probabilities", "0.3,0.7")
    assert result.exit_code == 0, result.stderr
    params = result.json()["parameters"]
    assert params["datasets"] == {"value": ["a.jsonl:prob=0.3,format=messages", "b.jsonl"], "source": "flag --dataset"}
    assert params["mix_probabilities"]["value"] == [0.3, 0.7]


def test_python_api_rejects_unknown_parameter_with_suggestion(thub_registry) -> None:
    from thub.api import dry_run

    with pytest.raises(UsageError, match="api learning_rat: unknown parameter 'learning_rat' \\(did you mean 'learning_rate'\\?\\)"):
        dry_run("sft", backend="trl", model_path="m", data_path="d", ckpt_output_dir="o", learning_rat=1e-5)
    plan = dry_run("sft", backend="trl", model_path="m", data_path="d", ckpt_output_dir="o", learning_rate=1e-5)
    assert plan["parameters"]["learning_rate"] == {"value": 1e-5, "source": "api learning_rate"}
