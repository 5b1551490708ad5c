"""Parameter resolution: precedence, sources, clear errors, honoured parameters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError

REQUIRED = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


def test_precedence_and_sources(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: out\nlearning_rate: 1.0e-3\nnum_epochs: "
                      "3\nseed: 7\nmax_seq_len: 64\n")
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
    with pytest.raises(UsageError,
                       match=r"c\.yaml:2: unknown parameter 'learning_rat' \(did you mean 'learning_rate'\?\)"):
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
    with pytest.raises(UsageError,
                       match="ckpt_output_dir: required; set it in the config file, with --ckpt-output-dir"):
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
                      "  - path: b.jsonl\n    format: sharegpt\n    role_tag: speaker\n"
                      "mix_strategy: interleave_under\n")
    resolved = resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    assert resolved.values()["datasets"][1] == {"path": "b.jsonl", "format": "sharegpt", "role_tag": "speaker"}
    flagged = resolve(thub_registry, "sft", backend="trl", environ={},
                      flags={"model_path": "m", "ckpt_output_dir": "o",
                             "datasets": ["a.jsonl:prob=0.3,format=messages", "b.jsonl"]})
    assert flagged.values()["datasets"] == ["a.jsonl:prob=0.3,format=messages", "b.jsonl"]
    with pytest.raises(UsageError, match="data_path or datasets is required"):
        resolve(thub_registry, "sft", backend="trl", flags={"model_path": "m", "ckpt_output_dir": "o"}, environ={})


def test_dataset_flag_is_repeatable_and_not_split_on_commas(thub_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a dry run checks its data: two real files
    chat = (Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl").read_text()
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(chat)
    result = thub_cli("train", "sft", "--dry-run", "--json", "--model-path", "m", "--ckpt-output-dir", "o",
                      "--dataset", "a.jsonl:prob=0.3,format=messages", "--dataset", "b.jsonl",
                      "--mix-strategy", "interleave_over", "--mix-probabilities", "0.3,0.7")
    assert result.exit_code == 0, result.stderr
    params = result.json()["parameters"]
    assert params["datasets"] == {"value": ["a.jsonl:prob=0.3,format=messages", "b.jsonl"], "source": "flag --dataset"}
    assert params["mix_probabilities"]["value"] == [0.3, 0.7]


def test_python_api_rejects_unknown_parameter_with_suggestion(thub_registry) -> None:
    from thub.api import dry_run

    with pytest.raises(UsageError,
                       match=r"api learning_rat: unknown parameter 'learning_rat' \(did you mean 'learning_rate'\?\)"):
        dry_run("sft", backend="trl", model_path="m", data_path="d", ckpt_output_dir="o", learning_rat=1e-5)
    chat = str(Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl")  # the plan validates the data
    plan = dry_run("sft", backend="trl", model_path="m", data_path=chat, ckpt_output_dir="o", learning_rate=1e-5)
    assert plan["parameters"]["learning_rate"] == {"value": 1e-5, "source": "api learning_rate"}


# --- non-finite floats (issue 13, item 1): every source, every float field, exit 2 naming it ---

NON_FINITE = ["inf", "-inf", "1e309", "nan", ".inf", ".nan"]


@pytest.mark.parametrize("text", NON_FINITE)
def test_non_finite_from_set_and_env_is_rejected(thub_registry, text: str) -> None:
    for field in ("learning_rate", "eps", "max_grad_norm", "weight_decay"):
        with pytest.raises(UsageError, match=rf"{field} \(from --set {field}\): .*finite"):
            resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, overrides=[f"{field}={text}"], environ={})
    with pytest.raises(UsageError, match=r"learning_rate \(from env THUB_LEARNING_RATE\): .*finite"):
        resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={"THUB_LEARNING_RATE": text})


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", "1e309", "1.0e+309"])
def test_non_finite_from_yaml_is_rejected_with_file_and_line(thub_registry, tmp_path: Path, text: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"model_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\nmax_grad_norm: {text}\n")
    with pytest.raises(UsageError, match=rf"max_grad_norm \(from {config}:4\): .*finite"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_non_finite_from_python_api_and_nested_values(thub_registry) -> None:
    from thub.api import dry_run

    for value in (float("inf"), float("nan"), float("-inf")):
        with pytest.raises(UsageError, match=r"learning_rate \(from api learning_rate\): .*finite"):
            dry_run("sft", backend="trl", **REQUIRED, learning_rate=value)
    # floats inside lists and free-form mappings are checked too
    with pytest.raises(UsageError, match=r"mix_probabilities.*finite"):
        resolve(thub_registry, "sft", backend="trl", environ={},
                flags={**REQUIRED, "datasets": ["b.jsonl"], "mix_probabilities": [0.5, float("inf")]})
    with pytest.raises(UsageError, match=r"lr_scheduler_kwargs\.min_lr \(from --set lr_scheduler_kwargs\): .*finite"):
        resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={},
                overrides=["lr_scheduler_kwargs={min_lr: .inf}"])


def test_non_finite_rejected_by_the_models_themselves() -> None:
    from pydantic import ValidationError

    from thub_builtins.params import GRPOParams, LoRASFTParams

    with pytest.raises(ValidationError, match="finite"):
        LoRASFTParams(**REQUIRED, lora_dropout=float("nan"))
    with pytest.raises(ValidationError, match="finite"):
        GRPOParams(**REQUIRED, temperature=float("inf"))


@pytest.mark.parametrize("flag_value", ["inf", "1e309", "nan"])
def test_non_finite_flag_exits_2_naming_the_option(thub_cli, flag_value: str) -> None:
    result = thub_cli("train", "sft", "--backend", "trl", "--dry-run", "--model-path", "m", "--data-path", "d.jsonl",
                      "--ckpt-output-dir", "o", "--learning-rate", flag_value)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "learning_rate (from flag --learning-rate)" in result.stderr and "finite" in result.stderr
    assert "Traceback" not in result.stderr


def test_finite_floats_still_accepted(thub_registry) -> None:
    resolved = resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={"THUB_EPS": "1e-8"},
                       overrides=["learning_rate=2e-5", "max_grad_norm=1"])
    assert (resolved.values()["learning_rate"], resolved.values()["eps"],
            resolved.values()["max_grad_norm"]) == (2e-5, 1e-8, 1.0)


# --- values kept as typed (issue 13, item 9): a string field takes the raw text ---

@pytest.mark.parametrize("text", ["/x/run #2", "null", "2024-01-01", "~", "yes", "0x1F", "1e3", "[a, b]", "{a: 1}",
                                  "'quoted'", "a: b", "- item", "*anchor", "!!binary abc"])
def test_string_fields_take_the_raw_text_from_set_and_env(thub_registry, text: str) -> None:
    resolved = resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={"THUB_WANDB_PROJECT": text},
                       overrides=[f"wandb_run_name={text}", f"ckpt_output_dir={text}"], allow_ignored=True)
    values = resolved.values()
    assert values["wandb_run_name"] == values["wandb_project"] == text
    # a path field's leading ~ is the home directory (issue 23 item 1: thub and the library agree)
    assert values["ckpt_output_dir"] == os.path.expanduser(text)


def test_typed_fields_still_parse(thub_registry) -> None:
    resolved = resolve(thub_registry, "grpo", backend="trl", flags=REQUIRED, environ={"THUB_NPROC_PER_NODE": "2"},
                       overrides=["temperature=0.5", "group_size=4", "reward=math,format", "beta=0",
                                  "lr_scheduler_kwargs={min_lr: 1.0e-6}", "save_final_checkpoint=false"],
                       allow_ignored=True)
    values = resolved.values()
    assert values["nproc_per_node"] == 2 and values["temperature"] == 0.5 and values["group_size"] == 4
    assert values["reward"] == ["math", "format"] and values["beta"] == 0
    assert values["lr_scheduler_kwargs"] == {"min_lr": 1e-6} and values["save_final_checkpoint"] is False
    auto = resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={}, overrides=["nproc_per_node=auto"])
    assert auto.values()["nproc_per_node"] == "auto"


def test_a_wrongly_typed_value_names_the_field(thub_registry) -> None:
    with pytest.raises(UsageError, match=r"num_epochs \(from --set num_epochs\): .*integer.*'2024-01-01'"):
        resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={}, overrides=["num_epochs=2024-01-01"])


def test_cli_string_flag_and_set_keep_hash_and_null(thub_cli, tmp_path: Path, demo_data: Path) -> None:
    out = f"{tmp_path}/run #2"
    result = thub_cli("train", "sft", "--backend", "trl", "--dry-run", "--json", "--model-path", "m",
                      "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", "o",
                      "--set", f"ckpt_output_dir={out}",
                      env={"THUB_WANDB_RUN_NAME": "null", "THUB_WANDB_PROJECT": "p"})  # a run name needs its project
    assert result.exit_code == 0, result.stderr
    params = result.json()["parameters"]
    assert params["ckpt_output_dir"]["value"] == out and params["wandb_run_name"]["value"] == "null"


# --- config file limits (issue 13, item 12) ---

def test_duplicate_keys_name_both_lines(thub_registry, tmp_path: Path) -> None:
    config = tmp_path / "dup.yaml"
    config.write_text("model_path: m\ndata_path: d.jsonl\nlearning_rate: 1.0e-5\nckpt_output_dir: o\nlearning_rate: "
                      "1.0e-3\n")
    with pytest.raises(UsageError, match=rf"{config}:5: duplicate key 'learning_rate' \(first at line 3\)"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})
    nested = tmp_path / "nested.yaml"
    nested.write_text("model_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\nlr_scheduler_kwargs:\n  min_lr: 1\n  "
                      "min_lr: 2\n")
    with pytest.raises(UsageError, match=rf"{nested}:6: duplicate key 'min_lr' \(first at line 5\)"):
        resolve(thub_registry, "sft", backend="trl", config_file=nested, environ={})


def test_oversized_config_is_refused_before_parsing(thub_registry, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    config = tmp_path / "big.yaml"
    with open(config, "w") as handle:
        handle.write("model_path: m\n")
        handle.truncate(10 * 1024 * 1024 + 1)  # sparse: costs no disk

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the YAML parser must not see an oversized file")

    monkeypatch.setattr(yaml, "compose", never)
    monkeypatch.setattr(yaml, "safe_load", never)
    with pytest.raises(UsageError, match=rf"{config}: config file is .* MB; the limit is 10 MB"):
        resolve(thub_registry, "sft", backend="trl", config_file=config, environ={})


def test_oversized_config_exits_2_without_traceback(thub_cli, tmp_path: Path) -> None:
    config = tmp_path / "big.yaml"
    with open(config, "w") as handle:
        handle.write("model_path: m\n")
        handle.truncate(64 * 1024 * 1024)
    result = thub_cli("train", "sft", "--backend", "trl", "--dry-run", "--config", str(config))
    assert result.exit_code == 2 and "the limit is 10 MB" in result.stderr and "Traceback" not in result.stderr


def test_cluster_files_have_the_same_limits(tmp_path: Path) -> None:
    from thub.launch.profiles import load_profiles

    clusters = tmp_path / "clusters.yaml"
    clusters.write_text("clusters:\n  big:\n    partition: gpu\n    partition: cpu\n")
    with pytest.raises(UsageError, match=rf"{clusters}:4: duplicate key 'partition' \(first at line 3\)"):
        load_profiles(clusters)
    with open(clusters, "w") as handle:
        handle.write("clusters: {}\n")
        handle.truncate(10 * 1024 * 1024 + 1)
    with pytest.raises(UsageError, match="cluster file is .* MB; the limit is 10 MB"):
        load_profiles(clusters)


# --- issue 16.2: PET_* and --nodes/--gpus-per-node are layers of resolve(), for the CLI and Python alike ----

PET = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.7",
       "PET_MASTER_PORT": "29511"}
CHAT = str(Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl")


def _only_env(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("THUB_", "PET_")):
            monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def _cli_plan(thub_cli, out: Path, *more: str) -> dict:
    import json

    done = thub_cli("train", "sft", "--backend", "trl", "--model-path", "m", "--data-path", CHAT,
                    "--ckpt-output-dir", str(out), "--effective-batch-size", "8", *more, "--dry-run", "--json")
    assert done.exit_code == 0, (done.stdout, done.stderr, done.exception)
    return json.loads(done.stdout)


def test_python_api_and_cli_resolve_pet_environment_alike(thub_cli, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    import thub

    _only_env(monkeypatch, PET)
    out = tmp_path / "o"
    api = thub.dry_run("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir=str(out),
                       effective_batch_size=8)
    cli = _cli_plan(thub_cli, out)
    expected = {"nnodes": (2, "env PET_NNODES"), "nproc_per_node": (2, "env PET_NPROC_PER_NODE"),
                "node_rank": (1, "env PET_NODE_RANK"), "master_addr": ("10.0.0.7", "env PET_MASTER_ADDR"),
                "master_port": (29511, "env PET_MASTER_PORT")}
    for name, (value, source) in expected.items():
        assert api["parameters"][name] == {"value": value, "source": source} == cli["parameters"][name], name
    assert {k: p["value"] for k, p in api["parameters"].items()} == {k: p["value"]
                                                                     for k, p in cli["parameters"].items()}
    assert api["translation"] == cli["translation"] and api["translation"]["world_size"] == 4
    assert api["torchrun"] == cli["torchrun"] and api["torchrun"]["nnodes"] == {"value": 2, "source": "env PET_NNODES"}


def test_pet_environment_is_a_layer_below_explicit_values(thub_registry, monkeypatch: pytest.MonkeyPatch,
                                                          thub_cli, tmp_path: Path) -> None:
    resolved = resolve(thub_registry, "sft", backend="trl", flags={**REQUIRED, "nnodes": 3},
                       environ={**PET, "THUB_NODE_RANK": "2"})
    assert (resolved.values()["nnodes"], resolved.sources["nnodes"]) == (3, "flag --nnodes")
    assert (resolved.values()["node_rank"], resolved.sources["node_rank"]) == (2, "env THUB_NODE_RANK")
    assert resolved.sources["master_port"] == "env PET_MASTER_PORT"
    with pytest.raises(UsageError, match=r"nnodes \(from env PET_NNODES\): Input should be"):
        resolve(thub_registry, "sft", backend="trl", flags=REQUIRED, environ={"PET_NNODES": "two"})
    # --nodes / --gpus-per-node are a layer too: their own source, above PET_*
    _only_env(monkeypatch, PET)
    cli = _cli_plan(thub_cli, tmp_path / "o", "--nodes", "1", "--gpus-per-node", "4")
    assert cli["parameters"]["nnodes"] == {"value": 1, "source": "flag --nodes"}
    assert cli["parameters"]["nproc_per_node"] == {"value": 4, "source": "flag --gpus-per-node"}
    assert cli["parameters"]["node_rank"] == {"value": 1, "source": "env PET_NODE_RANK"}


def test_cli_train_patches_no_parameter_after_resolve_and_has_no_launch_cycle() -> None:
    import thub.cli.train
    import thub.launch.submit

    train = Path(thub.cli.train.__file__).read_text()
    assert "apply_pet_environment" not in train and "distributed_flags" not in train
    assert "from thub.cli.train import" not in Path(thub.launch.submit.__file__).read_text()


def test_pet_environment_is_no_error_for_a_backend_that_does_not_start_torchrun(thub_registry) -> None:
    # Kubeflow sets PET_* on every worker: a backend that leaves them to its library is not refused
    # (as before PET_* became a layer), while the same value set by the user still is
    if "unsloth" not in thub_registry.backends:
        pytest.skip("thub-plugin-unsloth is not installed")
    resolved = resolve(thub_registry, "lora_sft", backend="unsloth", flags=REQUIRED, environ=PET)
    assert resolved.sources["nnodes"] == "env PET_NNODES" and not resolved.ignored
    with pytest.raises(UsageError, match=r"nnodes \(from env THUB_NNODES\)"):
        resolve(thub_registry, "lora_sft", backend="unsloth", flags=REQUIRED, environ={"THUB_NNODES": "2"})


def _honouring(registry, *names: str) -> list[tuple[str, str]]:
    """(algorithm, backend) pairs whose backend honours every one of ``names``."""
    return [(algorithm, spec.name) for spec in registry.backends.values()
            for algorithm, honoured in spec.algorithms.items() if set(names) <= honoured]


_ALSO_REQUIRED = {"osft": {"unfreeze_rank_ratio": 0.25}}


@pytest.mark.needs_backend("mini-trainer")
def test_settings_that_cannot_both_hold_are_refused_on_every_backend(thub_registry) -> None:
    """save_steps and checkpoint_at_epoch: HF Trainer (trl, unsloth, LLaMA-Factory, axolotl) has one
    save_strategy, so one of them was silently dropped; validation_frequency without validation_split
    validates nothing anywhere. Both are refused at resolution (exit 2), whichever backend runs them."""
    pairs = _honouring(thub_registry, "save_steps", "checkpoint_at_epoch")
    assert {"trl", "mini-trainer"} <= {backend for _, backend in pairs}
    for algorithm, backend in pairs:
        with pytest.raises(UsageError, match="save_steps and checkpoint_at_epoch cannot both be set"):
            resolve(thub_registry, algorithm, backend=backend, environ={},
                    flags={**REQUIRED, **_ALSO_REQUIRED.get(algorithm, {}), "save_steps": 5,
                           "checkpoint_at_epoch": True})
    pairs = _honouring(thub_registry, "validation_frequency")
    assert {"trl", "mini-trainer"} <= {backend for _, backend in pairs}
    for algorithm, backend in pairs:
        with pytest.raises(UsageError, match="validation_frequency .* needs validation_split > 0"):
            resolve(thub_registry, algorithm, backend=backend, environ={},
                    flags={**REQUIRED, **_ALSO_REQUIRED.get(algorithm, {}), "validation_frequency": 5})
    # each alone, and checkpoint_at_epoch: false beside save_steps, still resolve
    for flags in ({"save_steps": 5}, {"checkpoint_at_epoch": True}, {"save_steps": 5, "checkpoint_at_epoch": False},
                  {"validation_split": 0.1, "validation_frequency": 5}):
        resolve(thub_registry, "sft", backend="trl", flags={**REQUIRED, **flags}, environ={})
