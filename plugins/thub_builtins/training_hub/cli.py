"""Training Hub 0.11.2's ``thub`` command line (``training_hub.cli``), as data and its parsing.

Training Hub ships a console script named ``thub`` too: ``thub sft|osft|lora-sft|lora-grpo|grpo|
gepa|embedding-sft --config FILE --kebab-flags ...``. thub accepts those command lines as they are
(:mod:`thub_builtins.training_hub.command`): the flags below are parsed as Training Hub parses them (argparse,
``--flag true|false`` booleans, JSON-valued flags, dotted-import callables, ``--config`` YAML of
Python-style names, the command line over the file), then go to the same Training Hub call as
``thub.sft(...)`` and friends (:mod:`thub.api`), so the keyword rules of
:mod:`thub_builtins.training_hub.rules` map each one. Training Hub's per-flag defaults are its
functions' signature defaults (``tests/test_training_hub_cli.py`` checks it on the wheel), so a
flag left out is a keyword left out, as in the Python API.

The flag table is copied from the wheel as data; the test reads the wheel's ``cli.py`` and fails
on a flag missing here or one that no rule classifies. No training_hub import.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from thub.config.yamlfile import MAX_YAML_NESTING
from thub.errors import UsageError

# subcommand -> Training Hub function (its Python name)
SUBCOMMANDS: dict[str, str] = {"sft": "sft", "osft": "osft", "lora-sft": "lora_sft", "lora-grpo": "lora_grpo",
                               "grpo": "grpo", "gepa": "gepa", "embedding-sft": "embedding_sft"}
DESCRIPTIONS: dict[str, str] = {
    "sft": "Supervised Fine-Tuning", "osft": "Orthogonal Subspace Fine-Tuning",
    "lora-sft": "LoRA + Supervised Fine-Tuning", "lora-grpo": "LoRA + Group Relative Policy Optimization",
    "grpo": "Full-parameter Group Relative Policy Optimization",
    "gepa": "Genetic-Pareto prompt optimization (gradient-free)",
    "embedding-sft": "Embedding fine-tuning (contrastive; classifiers/routers)",
}
# Flag (without ``--``) -> kind: str, int, float, bool (``true|false``), json (parsed), callable (a
# dotted import path, resolved like Training Hub does); ``+``: one or more values; ``!``: required.
FLAGS: dict[str, dict[str, str]] = {
    "sft": {
        "model-path": "str!", "data-path": "str!", "ckpt-output-dir": "str!", "backend": "str", "num-epochs": "int",
        "effective-batch-size": "int", "learning-rate": "float", "max-seq-len": "int", "max-tokens-per-gpu": "int",
        "data-output-dir": "str", "save-samples": "int", "warmup-steps": "int",
        "accelerate-full-state-at-epoch": "bool", "checkpoint-at-epoch": "bool", "is-pretraining": "bool",
        "block-size": "int", "document-column-name": "str", "beta1": "float", "beta2": "float", "eps": "float",
        "weight-decay": "float", "nproc-per-node": "str", "nnodes": "int", "node-rank": "int", "rdzv-id": "str",
        "rdzv-endpoint": "str", "master-addr": "str", "master-port": "int", "wandb-project": "str",
        "wandb-entity": "str", "wandb-run-name": "str", "tensorboard-log-dir": "str", "mlflow-tracking-uri": "str",
        "mlflow-experiment-name": "str", "mlflow-run-name": "str",
    },
    "osft": {
        "model-path": "str!", "data-path": "str!", "unfreeze-rank-ratio": "float!", "effective-batch-size": "int!",
        "max-tokens-per-gpu": "int!", "max-seq-len": "int!", "learning-rate": "float!", "ckpt-output-dir": "str!",
        "data-output-dir": "str", "backend": "str", "target-patterns": "str+", "seed": "int", "use-liger": "bool",
        "use-processed-dataset": "bool", "unmask-messages": "bool", "is-pretraining": "bool", "block-size": "int",
        "document-column-name": "str", "lr-scheduler": "str", "warmup-steps": "int", "lr-scheduler-kwargs": "json",
        "checkpoint-at-epoch": "bool", "save-final-checkpoint": "bool", "num-epochs": "int",
        "trust-remote-code": "bool", "beta1": "float", "beta2": "float", "eps": "float", "weight-decay": "float",
        "nproc-per-node": "str", "nnodes": "int", "node-rank": "int", "rdzv-id": "str", "rdzv-endpoint": "str",
        "master-addr": "str", "master-port": "int", "wandb-project": "str", "wandb-entity": "str",
        "wandb-run-name": "str", "tensorboard-log-dir": "str", "mlflow-tracking-uri": "str",
        "mlflow-experiment-name": "str", "mlflow-run-name": "str",
    },
    "lora-sft": {
        "model-path": "str!", "data-path": "str!", "ckpt-output-dir": "str!", "backend": "str", "lora-r": "int",
        "lora-alpha": "int", "lora-dropout": "float", "target-modules": "str+", "num-epochs": "int",
        "effective-batch-size": "int", "micro-batch-size": "int", "gradient-accumulation-steps": "int",
        "learning-rate": "float", "max-seq-len": "int", "lr-scheduler": "str", "warmup-steps": "int",
        "load-in-4bit": "bool", "load-in-8bit": "bool", "bnb-4bit-quant-type": "str", "bnb-4bit-compute-dtype": "str",
        "bnb-4bit-use-double-quant": "bool", "flash-attention": "bool", "sample-packing": "bool", "bf16": "bool",
        "fp16": "bool", "tf32": "bool", "save-steps": "int", "eval-steps": "int", "logging-steps": "int",
        "save-total-limit": "int", "dataset-type": "str", "field-messages": "str", "field-instruction": "str",
        "field-input": "str", "field-output": "str", "enable-model-splitting": "bool",
        "finetune-vision-layers": "bool", "finetune-language-layers": "bool", "trust-remote-code": "bool",
        "nproc-per-node": "str", "nnodes": "int", "node-rank": "int", "rdzv-id": "str", "rdzv-endpoint": "str",
        "master-addr": "str", "master-port": "int", "wandb-project": "str", "wandb-entity": "str",
        "wandb-run-name": "str", "tensorboard-log-dir": "str", "mlflow-tracking-uri": "str",
        "mlflow-experiment-name": "str", "mlflow-run-name": "str",
    },
    "lora-grpo": {
        "model-path": "str!", "ckpt-output-dir": "str!", "data-path": "str", "data-config": "str", "n-train": "int",
        "n-val": "int", "rollout-fn": "callable", "tasks": "json", "reward-fn": "callable", "num-iterations": "int",
        "group-size": "int", "prompt-batch-size": "int", "learning-rate": "float", "temperature": "float",
        "max-tokens": "int", "max-prompt-length": "int", "concurrency": "int", "lora-r": "int", "lora-alpha": "int",
        "target-modules": "str+", "max-grad-norm": "float", "gpu-memory-utilization": "float", "max-lora-rank": "int",
        "enforce-eager": "bool", "n-gpus": "int", "nnodes": "int", "tensor-parallel-size": "int",
        "use-dr-grpo": "bool", "backend": "str", "iteration-callback": "callable", "wandb-project": "str",
        "wandb-entity": "str", "wandb-run-name": "str", "mlflow-tracking-uri": "str", "mlflow-experiment-name": "str",
        "mlflow-run-name": "str",
    },
    "grpo": {
        "model-path": "str!", "ckpt-output-dir": "str!", "data-path": "str", "data-config": "str", "n-train": "int",
        "n-val": "int", "reward-fn": "callable", "num-iterations": "int", "group-size": "int",
        "prompt-batch-size": "int", "learning-rate": "float", "temperature": "float", "max-tokens": "int",
        "max-prompt-length": "int", "gpu-memory-utilization": "float", "n-gpus": "int", "nnodes": "int",
        "tensor-parallel-size": "int", "use-dr-grpo": "bool", "iteration-callback": "callable",
        "wandb-project": "str", "wandb-entity": "str", "wandb-run-name": "str", "mlflow-tracking-uri": "str",
        "mlflow-experiment-name": "str", "mlflow-run-name": "str",
    },
    "gepa": {
        "seed-candidate": "json!", "task-lm": "str!", "data-path": "str", "trainset": "json", "valset": "json",
        "output-dir": "str", "backend": "str", "evaluator": "callable", "reflection-lm": "str", "api-base": "str",
        "max-metric-calls": "int", "candidate-selection-strategy": "str", "frontier-type": "str",
        "skip-perfect-score": "bool", "perfect-score": "float", "reflection-minibatch-size": "int", "seed": "int",
        "adapter": "callable", "run-dir": "str", "use-wandb": "bool", "wandb-api-key": "str",
        "wandb-init-kwargs": "json", "use-mlflow": "bool", "mlflow-tracking-uri": "str",
        "mlflow-experiment-name": "str", "batch-sampler": "callable", "reflection-prompt-template": "str",
        "custom-candidate-proposer": "callable", "module-selector": "str", "use-merge": "bool",
        "stop-callbacks": "callable", "callbacks": "json", "display-progress-bar": "bool", "cache-evaluation": "bool",
        "raise-on-exception": "bool", "predict-fn": "callable", "prompt-uris": "str+", "scorers": "json",
        "aggregation": "callable", "enable-tracking": "bool", "gepa-kwargs": "json",
    },
    "embedding-sft": {
        "model-path": "str!", "data-path": "str!", "ckpt-output-dir": "str!", "backend": "str", "loss-type": "str",
        "loss-fn": "callable", "num-epochs": "int", "batch-size": "int", "learning-rate": "float",
        "warmup-ratio": "float", "batch-sampler": "str", "eval-data-path": "str", "text-column": "str",
        "label-column": "str", "seed": "int",
    },
}
# Options thub adds to Training Hub's (the run's controls, as on ``thub train``).
THUB_OPTIONS = ("dry-run", "json", "overwrite", "resume", "allow-ignored")


def python_name(flag: str) -> str:
    """``--learning-rate`` or ``learning-rate`` -> ``learning_rate`` (Training Hub's rule)."""
    return flag.lstrip("-").replace("-", "_")


def parse_bool(value: str) -> bool:
    """Training Hub's boolean words (``_parse_bool``)."""
    if value.lower() in ("true", "1", "yes", "on"):
        return True
    if value.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"Cannot parse '{value}' as boolean. Use true/false, yes/no, 1/0.")


class _Parser(argparse.ArgumentParser):
    """argparse with thub's exit code for bad input (2, as argparse's own) and no traceback."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message} (`{self.prog} --help` lists the flags)")


def parser(subcommand: str) -> argparse.ArgumentParser:
    """Training Hub's parser for ``subcommand`` (same flags, types and abbreviations), plus
    :data:`THUB_OPTIONS`."""
    sub = _Parser(prog=f"thub {subcommand}", description=DESCRIPTIONS[subcommand], add_help=True,
                  epilog="Training Hub's command line, run by thub (docs/migrating-from-training-hub.md).")
    sub.add_argument("--config", "-c", type=str, metavar="FILE", help="YAML config file (Training Hub's shape; "
                                                                      "CLI arguments override its values).")
    sub.add_argument("--traceback", action="store_true", help="Print the full Python traceback on failure.")
    sub.add_argument("--version", action="store_true", help="Show thub's version and exit.")
    for flag, kind in FLAGS[subcommand].items():
        base = kind.rstrip("+!")
        kwargs: dict[str, Any] = {"dest": python_name(flag), "help": f"Training Hub's {python_name(flag)} ({base})"}
        kwargs["type"] = {"int": int, "float": float, "bool": parse_bool}.get(base, str)
        if base == "bool":
            kwargs["metavar"] = "BOOL"
        if "+" in kind:
            kwargs["nargs"] = "+"
        sub.add_argument(f"--{flag}", **kwargs)
    group = sub.add_argument_group("thub")
    group.add_argument("--dry-run", action="store_true", help="Show every value with its source; run nothing.")
    group.add_argument("--json", action="store_true", dest="as_json", help="Print the plan or result.json.")
    group.add_argument("--overwrite", action="store_true", help="Reuse a run directory that holds a finished run.")
    group.add_argument("--resume", action="store_true", help="Continue from the latest checkpoint.")
    group.add_argument("--allow-ignored", action="store_true",
                       help="Warn instead of failing on parameters the backend does not honour.")
    return sub


def resolve_dotted_path(path: str) -> Any:
    """The object at ``pkg.module.attr`` (Training Hub's ``_resolve_dotted_path``: the longest
    importable module prefix, then attributes)."""
    if "." not in path:
        raise ValueError(f"cannot resolve {path!r}: expected a dotted path like 'module.function'")
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module_path = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_path)
        except ModuleNotFoundError as exc:
            if exc.name and (exc.name == module_path or module_path.startswith(f"{exc.name}.")):
                continue  # this prefix is not a module: try a shorter one
            raise ValueError(f"importing {module_path!r} failed: {exc}") from None
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError as exc:
            raise ValueError(f"imported {module_path!r} but {exc}") from None
        return obj
    raise ValueError(f"cannot resolve {path!r}: no importable module prefix (is it on PYTHONPATH?)")


def _nesting(value: Any) -> int:
    """How deep ``value``'s lists and dicts nest (0 for a scalar), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def coerce(value: Any, kind: str) -> Any:
    """A flag's or a YAML value's Python value, as Training Hub's ``_coerce_value`` makes it
    (ValueError with the reason otherwise)."""
    if value is None:
        return None
    base = kind.rstrip("+!")
    if base == "callable":
        if not isinstance(value, str):
            raise ValueError("expected a dotted-path string (e.g. 'my_module.my_fn')")
        obj = resolve_dotted_path(value)
        if not callable(obj):
            raise ValueError(f"{value!r} resolved to a non-callable {type(obj).__name__}")
        return obj
    if base == "json":
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected JSON: {exc}") from None
            except RecursionError:  # deeper than Python's JSON reader goes (~1,000 levels)
                parsed = None
                deep = True
            else:
                deep = _nesting(parsed) > MAX_YAML_NESTING
            if deep:
                # the limit of a --config file's values (thub.config.yamlfile): a flag holds the same
                raise ValueError(f"expected JSON nested at most {MAX_YAML_NESTING} levels deep (arrays and objects), "
                                 "found deeper")
            return parsed
        return value
    if base == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return parse_bool(value)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(str(exc)) from None
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError(f"expected a boolean, got {value!r}")
    if "+" in kind:
        return [coerce(item, base) for item in (value if isinstance(value, list) else [value])]
    if base == "int":
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    if base == "float":
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got boolean {value!r}")
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return number
    return value if isinstance(value, str) else str(value)  # YAML may read an intended string as int


def keywords(subcommand: str, argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Training Hub's keyword arguments for ``thub SUBCOMMAND ARGV`` (the config file, then the
    command line over it; None left out, as Training Hub does) and thub's controls
    (dry_run, as_json, overwrite, resume, allow_ignored, traceback, version).

    Bad input raises UsageError naming the flag, or the file, line and key.
    """
    from thub.config.resolve import read_config_file
    from thub_builtins.training_hub.rules import RULES

    args = parser(subcommand).parse_args(list(argv))
    given = vars(args)
    control = {key: given.pop(key) for key in ("dry_run", "as_json", "overwrite", "resume", "allow_ignored",
                                               "traceback", "version")}
    config = given.pop("config")
    flags = FLAGS[subcommand]
    kinds = {python_name(flag): kind for flag, kind in flags.items()}
    values: dict[str, Any] = {}
    if config:
        document = read_config_file(config)
        for key, value in document.values.items():
            name = python_name(str(key))
            rule = RULES.get(name)
            if name not in kinds and rule is not None and rule.kind == "api":  # e.g. callbacks: objects
                raise UsageError(f"{document.where(str(key))}: {key} takes Python objects, which a YAML file "
                                 f"cannot hold: pass it to thub.{SUBCOMMANDS[subcommand]}(...) ({rule.note})")
            try:
                # a key that is no flag of the subcommand goes on as Training Hub passes it on (the
                # keyword rules then accept, map or refuse it: nothing is dropped unseen)
                values[name] = coerce(value, kinds[name]) if name in kinds else value
            except (ValueError, TypeError) as exc:
                raise UsageError(f"{document.where(str(key))}: {key}: {exc}") from None
    for name, value in given.items():
        if value is None:
            continue
        try:
            values[name] = coerce(value, kinds[name])
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--{name.replace('_', '-')}: {exc}") from None
    missing = [f"--{flag}" for flag, kind in flags.items() if kind.endswith("!") and values.get(python_name(flag))
               is None]
    if missing:
        raise UsageError(f"thub {subcommand}: the following arguments are required: {', '.join(missing)} (as flags "
                         "or in the --config file)")
    return {key: value for key, value in values.items() if value is not None}, control


def classified(subcommand: str, thub_fields: Mapping[str, Any]) -> dict[str, str]:
    """Each flag's classification for the Training Hub function behind ``subcommand`` (its rule
    kind, ``control`` for thub's own controls); a flag missing from the result is unclassified."""
    from thub_builtins.training_hub.rules import FUNCTIONS, rule_for

    function = SUBCOMMANDS[subcommand]
    out: dict[str, str] = {}
    for flag in FLAGS[subcommand]:
        name = python_name(flag)
        if function in FUNCTIONS:
            rule = rule_for(name, thub_fields)
            if rule is not None:
                out[flag] = rule.kind
        elif name in thub_fields or name == "backend":
            out[flag] = "same"
    return out
