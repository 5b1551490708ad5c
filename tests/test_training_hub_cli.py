"""Training Hub 0.11.2's ``thub`` command line run by thub (thub_builtins.training_hub.command).

The wheel is unpacked without dependencies at build/training-hub-0.11.2 (scripts/test-all.sh);
its ``cli.py`` imports only the standard library at module level, so the tests load it from the
file (not the training_hub package) and read its flag table, its defaults and its examples.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from thub.manager import get_registry
from thub_builtins.training_hub import cli, rules
from thub_builtins.training_hub import functions as api

ROOT = Path(__file__).parents[1]
WHEEL = ROOT / "build" / "training-hub-0.11.2" / "training_hub"
DATA = ROOT / "examples" / "data"
MODULES = {"sft": "sft", "osft": "osft", "lora_sft": "lora", "lora_grpo": "lora_grpo", "grpo": "lora_grpo",
           "gepa": "gepa", "embedding_sft": "embedding_sft"}


def wheel_cli() -> ModuleType:
    path = WHEEL / "cli.py"
    if not path.exists():
        pytest.skip(f"training-hub 0.11.2 is not unpacked at {WHEEL.parent} (see scripts/test-all.sh)")
    spec = importlib.util.spec_from_file_location("training_hub_cli_0_11_2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._define_params()
    return module


def wheel_kind(spec: dict[str, Any]) -> str:
    kind = "json" if spec.get("json") else "callable" if spec.get("callable") else spec["type"].__name__
    return kind + ("+" if spec.get("nargs") else "") + ("!" if spec.get("required") else "")


def signature_defaults(function: str) -> dict[str, Any]:
    tree = ast.parse((WHEEL / "algorithms" / f"{MODULES[function]}.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    args = node.args.args
    out = {a.arg: ast.literal_eval(d) for a, d in zip(args[len(args) - len(node.args.defaults):], node.args.defaults)}
    out.update({a.arg: ast.literal_eval(d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)
                if d is not None})
    return out


def test_flag_table_is_the_wheels() -> None:
    module = wheel_cli()
    assert cli.SUBCOMMANDS == module._SUBCOMMAND_TO_FUNC
    for subcommand, defs in module._ALGO_PARAM_DEFS.items():
        assert cli.FLAGS[subcommand] == {flag[2:]: wheel_kind(spec) for flag, spec in defs.items()}, subcommand
    assert set(cli.FLAGS) == set(module._ALGO_PARAM_DEFS)


@pytest.mark.parametrize("subcommand", list(cli.SUBCOMMANDS))
def test_every_flag_of_the_wheel_is_classified(subcommand: str) -> None:
    """A flag Training Hub adds fails here until the rules table (or the algorithm) says what it means."""
    module = wheel_cli()
    function = cli.SUBCOMMANDS[subcommand]
    registry = get_registry()
    if function not in rules.FUNCTIONS and function not in registry.algorithms:
        pytest.skip(f"no plugin registers {function} here: thub {subcommand} says so (test below)")
    fields = registry.algorithm(function).load_parameters().model_fields
    known = cli.classified(subcommand, fields)
    unclassified = [flag for flag in module._ALGO_PARAM_DEFS[subcommand] if flag[2:] not in known]
    if unclassified and function not in rules.FUNCTIONS:
        # a plugin's algorithm whose Training Hub rows (thub_builtins.training_hub.rules) are not there yet
        pytest.xfail(f"{function}: no Training Hub keyword rows yet for {unclassified}")
    assert unclassified == []
    if function in rules.FUNCTIONS:  # the flag's name is a keyword of the function (the same meaning)
        names = set(rules.names_for(function))
        assert {cli.python_name(flag) for flag in cli.FLAGS[subcommand]} <= names


@pytest.mark.parametrize("subcommand", list(cli.SUBCOMMANDS))
def test_flag_defaults_are_the_functions_signature_defaults(subcommand: str) -> None:
    """Why a flag left out can be a keyword left out: Training Hub's CLI passes each flag's default,
    which is the function's own default (the Python API applies those, thub_builtins.training_hub.names)."""
    module = wheel_cli()
    defaults = signature_defaults(cli.SUBCOMMANDS[subcommand])
    for flag, spec in module._ALGO_PARAM_DEFS[subcommand].items():
        if "default" in spec:
            assert defaults[cli.python_name(flag)] == spec["default"], flag


def wheel_examples() -> list[str]:
    """The command lines of cli.py's module docstring and its parser's epilog."""
    text = (WHEEL / "cli.py").read_text()
    docstring = ast.get_docstring(ast.parse(text)) or ""
    found = [line.strip() for line in docstring.splitlines() if line.strip().startswith("thub ")]
    found += re.findall(r'"  (thub [^"\\]+)\\n"', text)
    return [line.split("  #")[0].strip() for line in found]


def _workspace(folder: Path, tiny: Path) -> None:
    """The files Training Hub's examples name, in the folder they run in."""
    for name in ("model", "my-model"):
        shutil.copytree(tiny, folder / name)
    shutil.copy(DATA / "chat.jsonl", folder / "data.jsonl")
    # osft runs only on mini-trainer, which needs a GPU: named, the dry run shows its plan here
    (folder / "my_config.yaml").write_text(yaml.safe_dump({
        "model_path": "./model", "data_path": "./data.jsonl", "ckpt_output_dir": "./out", "backend": "mini-trainer",
        "unfreeze_rank_ratio": 0.25, "effective_batch_size": 16, "max_tokens_per_gpu": 2048, "max_seq_len": 1024,
        "learning-rate": 2e-5, "target_patterns": "q_proj"}))  # Training Hub's kebab key and scalar list too
    (folder / "my_rewards.py").write_text("def compute_reward(data_source, solution_str, ground_truth, "
                                          "extra_info=None):\n    return float(ground_truth in solution_str)\n")


def _config_for(subcommand: str, folder: Path) -> None:
    data = DATA / ("grpo.jsonl" if "grpo" in subcommand else "chat.jsonl")
    config = {"model_path": "./model", "data_path": str(data), "ckpt_output_dir": "./out", "num_epochs": 1}
    if "grpo" in subcommand:
        config = {**{k: v for k, v in config.items() if k != "num_epochs"}, "max_steps": 2, "group_size": 2,
                  "prompt_batch_size": 4}
    for name in ("base.yaml", "grpo.yaml"):
        (folder / name).write_text(yaml.safe_dump(config))


def _values(plan: dict[str, Any]) -> dict[str, Any]:
    return {name: entry["value"] for name, entry in plan["parameters"].items()}


def _python_call(subcommand: str, argv: list[str], folder: Path) -> dict[str, Any]:
    """The same call written for the Python API by hand: the YAML's keys, then the flags."""
    keywords: dict[str, Any] = {}
    pairs = list(argv)
    if "--config" in argv:
        at = argv.index("--config")
        keywords.update(yaml.safe_load((folder / argv[at + 1]).read_text()))
        del pairs[at:at + 2]
    for flag, value in zip(pairs[::2], pairs[1::2]):  # the examples' flags each take one value
        keywords[cli.python_name(flag)] = cli.coerce(value, cli.FLAGS[subcommand][flag[2:]])
    keywords = {k.replace("-", "_"): v for k, v in keywords.items()}
    if "target_patterns" in keywords and isinstance(keywords["target_patterns"], str):
        keywords["target_patterns"] = [keywords["target_patterns"]]
    return api._training_hub_run(cli.SUBCOMMANDS[subcommand], (), keywords, api._Caller(dry_run=True))


@pytest.mark.parametrize("example", wheel_examples() if (WHEEL / "cli.py").exists() else [])
def test_training_hubs_own_examples_dry_run_unchanged(example: str, thub_cli, tiny_model: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    words = shlex.split(example)
    subcommand, argv = words[1], words[2:]
    _workspace(tmp_path, tiny_model)
    _config_for(subcommand, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = thub_cli(subcommand, *argv, "--dry-run", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    if "--reward-fn" in argv:
        # Training Hub's per-completion reward_fn(data_source, solution_str, ground_truth): thub's batch
        # reward through the adapter (thub_builtins.training_hub.reward), by the same dotted path
        target = argv[argv.index("--reward-fn") + 1]
        assert _values(plan)["reward"] == [f"thub_builtins.training_hub.reward:per_completion.{target}"]
    assert _values(plan) == _values(_python_call(subcommand, argv, tmp_path))  # the same resolved values
    # the thub equivalent is printed once, and resolves to the same values
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("thub train ")]
    assert len(lines) == 1, result.stderr
    again = thub_cli(*shlex.split(lines[0])[1:], "--dry-run", "--json")
    assert again.exit_code == 0, again.stderr
    assert _values(json.loads(again.stdout)) == _values(plan)


def test_example_list_is_read_from_the_wheel() -> None:
    wheel_cli()
    examples = wheel_examples()
    assert {shlex.split(line)[1] for line in examples} == {"sft", "osft", "lora-sft", "lora-grpo", "grpo"}
    assert len(examples) == 7


def test_flags_keep_training_hubs_meaning(thub_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Booleans as true|false, JSON values, nargs lists, dotted callables, renamed/refused keywords."""
    (tmp_path / "hooks.py").write_text("async def rollout(model, task):\n    return None\n\n"
                                       "def each(step, line):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["--model-path", "m", "--ckpt-output-dir", str(tmp_path / "o"), "--dry-run", "--json"]
    done = thub_cli("lora-sft", *common, "--data-path", str(DATA / "chat.jsonl"), "--backend", "trl",
                    "--sample-packing", "false", "--target-modules", "q_proj", "v_proj", "--micro-batch-size", "2",
                    "--gradient-accumulation-steps", "4", "--bf16", "yes")
    assert done.exit_code == 0, done.stderr
    values = _values(json.loads(done.stdout))
    assert values["packing"] is False and values["target_modules"] == ["q_proj", "v_proj"]
    assert values["effective_batch_size"] == 8  # micro-batch x accumulation x 1 process
    sources = json.loads(done.stdout)["parameters"]
    assert "training-hub name sample_packing → packing" in sources["packing"]["source"]
    done = thub_cli("lora-grpo", *common, "--data-path", str(DATA / "grpo.jsonl"), "--backend", "trl",
                    "--rollout-fn", "hooks.rollout", "--iteration-callback", "hooks.each")
    assert done.exit_code == 2 and "rollout_function" in done.stderr  # mapped; trl runs no rollout function
    done = thub_cli("osft", *common, "--data-path", str(DATA / "chat.jsonl"), "--backend", "mini-trainer",
                    "--unfreeze-rank-ratio", "0.3", "--effective-batch-size", "8", "--max-tokens-per-gpu", "1000",
                    "--max-seq-len", "512", "--learning-rate", "1e-5", "--lr-scheduler", "cosine",
                    "--lr-scheduler-kwargs", '{"T_max": 10}')
    assert done.exit_code == 0, done.stderr
    assert _values(json.loads(done.stdout))["lr_scheduler_kwargs"] == {"T_max": 10}


@pytest.mark.parametrize(("argv", "message"), [
    (["--num-epochs", "x"], "argument --num-epochs: invalid int value: 'x'"),
    (["--is-pretraining", "maybe"], "Cannot parse 'maybe' as boolean"),
    (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag"),
    (["--config", "missing.yaml"], "missing.yaml"),
])
def test_bad_input_is_exit_2_without_traceback(argv: list[str], message: str, thub_cli, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = thub_cli("sft", "--model-path", "m", "--data-path", str(DATA / "chat.jsonl"), "--ckpt-output-dir", "o",
                    "--dry-run", *argv)
    assert done.exit_code == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_config_errors_name_file_line_and_key(thub_cli, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"model_path: m\ndata_path: {DATA / 'chat.jsonl'}\nckpt_output_dir: {tmp_path / 'o'}\n"
                      "num_epochs: 1.5\n")
    done = thub_cli("sft", "--config", str(config), "--dry-run")
    assert done.exit_code == 2 and f"{config}:4: num_epochs: expected an integer" in done.stderr
    config.write_text(f"model_path: m\ndata_path: {DATA / 'chat.jsonl'}\nckpt_output_dir: o\nlerning_rate: 1\n")
    done = thub_cli("sft", "--config", str(config), "--dry-run")
    assert done.exit_code == 2 and "unknown parameter 'lerning_rate'" in done.stderr  # never passed on unseen
    config.write_text(f"model_path: m\ndata_path: {DATA / 'chat.jsonl'}\nckpt_output_dir: o\ncallbacks: [x]\n")
    done = thub_cli("sft", "--config", str(config), "--dry-run")
    assert done.exit_code == 2 and f"{config}:4: callbacks takes Python objects" in done.stderr
    done = thub_cli("sft", "--data-path", "d.jsonl", "--dry-run")
    assert done.exit_code == 2 and "required: --model-path, --ckpt-output-dir" in done.stderr


def test_traceback_flag_shows_the_traceback(thub_cli, tmp_path: Path) -> None:
    argv = ["lora-grpo", "--model-path", "m", "--ckpt-output-dir", str(tmp_path / "o"), "--data-path",
            str(DATA / "grpo.jsonl"), "--reward-fn", "json.loads", "--dry-run"]
    plain = thub_cli(*argv)
    assert plain.exit_code == 2 and "Traceback" not in plain.stderr
    shown = thub_cli(*argv, "--traceback")
    assert shown.exit_code == 2 and "Traceback" in shown.stderr and "reward_fn" in shown.stderr


def test_an_algorithm_no_plugin_registers_is_a_clear_error(thub_cli, real_registry,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if "embedding_sft" in real_registry.algorithms:  # as in an environment without its plugin
        monkeypatch.delitem(real_registry.algorithms, "embedding_sft")
    done = thub_cli("embedding-sft", "--model-path", "m", "--data-path", "d.jsonl", "--ckpt-output-dir", "o",
                    "--dry-run")
    assert done.exit_code == 2
    assert "no installed plugin registers the algorithm 'embedding_sft'" in done.stderr


def test_help_lists_training_hub_on_one_line(thub_cli) -> None:
    listed = thub_cli("--help").stdout
    assert listed.count("Training Hub") == 1 and "\n  osft " not in listed and "\n  lora-sft " not in listed
    page = thub_cli("lora-sft", "--help")
    assert page.exit_code == 0 and "--sample-packing BOOL" in page.stdout and "--dry-run" in page.stdout


def test_a_real_run_through_training_hubs_command_line(thub, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = thub("lora-sft", "--model-path", str(tiny_model), "--data-path", str(DATA / "chat.jsonl"),
                "--ckpt-output-dir", str(out), "--backend", "trl", "--num-epochs", "1", "--effective-batch-size",
                "32", "--lora-r", "4", "--max-seq-len", "256")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("thub train lora_sft --backend trl") == 1
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded"
    record = json.loads((out / "thub_run.json").read_text())
    assert "lora-sft" in json.dumps(record)


def test_training_hub_command_line_imports_no_training_library(tmp_path: Path) -> None:
    from thub.testing import imported_heavy_modules

    argv = ["sft", "--model-path", "m", "--data-path", str(DATA / "chat.jsonl"), "--ckpt-output-dir",
            str(tmp_path / "o"), "--dry-run"]
    probe = ("import sys\n"
             f"sys.argv = ['thub', *{argv!r}]\n"
             "from thub.cli.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n")
    assert imported_heavy_modules(probe) == []


@pytest.mark.needs_backend("instructlab-training")
def test_fsdp_options_in_a_config_file(thub_cli, tmp_path: Path) -> None:
    """sft's fsdp_options is a **kwargs keyword (no flag): a --config key, mapped per backend."""
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump({"model_path": "m", "data_path": str(DATA / "chat.jsonl"),
                                      "ckpt_output_dir": str(tmp_path / "o"), "backend": "instructlab-training",
                                      "fsdp_options": {"sharding_strategy": "SHARD_GRAD_OP",
                                                       "cpu_offload_params": True}}))
    done = thub_cli("sft", "--config", str(config), "--dry-run", "--json")
    assert done.exit_code == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["translation"]["training_args"]["fsdp_options"] == {"sharding_strategy": "SHARD_GRAD_OP",
                                                                    "cpu_offload_params": True}
    done = thub_cli("sft", "--config", str(config), "--backend", "trl", "--dry-run")
    assert done.exit_code == 2 and "Traceback" not in done.stderr
    assert "backend 'trl' does not honour" in done.stderr and "fsdp_sharding_strategy" in done.stderr
