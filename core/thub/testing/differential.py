"""Honoured means used: the contract kit's differential test.

For every parameter a backend says it honours, two different valid values must give two different
native configurations (the ``translate`` output, which ``--dry-run`` shows and the runner builds the
library's objects from). A parameter whose change changes nothing is silently dropped, whatever
reads it: the runner reading it "elsewhere" does not count, because then the plan does not say
what will be used. A runner that needs a parameter reads it from the plan.

Not tested here, on purpose:

* what thub's core consumes itself for every backend (the kit's ``_consumed_by_core``): the
  parameters declared ``param(core_applied=True)`` (paths, the datasets, their mixing, the format,
  the document column: the backend gets the mixed rows from the run context, so they cannot show
  in its native configuration), torchrun settings and the trackers the parent logs.

Values are derived from each parameter's pydantic field (booleans both ways, a ``Literal``'s
choices, numbers inside the field's bounds, a few known texts); a plugin gives its own for a
parameter with :attr:`BackendContract.differential_values`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from thub.errors import UsageError

#: values for thub parameters whose type alone says little (texts with a format, lists of names)
KNOWN_VALUES: dict[str, tuple[Any, ...]] = {
    "lr_scheduler": ("cosine", "linear", "constant"),
    "lr_scheduler_kwargs": ({"num_cycles": 1}, {"num_cycles": 2}),
    "target_modules": (["q_proj", "v_proj"], ["q_proj"]),
    "target_patterns": (["self_attn"], ["mlp"]),
    "reward": (["math"], ["tool_call"]),
    "rdzv_endpoint": ("10.0.0.1:29500", "10.0.0.2:29500"),
    "master_addr": ("10.0.0.1", "10.0.0.2"),
    "nproc_per_node": (1, 2),
    "bnb_4bit_quant_type": ("nf4", "fp4"),
    "bnb_4bit_compute_dtype": ("bfloat16", "float16"),
    "rollout_function": ("thub_builtins.reward_functions:math", "thub_builtins.reward_functions:tool_call"),
}

#: parameters that only apply beside another: set with it when a value does not resolve alone
COMPANIONS: dict[str, dict[str, Any]] = {
    "is_pretraining": {"block_size": 64},
    "block_size": {"is_pretraining": True},
    "validation_split": {"validation_frequency": 5},
    "validation_data_path": {"validation_frequency": 5},
    "validation_frequency": {"validation_split": 0.1},
    "bnb_4bit_quant_type": {"load_in_4bit": True},
    "bnb_4bit_compute_dtype": {"load_in_4bit": True},
    "bnb_4bit_use_double_quant": {"load_in_4bit": True},
    "wandb_entity": {"wandb_project": "project"},
    "wandb_run_name": {"wandb_project": "project"},
    "mlflow_experiment_name": {"mlflow_tracking_uri": "file:///tmp/mlruns"},
    "mlflow_run_name": {"mlflow_tracking_uri": "file:///tmp/mlruns"},
    "master_port": {"master_addr": "10.0.0.1"},
}

_TEXTS = ("first", "second")
_INTS = (2, 3, 4, 8, 16, 5, 7, 64, 128, 1, 0, 8192, 16384, 32768)
_FLOATS = (0.1, 0.2, 0.05, 0.5, 0.01, 1e-4, 2e-4, 0.9, 0.95, 0.3)


def _bounds(field: Any) -> Callable[[float], bool]:
    """Whether a number satisfies the field's ge/gt/le/lt constraints."""
    limits = {attr: getattr(item, attr) for item in getattr(field, "metadata", ())
              for attr in ("ge", "gt", "le", "lt") if getattr(item, attr, None) is not None}

    def within(value: float) -> bool:
        return (value >= limits.get("ge", value) and value <= limits.get("le", value)
                and ("gt" not in limits or value > limits["gt"]) and ("lt" not in limits or value < limits["lt"]))
    return within


def _members(annotation: Any) -> list[Any]:
    args = get_args(annotation)
    if args and get_origin(annotation) is not Literal and get_origin(annotation) is not list:
        return [m for a in args for m in _members(a)]
    return [annotation]


def candidate_values(name: str, field: Any, given: Mapping[str, Sequence[Any]] | None = None) -> list[Any]:
    """Valid-looking values of the parameter ``name`` (its pydantic ``field``), most likely first."""
    if given and name in given:
        return list(given[name])
    if name in KNOWN_VALUES:
        return list(KNOWN_VALUES[name])
    within = _bounds(field)
    values: list[Any] = []
    for member in _members(field.annotation):
        if member is type(None):
            continue
        if member is bool:
            values += [True, False]
        elif get_origin(member) is Literal:
            values += list(get_args(member))
        elif member is int:
            values += [v for v in _INTS if within(v)]
        elif member is float:
            values += [v for v in _FLOATS if within(v)]
        elif member is str:
            values += list(_TEXTS)
        elif get_origin(member) is list or member is list:
            values += [[text] for text in _TEXTS]
        elif get_origin(member) is dict or member is dict:
            values += [{"key": 1}, {"key": 2}]
    unique: list[Any] = []
    for value in values:
        if not any(value == seen and type(value) is type(seen) for seen in unique):
            unique.append(value)
    return unique


def _canonical(native: Any) -> str:
    return json.dumps(native, sort_keys=True, default=str)


def unchanged_parameters(
    translate: Callable[[str, dict[str, Any]], tuple[Any, set[str]]],
    fields: Callable[[str], Mapping[str, Any]],
    honoured: Mapping[str, frozenset[str]],
    configurations: Sequence[tuple[str, dict[str, Any]]],
    exempt: Callable[[str], set[str]],
    given: Mapping[str, Sequence[Any]] | None = None,
) -> list[str]:
    """One line per honoured parameter whose change changes nothing in the native configuration.

    ``translate(algorithm, flags)`` resolves and translates, returning ``(native, names read)``, and
    raises :class:`UsageError` for an invalid combination; ``configurations`` are the bases to
    vary (the kit's samples), those whose translation reads the parameter tried first.
    """
    problems = []
    for algorithm, names in honoured.items():
        bases = [flags for name, flags in configurations if name == algorithm]
        model_fields = fields(algorithm)
        for name in sorted(set(names) - exempt(algorithm)):
            problem = _check_one(translate, algorithm, name, model_fields[name], bases, given)
            if problem:
                problems.append(f"{algorithm}: {problem}")
    return problems


def _check_one(translate: Callable[[str, dict[str, Any]], tuple[Any, set[str]]], algorithm: str, name: str,
               field: Any, bases: list[dict[str, Any]], given: Mapping[str, Sequence[Any]] | None) -> str | None:
    readers, others = [], []
    for flags in bases:
        try:
            readers.append(flags) if name in translate(algorithm, flags)[1] else others.append(flags)
        except UsageError:
            continue
    values = candidate_values(name, field, given)
    companions = COMPANIONS.get(name, {})
    tried: list[str] = []
    for flags in readers + others:
        bare = {key: flags[key] for key in flags if key not in companions}
        # the parameter alone, beside what it applies with, and without that (a conflict)
        for variant in (flags, {**flags, **companions}, bare) if companions else (flags,):
            natives: dict[str, str] = {}
            for value in values:
                try:
                    native = _canonical(translate(algorithm, {**variant, name: value})[0])
                except UsageError:
                    continue
                if natives and native not in natives.values():
                    return None  # two valid values, two native configurations: used
                natives.setdefault(json.dumps(value, default=str), native)
            if len(natives) > 1:  # every valid value gave the same native configuration
                tried.append(" / ".join(natives))
        if not companions:
            continue
        # a value valid only beside the companions (True) against one valid only without them (False)
        pair = [_canonical_or_none(translate, algorithm, variant, name, value)
                for value in values for variant in ({**flags, **companions}, bare)]
        if len({native for native in pair if native is not None}) > 1:
            return None
    if not tried:
        return (f"{name}: no two values of {values!r} resolve on any sample: give a read_samples configuration "
                f"where {name} applies, or differential_values[{name!r}]")
    return (f"{name}: changing it ({'; '.join(_unique(tried))}) changes nothing in the native configuration "
            "(honoured but not used: map it in translate, or stop honouring it)")


def _canonical_or_none(translate: Callable[[str, dict[str, Any]], tuple[Any, set[str]]], algorithm: str,
                       flags: dict[str, Any], name: str, value: Any) -> str | None:
    try:
        return _canonical(translate(algorithm, {**flags, name: value})[0])
    except UsageError:
        return None


def _unique(items: list[str]) -> Iterator[str]:
    seen: set[str] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item
