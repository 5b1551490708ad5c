"""Resolve a run's parameters from every layer, recording where each value came from.

Precedence, lowest first: algorithm defaults < backend defaults < ``PET_*`` environment
(Kubeflow Trainer's distributed settings, local launcher only) < config file < ``THUB_*``
environment < CLI flags < ``--nodes``/``--gpus-per-node`` < ``--set key=value`` (the Python API's
keyword arguments rank as flags). The CLI and the Python API resolve through here alike. Unknown
keys, invalid values and parameters the backend does not honour are
:class:`~thub.errors.UsageError`\\ s that name the file, line and field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from thub.config.dialects import dialects_for
from thub.config.fields import ParamInfo, core_applied, param_infos, parse_text
from thub.config.yamlfile import load_yaml
from thub.errors import UsageError, did_you_mean
from thub.manager import Registry
from thub.redact import redact
from thub.specs import AlgorithmSpec, BackendSpec
from thub.surface import option

# Keys a config file may hold besides parameters.
META_KEYS = frozenset({"algorithm", "backend"})


@dataclass(frozen=True)
class ConfigFile:
    """A YAML config: its values and the line of each top-level key."""

    path: Path
    values: dict[str, Any]
    lines: dict[str, int]

    def where(self, key: str) -> str:
        return f"{self.path}:{self.lines.get(key, 1)}"


def read_config_file(path: str | Path) -> ConfigFile:
    """Parse a YAML mapping of parameters; errors carry file and line.

    Refused (:func:`thub.config.yamlfile.load_yaml`): files over 10 MB, before parsing, and a
    key repeated in any mapping.
    """
    path = Path(path)
    values, node = load_yaml(path, "config file")
    if values is None:
        return ConfigFile(path, {}, {})
    if not isinstance(values, dict) or not isinstance(node, yaml.MappingNode):
        raise UsageError(f"{path}:1: expected a mapping of parameter: value, found {type(values).__name__}")
    lines = {key.value: key.start_mark.line + 1 for key, _ in node.value if isinstance(key, yaml.ScalarNode)}
    return ConfigFile(path, values, lines)


@dataclass
class ResolvedConfig:
    """A validated parameter set with the source of every value."""

    algorithm: AlgorithmSpec
    backend: BackendSpec
    params: BaseModel
    sources: dict[str, str]
    backend_reason: str = ""
    ignored: list[str] = field(default_factory=list)
    # a dialect's names accepted without setting a parameter (thub.config.dialects, DialectSpec.rules)
    notes: list[str] = field(default_factory=list)

    def values(self) -> dict[str, Any]:
        return self.params.model_dump(mode="json")

    def user_set(self) -> set[str]:
        """Parameters set by the user (not defaults)."""
        return {k for k, s in self.sources.items() if s not in ("default",) and not s.startswith("backend")}


def _layer_from_mapping(
    values: Mapping[str, Any], infos: dict[str, ParamInfo], where: Any
) -> dict[str, tuple[Any, str]]:
    """Already-typed values (a config file, flags, API keywords): checked by name, not parsed."""
    layer = {}
    unknown = []  # every unknown name, said at once
    for key, value in values.items():
        if key in META_KEYS:
            continue
        if key not in infos:
            unknown.append(f"{where(key)}: unknown parameter {key!r}{did_you_mean(key, infos)}")
            continue
        layer[key] = (value, where(key))
    if unknown:
        raise UsageError("\n".join(unknown))
    return layer


def env_layer(infos: dict[str, ParamInfo], environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """``THUB_<PARAM>`` variables (other ``THUB_*`` names are thub's own settings)."""
    layer = {}
    for info in infos.values():
        if info.env_var in environ:
            layer[info.name] = (parse_text(info, environ[info.env_var]), f"env {info.env_var}")
    return layer


def pet_layer(infos: dict[str, ParamInfo], environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """``PET_NNODES``, ``PET_NPROC_PER_NODE``, ... (Kubeflow Trainer sets them on every worker):
    this node's distributed settings, below every explicit value."""
    from thub.launch.torchrun import PET_VARIABLES

    return {name: (parse_text(infos[name], environ[variable]), f"env {variable}")
            for name, variable in PET_VARIABLES.items() if name in infos and variable in environ}


def parse_overrides(pairs: list[str], infos: dict[str, ParamInfo]) -> dict[str, tuple[Any, str]]:
    """``--set key=value`` pairs."""
    layer = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise UsageError(f"--set {pair!r}: expected key=value")
        if key not in infos:
            raise UsageError(f"--set {pair!r}: unknown parameter {key!r}{did_you_mean(key, infos)}")
        layer[key] = (parse_text(infos[key], text), f"--set {key}")
    return layer


def _one_per_union(errors: list[Any], model: type[BaseModel] | None) -> list[Any]:
    """A value no member of a union field accepts is one error whose message names each member's
    expectation ("greater than or equal to 1, or 'auto' or 'gpu'"), not one per member."""
    from thub.config.fields import param_infos

    infos = param_infos(model) if model is not None else {}
    merged: list[Any] = []
    for error in errors:
        loc = error["loc"]
        info = infos.get(str(loc[0])) if loc else None
        union = len(loc) == 2 and info is not None and len(info.base_types) > 1 and not isinstance(loc[1], int)
        previous = merged[-1] if merged else None
        if union and previous is not None and previous["loc"][:1] == loc[:1] and previous.get("union"):
            previous["msg"] += f", or {error['msg'][0].lower()}{error['msg'][1:]}"
            continue
        merged.append({**error, "loc": loc[:1], "union": True} if union else error)
    return merged


def _format_validation_error(exc: ValidationError, sources: dict[str, str],
                             model: type[BaseModel] | None = None) -> str:
    lines = []
    for error in _one_per_union(exc.errors(), model):
        name = ".".join(str(p) for p in error["loc"]) or "parameters"
        top = str(error["loc"][0]) if error["loc"] else ""
        where = sources.get(top)
        origin = f" (from {where})" if where and where != "default" else ""
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = f"required; set it in the config file, with --{top.replace('_', '-')} or THUB_{top.upper()}"
            lines.append(f"{name}: {message}")
            continue
        got = error.get("input")
        shown = "" if isinstance(got, dict) else f", got {redact(got, top)!r}"
        lines.append(f"{name}{origin}: {message}{shown}")
    return "invalid parameters:\n  " + "\n  ".join(lines)


def _non_finite(value: Any, path: str) -> Iterator[tuple[str, float]]:
    """``(dotted path, value)`` of every inf/nan float inside ``value`` (lists, mappings)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{path}.{index}")


def _check_finite(params: BaseModel, sources: dict[str, str]) -> None:
    """No parameter holds inf or nan, however deep and whatever model declared it.

    thub's own models reject them in pydantic (``allow_inf_nan=False``); this also covers
    free-form mappings (``lr_scheduler_kwargs``) and a third-party plugin's parameter model.
    """
    problems = [
        f"{path} (from {sources.get(name, 'default')}): Input should be a finite number, got {value!r}"
        for name in type(params).model_fields
        for path, value in _non_finite(getattr(params, name), name)
    ]
    if problems:
        raise UsageError("invalid parameters:\n  " + "\n  ".join(problems))


def resolve(
    registry: Registry,
    algorithm: str,
    *,
    backend: str | None = None,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    overrides: list[str] | None = None,
    flag_label: str = "flag",
    allow_ignored: bool = False,
    launch: Any = None,
) -> ResolvedConfig:
    """Merge all layers, validate with the algorithm's model and check the backend honours them.

    ``launch``: ``thub train``'s launcher options (:class:`thub.launch.options.LaunchOptions`);
    ``None`` is the local launcher without ``--nodes``/``--gpus-per-node`` (the Python API).
    ``PET_*`` variables count on the local launcher only (they describe this node's worker).
    """
    from thub.selection import choose_backend

    spec = registry.algorithm(algorithm)
    model: type[BaseModel] = spec.load_parameters()
    infos = param_infos(model)
    environ = os.environ if environ is None else environ

    config = read_config_file(config_file) if config_file else None
    if config and backend is None and config.values.get("backend"):
        backend = str(config.values["backend"])
    if config and config.values.get("algorithm") not in (None, algorithm):
        raise UsageError(
            f"{config.where('algorithm')}: config is for algorithm {config.values['algorithm']!r}, not {algorithm!r}"
        )
    chosen, reason = choose_backend(registry, algorithm, backend)
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    # a name that is not thub's loads the registered dialects (thub's own names import none)
    keys = [*(config.values if config else ()), *given, *(o.partition("=")[0].strip().replace("-", "_")
                                                          for o in overrides or [])]
    dialects = dialects_for(registry, spec.name, infos, keys, META_KEYS)
    names = dialects.names()  # thub's parameters + the dialects' names
    local = launch is None or not registry.launcher(launch.launcher).runs_elsewhere  # PET_*: this machine's worker

    layers: list[dict[str, tuple[Any, str]]] = [
        {k: (v, f"backend {chosen.name}") for k, v in chosen.defaults_for(algorithm).items() if k in infos},
        pet_layer(infos, environ) if local else {},
        _layer_from_mapping(config.values, names, config.where) if config else {},
        env_layer(infos, environ),
        _layer_from_mapping(
            given,
            names,
            lambda k: f"{flag_label} {infos[k].option if flag_label == 'flag' and k in infos else k}",
        ),
        _distributed_layer(launch, given, infos),
        parse_overrides(list(overrides or []), names),
    ]
    layers, notes = dialects.translate(registry, layers)
    raw: dict[str, Any] = {}
    sources = {name: "default" for name in infos}
    for layer in layers:
        for key, (value, source) in layer.items():
            raw[key] = value
            sources[key] = source
    try:
        params = model(**raw)
    except ValidationError as exc:
        raise UsageError(_format_validation_error(exc, sources, model)) from None
    _check_finite(params, sources)

    resolved = ResolvedConfig(spec, chosen, params, sources, reason, notes=notes)
    _check_honoured(registry, resolved, allow_ignored)
    from thub.trackers import check_keys

    # a tracker's run name, entity or experiment without the key that turns it on changes nothing
    check_keys(resolved, list(registry.backends.values()), allow_ignored)
    return resolved


def _distributed_layer(launch: Any, flags: Mapping[str, Any],
                       infos: dict[str, ParamInfo]) -> dict[str, tuple[Any, str]]:
    """``--nodes``/``--gpus-per-node`` (and SLURM's agents per node): :mod:`thub.launch.options`."""
    if launch is None:
        return {}
    from thub.launch.options import distributed_layer

    return {k: v for k, v in distributed_layer(launch, flags).items() if k in infos}


def _check_honoured(registry: Registry, resolved: ResolvedConfig, allow_ignored: bool) -> None:
    """A parameter the user set that the backend does not honour is an error, never a drop."""
    algorithm, backend = resolved.algorithm.name, resolved.backend
    from thub.trackers import parent_logged_params

    # a tracker the backend's library does not log, thub logs from the parent (thub.trackers)
    honoured = backend.honours(algorithm) | core_applied(type(resolved.params)) \
        | parent_logged_params(backend, algorithm)
    problems = []
    # PET_* describe the machine (Kubeflow sets them on every worker), not a request of the user:
    # a backend that does not start torchrun leaves them to its library, as before they were layers
    asked = {name for name in resolved.user_set() if not resolved.sources[name].startswith("env PET_")}
    for name in sorted(asked - honoured):
        others = [b.name for b in registry.backends_for(algorithm) if name in b.honours(algorithm)]
        hint = f"backends that do: {', '.join(others)}" if others else "no installed backend honours it"
        problems.append(f"{name} (from {resolved.sources[name]}): {hint}")
    if not problems:
        return
    if allow_ignored:
        resolved.ignored = problems
        return
    raise UsageError(
        f"backend {backend.name!r} does not honour these {algorithm} parameters:\n  "
        + "\n  ".join(problems)
        + f"\nremove them, choose another backend with {option('backend', 'NAME')}, "
        + f"or pass {option('allow_ignored')} to run without them"
    )
