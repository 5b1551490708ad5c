"""Training Hub names applied: translation of precedence layers, the merged batch conversion,
positional arguments, default backends and signature defaults, data-path checks, the migration
guide's table.

The per-keyword rules and Training Hub 0.11.2's signatures they apply are data in
:mod:`thub_builtins.training_hub.rules`.
No training_hub import: its dependencies are not needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from thub.errors import UsageError
from thub_builtins.training_hub.rules import (
    BACKEND_KWARG_DEFAULTS,
    BACKEND_READS,
    DEFAULT_BACKEND,
    DR_GRPO_OFF_KL,
    FUNCTION_KWARG_DEFAULTS,
    FUNCTIONS,
    HUB_DATA_REFUSAL,
    OSFT_MAX_STEPS,
    RULES,
    SIGNATURE_DEFAULTS,
    SIGNATURES,
    names_for,
    rule_for,
)

# Training Hub names that become effective_batch_size together with the world size: converted by
# :func:`_merged_batch` on the values of all layers (each may come from another layer), not per layer
_BATCH_NAMES = ("micro_batch_size", "gradient_accumulation_steps")


def _merged_batch(layers: list[dict[str, tuple[Any, str]]], given: dict[str, tuple[Any, str, int]],
                  notes: list[str]) -> None:
    """Fold ``micro_batch_size`` x ``gradient_accumulation_steps`` x world size into
    ``effective_batch_size``, from the merged values of every (translated) layer.

    ``given``: each batch name's value, source and layer index (the highest layer that set it).
    The result goes into the highest of those layers, unless ``effective_batch_size`` is set at
    that precedence or above (Training Hub ignores the micro-batch then). Mutates ``layers``
    and ``notes``.
    """
    from thub.runner.batching import processes_per_node

    top = max(index for _value, _source, index in given.values())
    merged: dict[str, Any] = {}
    explicit = -1  # the highest layer that sets effective_batch_size itself
    for index, layer in enumerate(layers):
        merged.update({key: value for key, (value, _source) in layer.items()})
        if "effective_batch_size" in layer:
            explicit = index
    if explicit >= top:
        for key, (value, source, _index) in given.items():
            notes.append(f"{key}={value!r} ({source}): Training Hub derives the micro-batch from "
                         "effective_batch_size and ignores this")
        return
    procs = merged.get("nproc_per_node")
    if isinstance(procs, str) and procs.strip().isdigit():  # as pydantic will read it
        merged["nproc_per_node"] = int(procs)
    try:
        world = processes_per_node(merged) * int(merged.get("nnodes") or 1)
        micro = int(given["micro_batch_size"][0]) if "micro_batch_size" in given else 2  # Training Hub's default
        accumulation = int(given["gradient_accumulation_steps"][0]) if "gradient_accumulation_steps" in given else 1
    except (TypeError, ValueError) as exc:
        key, (value, source, _index) = next(iter(given.items()))
        raise UsageError(f"{source}: Training Hub's {key}={value!r} is not supported by thub: {exc}") from None
    key = "micro_batch_size" if "micro_batch_size" in given else "gradient_accumulation_steps"
    source = given[key][1]
    layers[top]["effective_batch_size"] = (micro * accumulation * world,
                                           f"{source}, training-hub name {key} → effective_batch_size")
    if len(given) > 1:
        value, other, _index = given["gradient_accumulation_steps"]
        notes.append(f"gradient_accumulation_steps={value!r} ({other}): {RULES['gradient_accumulation_steps'].note}")

def accepted_names(algorithm: str, infos: Mapping[str, Any]) -> dict[str, Any]:
    """thub's parameters plus Training Hub's names for ``algorithm`` (as ``ParamInfo``), for the
    config-file, flag and ``--set`` layers; :func:`translate_layers` rewrites the latter."""
    from thub.config.fields import ParamInfo

    extra = {name: ParamInfo(name=name, annotation=Any, default=None, required=False,
                             help=f"Training Hub name ({RULES[name].kind if name in RULES else 'same'})",
                             group="training-hub")
             for name in names_for(algorithm) if name not in infos and name != "backend"}
    return {**infos, **extra}


def translate_layers(
    algorithm: str, layers: list[dict[str, tuple[Any, str]]], infos: Mapping[str, Any]
) -> tuple[list[dict[str, tuple[Any, str]]], list[str]]:
    """Rewrite Training Hub names in each precedence layer into thub parameters.

    Returns the layers (thub names only) and notes for accepted names that set nothing
    (``fixed`` switches, mappings with nothing to set). Refusals raise UsageError with the
    value's source and the migration message.
    """
    notes: list[str] = []
    refused: list[str] = []  # every refused name, said at once (not only the first)
    out = []
    batch: dict[str, tuple[Any, str, int]] = {}  # Training Hub batch names: converted on the merged layers
    for index, layer in enumerate(layers):
        values = {key: value for key, (value, _source) in layer.items()}
        new: dict[str, tuple[Any, str]] = {}
        renamed: dict[str, str] = {}
        rules = {key: rule_for(key, infos) for key in layer}
        for key, (value, source) in layer.items():
            if key in infos and (rule := rules[key]) is not None and rule.convert is None:
                new[key] = (value, source)  # thub's own parameter (same name as Training Hub's, or thub-only)
        for key, (value, source) in layer.items():
            rule = rules[key]
            if rule is None:
                refused.append(f"{source}: unknown parameter {key!r}")
                continue
            if key in new:
                continue
            if value is None and key not in infos:
                continue  # None is "not given" in Training Hub's signatures (a YAML null, too)
            if rule.kind == "api":
                refused.append(f"{source}: {key} is a Python object or choice: pass it to thub.{algorithm}(...) "
                               f"({rule.note})")
                continue
            if rule.kind == "refused":
                refused.append(f"{source}: Training Hub's {key} is not supported by thub: {rule.note}")
                continue
            if key in _BATCH_NAMES and rule.kind == "mapped":
                batch[key] = (value, source, index)  # a later (higher) layer replaces an earlier one
                continue
            try:
                if rule.kind == "fixed" and rule.convert is None and value not in rule.accepts:
                    raise ValueError(rule.note)
                produced = rule.convert(value, values) if rule.convert else {}
            except (ValueError, TypeError) as exc:
                refused.append(f"{source}: Training Hub's {key}={value!r} is not supported by thub: {exc}")
                continue
            if not produced:
                notes.append(f"{key}={value!r} ({source}): {rule.note}")
            for target, target_value in produced.items():
                label = source if rule.kind == "same" else f"{source}, training-hub name {key} → {target}"
                if target in new and new[target][0] != target_value:
                    other = renamed.get(target, target)
                    raise UsageError(f"{source}: {key} sets {target}={target_value!r}, but {other} sets "
                                     f"{new[target][0]!r} in the same place: set one")
                new[target] = (target_value, label)
                renamed[target] = key
        out.append(new)
    if refused:
        raise UsageError("\n".join(refused))
    if batch:
        _merged_batch(out, batch, notes)
    return out, notes


def positional(algorithm: str) -> tuple[str, ...]:
    """Names Training Hub's ``algorithm`` function binds positional arguments to."""
    return SIGNATURES[algorithm]


def bind(algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Training Hub's positional arguments as keywords (a TypeError like Python's on misuse)."""
    names = positional(algorithm)
    if len(args) > len(names):
        raise TypeError(f"{algorithm}() takes {len(names)} positional arguments but {len(args)} were given")
    bound = dict(kwargs)
    for name, value in zip(names, args):
        if name in bound:
            raise TypeError(f"{algorithm}() got multiple values for argument {name!r}")
        bound[name] = value
    return bound


def default_backend(registry: Any, algorithm: str) -> str | None:
    """Training Hub's backend for ``algorithm`` when it is registered and can run here, else None."""
    from thub.selection import backend_status

    backend = registry.backends.get(DEFAULT_BACKEND.get(algorithm, ""))
    if backend is None or algorithm not in backend.algorithms:
        return None
    return backend.name if backend_status(backend)[0] else None


def signature_defaults(registry: Any, algorithm: str, backend: str | None, params: dict[str, Any],
                       environ: Mapping[str, str]) -> dict[str, str]:
    """Add the signature defaults Training Hub's ``backend`` would have received for names the
    caller left out (only on Training Hub's own backends, only where thub's backend honours them,
    never over a ``THUB_*`` variable). Mutates ``params``; returns the sources to show."""
    from thub.selection import choose_backend

    defaults = SIGNATURE_DEFAULTS.get(algorithm, {})
    always = FUNCTION_KWARG_DEFAULTS.get(algorithm, {})
    if not defaults and not always:
        return {}
    spec = registry.backend(backend) if backend else choose_backend(registry, algorithm, None)[0]
    honoured = spec.honours(algorithm)
    fields = registry.algorithm(algorithm).load_parameters().model_fields
    sources = {}
    read = BACKEND_READS.get(spec.name, frozenset()) & set(defaults)
    applied = {name: defaults[name] for name in read} | always
    if params.get("reward_fn") is None:  # with a reward_fn, Training Hub's verl scores with it ('custom')
        applied |= BACKEND_KWARG_DEFAULTS.get(spec.name, {})
    for name, value in sorted(applied.items()):
        rule = rule_for(name, fields)
        target = name if rule is None or rule.kind == "same" else rule.thub
        if name in params or target in params or f"THUB_{target.upper()}" in environ or target not in fields:
            continue
        if target not in honoured and not (name == "num_iterations" and spec.name == "verl"):
            continue
        params.update(rule.convert(value, params) if rule and rule.kind == "mapped" and rule.convert
                      else {target: value})
        sources[target] = f"training-hub default {name}={value!r} ({algorithm} on {spec.name})"
    if spec.name == "verl" and params.get("use_dr_grpo") is False and params.get("beta") is None \
            and "THUB_BETA" not in environ:
        params["beta"] = DR_GRPO_OFF_KL
        sources["beta"] = (f"training-hub use_dr_grpo=False on verl: GRPO with a KL loss (kl_loss_coef "
                           f"{DR_GRPO_OFF_KL}, low_var_kl)")
    return sources


def check_meanings(algorithm: str, params: Mapping[str, Any]) -> None:
    """Training Hub calls whose thub meaning would differ from Training Hub's, refused with the reason
    (the per-keyword ones are in the rules table; this one needs the absence of a keyword)."""
    if algorithm == "osft" and params.get("max_steps") is not None and params.get("training_mode") is None:
        raise UsageError(f"api max_steps={params['max_steps']!r}: {OSFT_MAX_STEPS}")


def verl_epochs(registry: Any, algorithm: str, backend: str | None, params: dict[str, Any]) -> dict[str, str]:
    """Training Hub's verl backend runs ``num_iterations`` *epochs* (``trainer.total_epochs``); thub's
    num_iterations are GRPO steps (Training Hub's ART meaning). A call in Training Hub's convention
    that lands on verl gets thub's ``num_epochs``; returns the relabelled source. Mutates ``params``."""
    from thub.selection import choose_backend

    if algorithm not in ("grpo", "lora_grpo") or params.get("num_iterations") is None or "num_epochs" in params:
        return {}
    if (backend or choose_backend(registry, algorithm, None)[0].name) != "verl":
        return {}
    params["num_epochs"] = params.pop("num_iterations")
    return {"num_epochs": "training-hub name num_iterations (verl: epochs) → num_epochs"}


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Training Hub's GRPO streams a Hub tool-call dataset and converts each row into a task
# (lora_grpo._load_tool_call_dataset, with data_config, n_train, n_val); thub reads GRPO rows as they are
_HUB_STREAMING = ("lora_grpo", "grpo")


def check_data_path(algorithm: str, data_path: Any) -> None:
    """A Hugging Face dataset id for GRPO (Training Hub converts its tool-call rows while streaming
    them) is refused before launch. CSV files and, for the other functions, dataset ids go to thub's
    readers, which read them as Training Hub does (docs/data.md)."""
    from pathlib import Path

    if algorithm in _HUB_STREAMING and isinstance(data_path, str) and _HUB_ID.match(data_path) \
            and not Path(data_path).exists():
        raise UsageError(f"data_path {data_path!r} looks like a Hugging Face dataset id and is not a local path: "
                         + HUB_DATA_REFUSAL)


def rows() -> list[dict[str, Any]]:
    """The table for the migration guide: one row per Training Hub name (sorted), with functions."""
    from thub.manager import get_registry

    registry = get_registry()
    fields = {fn: registry.algorithm(fn).load_parameters().model_fields for fn in FUNCTIONS}
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for fn in FUNCTIONS:
        for name in names_for(fn):
            rule = rule_for(name, fields[fn])
            kind = rule.kind if rule else "unclassified"
            # one row per (name, kind): max_tokens is thub's own for grpo, refused for osft
            row = table.setdefault((name, kind), {"name": name, "functions": [], "kind": kind,
                                                  "thub": (rule.thub if rule else "") or "",
                                                  "note": rule.note if rule else "",
                                                  "accepts": list(rule.accepts) if rule else []})
            row["functions"].append(fn)
    return [table[key] for key in sorted(table)]


def markdown_table() -> str:
    """The migration guide's table (docs/migrating-from-training-hub.md holds this text verbatim)."""
    lines = ["| Training Hub name | functions | thub | how |", "|---|---|---|---|"]
    for row in rows():
        thub = f"`{row['thub']}`" if row["thub"] else ""
        how = {"same": "same name and meaning", "mapped": "mapped", "fixed": "accepted values only",
               "refused": "refused", "api": "Python API"}.get(row["kind"], row["kind"])
        if row["accepts"]:
            how += " (" + ", ".join(f"`{value!r}`" for value in row["accepts"]) + ")"
        note = f": {row['note']}" if row["note"] else ""
        lines.append(f"| `{row['name']}` | {', '.join(row['functions'])} | {thub} | {how}{note} |")
    return "\n".join(lines)
