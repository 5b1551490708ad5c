"""Training Hub 0.11.2's keywords against thub's one table (thub_builtins.training_hub.names).

The wheel is unpacked without dependencies at build/training-hub-0.11.2 (.ci/run) and read with
``ast`` only: its public functions' signatures and its callback hooks. Every keyword must be
honoured under the same name, mapped, accepted as a fixed switch, or refused with a message.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

import thub
from thub.errors import UsageError
from thub.manager import get_registry
from thub_builtins.training_hub import names as th
from thub_builtins.training_hub import rules

ROOT = Path(__file__).parents[1]
WHEEL = ROOT / "build" / "training-hub-0.11.2" / "training_hub"
MODULES = {"sft": "algorithms/sft.py", "osft": "algorithms/osft.py", "lora_sft": "algorithms/lora.py",
           "lora_grpo": "algorithms/lora_grpo.py", "grpo": "algorithms/lora_grpo.py",
           "embedding_sft": "algorithms/embedding_sft.py"}
DATA = str(ROOT / "examples" / "data" / "chat.jsonl")
PROMPTS = str(ROOT / "examples" / "data" / "grpo.jsonl")


def _wheel() -> Path:
    if not (WHEEL / "algorithms" / "sft.py").exists():
        pytest.skip(f"training-hub 0.11.2 is not unpacked at {WHEEL.parent} (see .ci/run)")
    return WHEEL


def wheel_signature(function: str) -> tuple[list[str], list[str], dict[str, str]]:
    """(positional-or-keyword names, keyword-only names, annotations) of a public function."""
    tree = ast.parse((_wheel() / MODULES[function]).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    annotations = {a.arg: ast.unparse(a.annotation) for a in node.args.args + node.args.kwonlyargs if a.annotation}
    return [a.arg for a in node.args.args], [a.arg for a in node.args.kwonlyargs], annotations


def thub_fields(function: str) -> dict[str, Any]:
    return get_registry().algorithm(function).load_parameters().model_fields


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_signature_in_table_is_the_wheels(function: str) -> None:
    positional, keyword_only, _ = wheel_signature(function)
    assert list(rules.SIGNATURES[function]) == positional
    assert list(rules.KEYWORD_ONLY[function]) == keyword_only


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_every_keyword_is_classified(function: str) -> None:
    positional, keyword_only, _ = wheel_signature(function)
    fields = thub_fields(function)
    unclassified = [name for name in positional + keyword_only + list(rules.KWARGS[function])
                    if rules.rule_for(name, fields) is None]
    assert unclassified == []
    for name in positional + keyword_only:
        rule = rules.rule_for(name, fields)
        assert rule.kind in ("same", "mapped", "fixed", "refused", "api")
        if rule.kind == "same":
            assert name in fields
        if rule.kind in ("mapped", "refused", "fixed"):
            assert rule.note, name  # a mapping shown, a switch explained, a refusal says what instead


def test_table_rules_are_used_and_targets_exist() -> None:
    used = {name for fn in rules.FUNCTIONS for name in rules.names_for(fn)}
    assert set(rules.RULES) <= used, set(rules.RULES) - used
    for fn in rules.FUNCTIONS:
        fields = thub_fields(fn)
        for name in rules.names_for(fn):
            rule = rules.rule_for(name, fields)
            if rule.kind == "mapped" and name in rules.RULES:
                for target in rule.thub.split(", "):
                    assert target in fields, (fn, name, target)


def test_kwargs_cover_the_backends_own_arguments() -> None:
    """What Training Hub forwards from **kwargs: every instructlab/mini-trainer TrainingArgs field."""
    il = pytest.importorskip("instructlab.training")
    assert set(il.TrainingArgs.model_fields) <= set(rules.names_for("sft"))
    import dataclasses

    mini_trainer = pytest.importorskip("mini_trainer")
    assert {f.name for f in dataclasses.fields(mini_trainer.TrainingArgs)} <= set(rules.names_for("osft"))


SAMPLES: dict[str, list[Any]] = {
    "int": [1, 100], "float": [0.5], "bool": [True, False], "str": ["x"], "List[str]": [["q_proj"]],
    "list[str]": [["q_proj"]], "dict[str, str]": [{"T_max": "10"}],
}
# domain-specific samples of a type Training Hub annotates loosely (str)
DOMAIN = {"nproc_per_node": ["4", 2, "auto"], "bnb_4bit_quant_type": ["nf4"], "lr_scheduler": ["cosine"],
          "rdzv_id": ["job-1", 100], "rdzv_endpoint": ["127.0.0.1:29500"], "master_addr": ["10.0.0.1"],
          "bnb_4bit_compute_dtype": ["bfloat16"],
          "checkpoint_storage": ["s3://bucket/run", "file:///tmp/checkpoints"],  # 'pvc': nothing to set
          "group_size": [8],  # a GRPO group of 1 has no relative advantage: thub asks for >= 2
          "loss_type": ["batch_all_triplet", "mnrl"], "batch_sampler": ["group_by_label", "no_duplicates"],
          "warmup_ratio": [0.0, 0.1], "loss_fn": ["sentence_transformers.losses:BatchSemiHardTripletLoss"]}


def _samples(name: str, annotation: str) -> list[Any]:
    if name in DOMAIN:
        return DOMAIN[name]
    out: list[Any] = []
    for container, sample in (("List[str]", ["q_proj"]), ("list[str]", ["q_proj"]),
                              ("dict[str, str]", {"T_max": "10"})):
        if container in annotation:
            out.append(sample)
            annotation = annotation.replace(container, "")
    text = annotation.replace("Optional[", "").replace("]", "").replace("Union[", "")
    for part in (p.strip() for p in text.replace(",", "|").split("|")):
        out += SAMPLES.get(part, [])
    return out


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_same_names_accept_training_hubs_types(function: str) -> None:
    _, _, annotations = wheel_signature(function)
    fields = thub_fields(function)
    checked = 0
    for name, annotation in annotations.items():
        rule = rules.rule_for(name, fields)
        if rule.kind != "same" or name in ("model_path", "data_path", "ckpt_output_dir"):
            continue
        adapter = TypeAdapter(Annotated[fields[name].annotation, fields[name]])
        for value in _samples(name, annotation):
            converted = rule.convert(value, {})[name] if rule.convert else value
            try:
                adapter.validate_python(converted)
            except ValidationError as exc:
                pytest.fail(f"{function}({name}={value!r}) [{annotation}] is refused by thub: {exc}")
            checked += 1
    assert checked > 10


def test_callback_hooks_and_context_are_training_hubs() -> None:
    tree = ast.parse((_wheel() / "callbacks.py").read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    hooks = [n.name for n in classes["TrainingHubCallback"].body if isinstance(n, ast.FunctionDef)]
    assert hooks == list(rules.CALLBACK_HOOKS)
    fields = [n.target.id for n in classes["TrainingHubContext"].body if isinstance(n, ast.AnnAssign)]
    from dataclasses import fields as dc_fields

    from thub_builtins.training_hub.api import TrainingHubContext, TrainingHubControl

    assert [f.name for f in dc_fields(TrainingHubContext)] == fields
    control = [n.target.id for n in classes["TrainingHubControl"].body if isinstance(n, ast.AnnAssign)]
    assert [f.name for f in dc_fields(TrainingHubControl)] == control
    assert all(hasattr(thub.TrainingHubCallback, hook) for hook in hooks)


@pytest.mark.parametrize(("function", "backend"), [
    pytest.param(function, backend, marks=pytest.mark.needs_backend(backend))
    for function, backend in rules.DEFAULT_BACKEND.items()])
def test_default_backends_are_registered_names(function: str, backend: str) -> None:
    assert function in get_registry().backend(backend).algorithms


def test_migration_guide_table_is_generated_from_the_table() -> None:
    guide = (ROOT / "docs" / "migrating-from-training-hub.md").read_text()
    assert th.markdown_table() in guide, "regenerate: python -c 'from thub_builtins.training_hub.names import " \
                                         "markdown_table; print(markdown_table())'"


# --- parameter sets from Training Hub's example scripts and the issue ----------------------------

def dry(function: str, **params: Any) -> dict[str, Any]:
    return thub.dry_run(function, **params)


def test_lora_example_parameter_set_on_trl(tmp_path: Path) -> None:
    """examples/scripts/lora_example.py's train_kwargs, save_total_limit with them (thub's own parameter)."""
    plan = dry("lora_sft", backend="trl", model_path="m", data_path=DATA, ckpt_output_dir=str(tmp_path),
               lora_r=32, lora_alpha=64, lora_dropout=0.0, num_epochs=3, learning_rate=1e-4, micro_batch_size=1,
               max_seq_len=2048, dataset_type="chat_template", field_messages="messages",
               field_instruction="instruction", field_input="input", field_output="output", load_in_4bit=False,
               load_in_8bit=False, bf16=True, sample_packing=True, logging_steps=10, save_steps=200,
               save_total_limit=3)
    params = plan["parameters"]
    assert params["effective_batch_size"]["value"] == 1
    assert "training-hub name micro_batch_size → effective_batch_size" in params["effective_batch_size"]["source"]
    assert params["packing"]["value"] is True
    assert "training-hub name sample_packing → packing" in params["packing"]["source"]
    assert params["data_format"]["value"] == "messages"
    assert any(note.startswith("bf16=True") for note in plan["training_hub_notes"])
    assert params["save_total_limit"]["value"] == 3 and plan["translation"]["config"]["save_total_limit"] == 3


def test_lora_sft_keeps_three_checkpoints_unless_told_as_in_training_hub(thub_cli, tmp_path: Path) -> None:
    """Training Hub's lora_sft passes save_total_limit=params.get('save_total_limit', 3) to its trainer
    (lora.py): left out, three checkpoints are kept; thub's own default (keep all) applies to thub's names."""
    if "save_total_limit', 3)" not in (_wheel() / MODULES["lora_sft"]).read_text():
        pytest.fail("Training Hub's lora_sft no longer defaults save_total_limit to 3: update FUNCTION_KWARG_DEFAULTS")
    def plan(*extra: str) -> dict[str, Any]:  # Training Hub's convention: its command line (thub.lora_sft too)
        done = thub_cli("lora-sft", "--backend", "trl", "--model-path", "m", "--data-path", DATA,
                        "--ckpt-output-dir", str(tmp_path / "run"), *extra, "--dry-run", "--json")
        assert done.exit_code == 0, done.stderr
        return done.json()

    limit = plan()["parameters"]["save_total_limit"]
    assert limit["value"] == 3 and limit["source"] == "training-hub default save_total_limit=3 (lora_sft on trl)"
    assert plan()["translation"]["config"]["save_total_limit"] == 3
    assert plan("--save-total-limit", "1")["parameters"]["save_total_limit"]["value"] == 1
    # thub's own convention keeps thub's default: every checkpoint
    assert dry("lora_sft", backend="trl", model_path="m", data_path=DATA,
               ckpt_output_dir=str(tmp_path / "own"))["parameters"]["save_total_limit"]["value"] is None


def test_micro_batch_and_accumulation_give_the_effective_batch(tmp_path: Path) -> None:
    base = {"backend": "trl", "model_path": "m", "data_path": DATA, "ckpt_output_dir": str(tmp_path)}
    assert dry("lora_sft", **base, micro_batch_size=2, gradient_accumulation_steps=4, nproc_per_node=2)[
        "parameters"]["effective_batch_size"]["value"] == 16
    plan = dry("lora_sft", **base, micro_batch_size=2, effective_batch_size=32)
    assert plan["parameters"]["effective_batch_size"]["value"] == 32
    assert any(note.startswith("micro_batch_size=2") for note in plan["training_hub_notes"])


def test_sft_hpu_example_torchrun_types(tmp_path: Path) -> None:
    """sft_hpu_example.py passes rdzv_id=101 (an int) and device='hpu'."""
    base = {"backend": "trl", "model_path": "m", "data_path": DATA, "ckpt_output_dir": str(tmp_path)}
    plan = dry("sft", **base, nproc_per_node=1, nnodes=1, node_rank=0, rdzv_id=101,
               rdzv_endpoint="127.0.0.1:29500", warmup_steps=100, checkpoint_at_epoch=True)
    assert plan["parameters"]["rdzv_id"]["value"] == "101"
    with pytest.raises(UsageError, match="device is not supported by thub: .*HPU"):
        dry("sft", **base, device="hpu")


@pytest.mark.parametrize(("function", "params", "message"), [
    pytest.param(*case, marks=pytest.mark.needs_backend(rules.DEFAULT_BACKEND[case[0]])) for case in [
        ("sft", {"fsdp_options": {"cpu_offload": True}}, "fsdp_options=.* is not supported by thub: .*'cpu_offload'"),
        ("sft", {"fsdp_options": {"sharding_strategy": "ZERO3"}}, "fsdp_sharding_strategy"),
        ("osft", {"osft_memory_efficient_init": False, "unfreeze_rank_ratio": 0.3},
         "osft_memory_efficient_init=False is not supported by thub: mini-trainer 0.9 always loads"),
        ("lora_grpo", {"data_config": "Qwen3", "data_path": "data"},
         "data_config='Qwen3' is not supported by thub: .*Hugging Face dataset configuration"),
        ("grpo", {"n_train": 100}, "n_train is not supported by thub: thub reads local files"),
        ("lora_grpo", {"reward_fn": len}, "reward_fn=.* is not supported by thub: Training Hub calls reward_fn as"),
    ]])
def test_refusals_name_why_and_what_instead(tmp_path: Path, function: str, params: dict[str, Any],
                                            message: str) -> None:
    data = PROMPTS if "grpo" in function else DATA
    with pytest.raises(UsageError, match=message):
        dry(function, **{"backend": rules.DEFAULT_BACKEND[function], "model_path": "m", "data_path": data,
                         "ckpt_output_dir": str(tmp_path), **params})


@pytest.mark.needs_backend("mini-trainer")
def test_osft_memory_efficient_init_is_what_mini_trainer_does(tmp_path: Path) -> None:
    """Training Hub's osft examples pass osft_memory_efficient_init=True; mini-trainer 0.9 has no such
    field (Training Hub drops it) and always loads OSFT models memory-efficiently under torchrun."""
    plan = dry("osft", backend="mini-trainer", model_path="m", data_path=DATA, ckpt_output_dir=str(tmp_path),
               unfreeze_rank_ratio=0.25, effective_batch_size=16, max_tokens_per_gpu=4096, max_seq_len=1024,
               learning_rate=5e-6, osft_memory_efficient_init=True)
    assert any(note.startswith("osft_memory_efficient_init=True") and "setup_osft_model_distributed" in note
               for note in plan["training_hub_notes"])
    assert not [key for key in plan["translation"]["training_args"] if "memory_efficient" in key]  # no such field


@pytest.mark.parametrize("function", ["grpo", "lora_grpo"])
def test_data_config_with_a_local_file_changes_nothing_as_in_training_hub(function: str, tmp_path: Path) -> None:
    """data_config is the Hugging Face dataset configuration Training Hub streams data_path with
    (load_dataset(data_path, data_config)); a local .json/.jsonl file is read without it."""
    plan = dry(function, backend="trl", model_path="m", data_path=PROMPTS, ckpt_output_dir=str(tmp_path),
               max_steps=2, data_config="Qwen3")
    assert any(note.startswith("data_config='Qwen3'") for note in plan["training_hub_notes"])


@pytest.mark.needs_backend("instructlab-training")
def test_fsdp_options_map_on_instructlab(tmp_path: Path) -> None:
    """sft's fsdp_options (instructlab-training's FSDPOptions) become thub's FSDP parameters, passed back as
    the library's own FSDPOptions (a dict or the object, as Training Hub takes either)."""
    base = {"backend": "instructlab-training", "model_path": "m", "data_path": DATA, "ckpt_output_dir": str(tmp_path)}
    plan = dry("sft", **base, fsdp_options={"sharding_strategy": "FULL_SHARD", "cpu_offload_params": True})
    params = plan["parameters"]
    assert params["fsdp_sharding_strategy"]["value"] == "FULL_SHARD"
    assert "training-hub name fsdp_options → fsdp_sharding_strategy" in params["fsdp_sharding_strategy"]["source"]
    assert params["fsdp_cpu_offload"]["value"] is True
    options = plan["translation"]["training_args"]["fsdp_options"]
    assert options == {"sharding_strategy": "FULL_SHARD", "cpu_offload_params": True}
    config = pytest.importorskip("instructlab.training.config")
    built = config.FSDPOptions(**options)  # what the runner's TrainingArgs holds
    assert built.sharding_strategy is config.ShardingStrategies.FULL_SHARD and built.cpu_offload_params is True
    plan = dry("sft", **base, fsdp_options=config.FSDPOptions(sharding_strategy=config.ShardingStrategies.NO_SHARD))
    assert plan["translation"]["training_args"]["fsdp_options"] == {"sharding_strategy": "NO_SHARD",
                                                                    "cpu_offload_params": False}
    assert "fsdp_options" not in dry("sft", **base)["translation"]["training_args"]  # the library's default


@pytest.mark.needs_backend("trl")
def test_fsdp_options_refused_where_the_backend_has_no_fsdp(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"backend 'trl' does not honour these sft parameters:\n  fsdp_cpu_offload "
                                         r"\(from api fsdp_options, .*\): backends that do: instructlab-training"):
        dry("sft", backend="trl", model_path="m", data_path=DATA, ckpt_output_dir=str(tmp_path),
            fsdp_options={"cpu_offload_params": True})


@pytest.mark.needs_backend("verl")
def test_grpo_names_map_on_verl(tmp_path: Path) -> None:
    plan = dry("lora_grpo", backend="verl", model_path="m", data_path=PROMPTS, ckpt_output_dir=str(tmp_path),
               n_gpus=4, num_iterations=8, group_size=8, prompt_batch_size=48, lora_r=16, lora_alpha=8,
               reward_type="math", use_dr_grpo=True, max_prompt_length=2048)
    params = plan["parameters"]
    assert params["nproc_per_node"]["value"] == 4
    assert "training-hub name n_gpus → nproc_per_node" in params["nproc_per_node"]["source"]
    assert params["reward"]["value"] == ["math"]


@pytest.mark.needs_backend("mini-trainer")
def test_processed_dataset_switch(tmp_path: Path) -> None:
    processed = tmp_path / "processed.jsonl"  # the plan validates the data: pre-tokenized rows
    processed.write_text(json.dumps({"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}) + "\n")
    plan = dry("osft", backend="mini-trainer", model_path="m", data_path=str(processed), ckpt_output_dir=str(tmp_path),
               unfreeze_rank_ratio=0.25, effective_batch_size=16, max_tokens_per_gpu=4096, max_seq_len=1024,
               learning_rate=5e-6, use_processed_dataset=True)
    assert plan["parameters"]["data_format"]["value"] == "processed"


def test_config_file_and_set_take_training_hub_names(thub_cli, tmp_path: Path) -> None:
    config = tmp_path / "lora.yaml"
    config.write_text(yaml.safe_dump({"model_path": "m", "data_path": DATA, "ckpt_output_dir": str(tmp_path / "o"),
                                      "micro_batch_size": 4, "rdzv_id": 100, "bf16": True}))
    result = thub_cli("train", "lora_sft", "--backend", "trl", "--config", str(config), "--dry-run", "--json",
                      "--set", "sample_packing=false")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["parameters"]["effective_batch_size"] == {
        "value": 4, "source": f"{config}:4, training-hub name micro_batch_size → effective_batch_size"}
    assert plan["parameters"]["rdzv_id"]["value"] == "100"
    assert plan["parameters"]["packing"]["value"] is False
    config.write_text(yaml.safe_dump({"model_path": "m", "data_path": DATA, "ckpt_output_dir": "o",
                                      "per_device_eval_batch_size": 4}))
    result = thub_cli("train", "lora_sft", "--backend", "trl", "--config", str(config), "--dry-run")
    assert result.exit_code == 2
    assert f"{config}:" in result.stderr and "per_device_eval_batch_size is not supported by thub" in result.stderr


@pytest.mark.needs_backend("verl")
def test_none_is_not_given_as_in_training_hub(tmp_path: Path) -> None:
    """Training Hub's signatures default to None; a None (or YAML null) sets nothing."""
    plan = dry("lora_grpo", backend="verl", model_path="m", data_path=PROMPTS, ckpt_output_dir=str(tmp_path),
               data_config=None, n_train=None, tasks=None, reward_fn=None, n_gpus=2)
    assert plan["parameters"]["nproc_per_node"]["value"] == 2
    assert plan["training_hub_notes"] == []


@pytest.mark.parametrize("function", ["lora_grpo", "grpo"])
def test_signature_defaults_are_the_wheels(function: str) -> None:
    tree = ast.parse((_wheel() / MODULES[function]).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    args = node.args.args
    defaults = {a.arg: ast.literal_eval(d) for a, d in zip(args[len(args) - len(node.args.defaults):],
                                                           node.args.defaults)}
    table = rules.SIGNATURE_DEFAULTS[function]
    assert {name: defaults[name] for name in table} == table
    # the others are None, refused Hub-dataset settings, or the backend choice
    assert set(defaults) - set(table) - {n for n, v in defaults.items() if v is None} == {
        "data_config", "n_train", "n_val", "backend"} & set(defaults)


@pytest.mark.parametrize(("backend", "module"), [("verl", "algorithms/lora_grpo_verl.py"),
                                                 ("art", "algorithms/lora_grpo.py")])
def test_backend_reads_are_read_by_the_backend(backend: str, module: str) -> None:
    source = (_wheel() / module).read_text()
    if backend == "verl":
        source = source.split("class VeRLLoRAGRPOBackend", 1)[1]
    else:
        source = source.split("class ARTLoRAGRPOBackend", 1)[1].split("class LoRAGRPOAlgorithm", 1)[0]
    read = set(re.findall(r"""params\.get\(["']([a-z_0-9]+)["']""", source))
    assert rules.BACKEND_READS[backend] <= read
    # and what it does not read is not applied there (Training Hub ignores it on that backend)
    assert not (set(rules.SIGNATURE_DEFAULTS["lora_grpo"]) - rules.BACKEND_READS[backend]) & read


def test_batch_names_use_the_world_size_of_the_merged_layers(thub_cli, tmp_path: Path) -> None:
    """micro_batch_size / gradient_accumulation_steps become effective_batch_size with the world size and
    each other from every layer (a YAML file, THUB_* variables, flags, --set), not only their own."""
    config = tmp_path / "lora.yaml"

    def effective(values: dict[str, Any], *extra: str) -> dict[str, Any]:
        config.write_text(yaml.safe_dump({"model_path": "m", "data_path": DATA, "ckpt_output_dir": str(tmp_path / "o"),
                                          **values}))
        result = thub_cli("train", "lora_sft", "--backend", "trl", "--config", str(config), "--dry-run", "--json",
                          *extra)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["parameters"]["effective_batch_size"]

    # nproc_per_node in the file, micro_batch_size on the command line: 4 x 1 x 2
    entry = effective({"nproc_per_node": 2}, "--set", "micro_batch_size=4")
    assert entry == {"value": 8, "source": "--set micro_batch_size, training-hub name micro_batch_size → "
                                           "effective_batch_size"}
    # and the other way round, with the node count from a flag: 4 x 1 x (2 x 3)
    assert effective({"micro_batch_size": 4, "nproc_per_node": 2}, "--nnodes", "3")["value"] == 24
    # accumulation in the file, micro batch on the command line: 2 x 3 x 2
    assert effective({"gradient_accumulation_steps": 3}, "--nproc-per-node", "2",
                     "--set", "micro_batch_size=2")["value"] == 12
    # an effective_batch_size above them in precedence wins (Training Hub ignores the micro batch then)
    assert effective({"micro_batch_size": 4}, "--effective-batch-size", "32")["value"] == 32


@pytest.mark.parametrize("backend", ["trl", "instructlab-training"])
def test_adamw_betas_is_beta1_then_beta2(backend: str, tmp_path: Path) -> None:
    """Training Hub's adamw_betas is instructlab's (beta1, beta2) tuple: beta1 first, into the native config
    in the same order (a swap trains with beta1 0.999: no test failed on it before)."""
    if backend not in get_registry().backends:
        pytest.skip(f"{backend} is not installed")
    plan = dry("sft", backend=backend, model_path="m", data_path=DATA, ckpt_output_dir=str(tmp_path),
               adamw_betas=(0.8, 0.999))
    params = plan["parameters"]
    assert (params["beta1"]["value"], params["beta2"]["value"]) == (0.8, 0.999)
    assert params["beta1"]["source"] == "api adamw_betas, training-hub name adamw_betas → beta1"
    native = plan["translation"]
    if backend == "trl":
        assert (native["config"]["adam_beta1"], native["config"]["adam_beta2"]) == (0.8, 0.999)
    else:
        assert list(native["training_args"]["adamw_betas"]) == [0.8, 0.999]
