"""Plugin loading and the registry of what plugins provide.

Built-in plugins are registered first, then entry points of group ``thub``. Every load is
isolated: a plugin that fails to import, implements an unknown ``thub_*`` hook, or raises while
registering is recorded as a :class:`PluginFailure` and the others keep working.

Environment switches (as llm's ``LLM_LOAD_PLUGINS``):

* ``THUB_PLUGINS``: comma-separated allow-list of entry-point or distribution names; set but
  empty means "no external plugins".
* ``THUB_DISABLE_PLUGINS``: comma-separated names (entry point, distribution or built-in
  module) never to load.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from thub import hookspecs
from thub.discovery import PluginEntryPoint, entry_points
from thub.specs import (
    AlgorithmSpec,
    BackendSpec,
    CheckSpec,
    CommandSpec,
    DataFormatSpec,
    DataKindSpec,
    DialectSpec,
    EvaluatorSpec,
    LauncherSpec,
    Provenance,
    Registered,
    RewardSpec,
    RunEvent,
    StorageSpec,
    TrackerSpec,
    load_object,
)

BUILTIN_PLUGINS: tuple[str, ...] = (
    "thub_builtins.algorithms",
    "thub_builtins.data_kinds",
    "thub_builtins.preference_data",
    "thub_builtins.rewards",
    "thub_builtins.checks",
    "thub_builtins.kubeflow",
    "thub_builtins.trackers",
    "thub_builtins.commands",
    "thub_builtins.training_hub",
    "thub_builtins.launchers",
    "thub_builtins.storage",
)

# spec kind -> (hook name, spec type)
_REGISTRATION_HOOKS: dict[str, tuple[str, type[Registered]]] = {
    "algorithms": ("thub_register_algorithms", AlgorithmSpec),
    "backends": ("thub_register_backends", BackendSpec),
    "data_kinds": ("thub_register_data_kinds", DataKindSpec),
    "rewards": ("thub_register_rewards", RewardSpec),
    "evaluators": ("thub_register_evaluators", EvaluatorSpec),
    "trackers": ("thub_register_trackers", TrackerSpec),
    "checks": ("thub_register_checks", CheckSpec),
    "commands": ("thub_register_commands", CommandSpec),
    "dialects": ("thub_register_dialects", DialectSpec),
    "launchers": ("thub_register_launchers", LauncherSpec),
    "storage": ("thub_register_storage", StorageSpec),
}


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded or registered something invalid."""

    name: str
    distribution: str | None
    version: str | None
    stage: str
    error: str


@dataclass
class PluginInfo:
    """A loaded plugin, for ``thub plugins``."""

    name: str
    distribution: str | None
    version: str | None
    builtin: bool
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Registry:
    """Everything registered by the loaded plugins, keyed by name, with failures recorded."""

    pm: pluggy.PluginManager
    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    algorithms: dict[str, AlgorithmSpec] = field(default_factory=dict)
    backends: dict[str, BackendSpec] = field(default_factory=dict)
    rewards: dict[str, RewardSpec] = field(default_factory=dict)
    #: evaluation harnesses by name (thub_register_evaluators), for ``thub eval``
    evaluators: dict[str, EvaluatorSpec] = field(default_factory=dict)
    #: experiment trackers by name (thub_register_trackers), in registration order
    trackers: dict[str, TrackerSpec] = field(default_factory=dict)
    #: data kinds by name (thub_register_data_kinds); their formats: :meth:`data_formats`
    data_kinds: dict[str, DataKindSpec] = field(default_factory=dict)
    checks: dict[str, CheckSpec] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)
    # backend name -> managed environment holding it (read from manifests; see thub.envs)
    environments: dict[str, str] = field(default_factory=dict)
    # managed backends hidden because the current environment (or an earlier env) provides them
    shadowed: list[str] = field(default_factory=list)
    # `thub` subcommands (thub_register_commands), built-in ones included: name -> spec
    commands: dict[str, CommandSpec] = field(default_factory=dict)
    #: parameter dialects by name (thub_register_dialects): another tool's names, CLI and API
    dialects: dict[str, DialectSpec] = field(default_factory=dict)
    #: launchers by name (thub_register_launchers): ``thub train --launcher``, ``thub runs``
    launchers: dict[str, LauncherSpec] = field(default_factory=dict)
    #: storage URI schemes by name (thub_register_storage): push targets and the checkpoint mirror
    storage: dict[str, StorageSpec] = field(default_factory=dict)

    def failed_plugins(self) -> set[str]:
        """Names of loaded plugins with a recorded failure: they receive no run events."""
        return {failure.name for failure in self.failures}

    def storage_scheme(self, scheme: str, use: str) -> StorageSpec:
        """The storage scheme ``scheme`` for ``use`` (``push`` or ``mirror``); else a UsageError
        saying why, with the URI shapes of the schemes that ``use`` takes (did you mean)."""
        from thub.errors import UsageError, closest

        usable = [spec for spec in self.storage.values() if use in spec.supports]
        shapes = [spec.uri for spec in usable]
        expected = f"expected {' or '.join(filter(None, [', '.join(shapes[:-1]), *shapes[-1:]]))}"
        spec = self.storage.get(scheme)
        if spec is None:
            # schemes are short: one letter off (s4, gz) is half of the name
            close = closest(scheme, [s.name for s in usable], cutoff=0.5) if scheme else None
            raise UsageError(f"{expected}{f' (did you mean {close!r}?)' if close else ''}")
        if use not in spec.supports:
            where = {"mirror": "checkpoint_storage", "push": "thub checkpoint push"}.get(use, use)
            raise UsageError(f"{scheme}:// is a {' and '.join(sorted(spec.supports))} target only "
                             f"({spec.provenance.plugin}), not one for {where}: {expected}")
        return spec

    def algorithm(self, name: str) -> AlgorithmSpec:
        from thub.errors import UsageError, did_you_mean

        try:
            return self.algorithms[name]
        except KeyError:
            raise UsageError(
                f"unknown algorithm {name!r}{did_you_mean(name, self.algorithms)}; "
                f"available: {', '.join(sorted(self.algorithms))}"
            ) from None

    def launcher(self, name: str) -> LauncherSpec:
        """The launcher ``name``; else a UsageError naming the registered ones."""
        from thub.errors import UsageError, did_you_mean

        try:
            return self.launchers[name]
        except KeyError:
            raise UsageError(f"--launcher: expected one of {', '.join(self.launchers) or '(none registered)'}, "
                             f"found {name!r}{did_you_mean(name, self.launchers)}") from None

    def data_formats(self) -> list[tuple[DataFormatSpec, DataKindSpec]]:
        """Every registered data format with its kind, in detection order (priority, then
        registration order)."""
        found = [(fmt, kind) for kind in self.data_kinds.values() for fmt in kind.formats]
        return sorted(found, key=lambda pair: -pair[0].priority)  # stable: registration order within

    def data_format(self, name: str) -> tuple[DataFormatSpec, DataKindSpec]:
        """The format ``name`` and its kind; else a UsageError naming the registered formats."""
        from thub.errors import UsageError

        formats = {fmt.name: (fmt, kind) for kind in self.data_kinds.values() for fmt in kind.formats}
        if name in formats:
            return formats[name]
        expected, hint = self.unknown_format(name)
        raise UsageError(f"format: {expected}, found {name!r}{hint}")

    def unknown_format(self, name: str) -> tuple[str, str]:
        """What a data format name should have been (``expected auto or one of ...``) and a hint
        for ``name`` (did you mean; a kind's name given for a format)."""
        from thub.errors import did_you_mean

        names = [fmt.name for kind in self.data_kinds.values() for fmt in kind.formats]
        hint = did_you_mean(name, names)
        if name in self.data_kinds:  # a kind's name where a format's is meant
            hint = f" ({name} is a data kind; its formats: {', '.join(self.data_kinds[name].format_names())})"
        return f"expected auto or one of {', '.join(names)}", hint

    def data_kind(self, name: str) -> DataKindSpec:
        """The data kind ``name``; else a UsageError naming the registered kinds."""
        from thub.errors import UsageError, did_you_mean

        try:
            return self.data_kinds[name]
        except KeyError:
            raise UsageError(f"data kind: expected one of {', '.join(self.data_kinds)}, found {name!r}"
                             f"{did_you_mean(name, self.data_kinds)}") from None

    def backend(self, name: str) -> BackendSpec:
        """The installed backend ``name`` means (any case, or an alias such as ``minitrainer``);
        else a UsageError naming every backend thub can install and the command for it."""
        from thub.envs.catalog import match_name, unknown_backend_message
        from thub.errors import UsageError

        found = match_name(name, self.backends)
        if found is None:
            raise UsageError(unknown_backend_message(name, self.backends))
        return self.backends[found]

    def backends_for(self, algorithm: str) -> list[BackendSpec]:
        """Backends that run ``algorithm``, best first (priority, then name)."""
        found = [b for b in self.backends.values() if algorithm in b.algorithms]
        return sorted(found, key=lambda b: (-b.priority, b.name))

    def fire(self, event: RunEvent) -> None:
        """Call ``thub_on_event`` on every plugin; an observer's crash never stops a run."""
        failed = self.failed_plugins()
        for impl in self.pm.hook.thub_on_event.get_hookimpls():
            if impl.plugin_name in failed:
                continue  # a plugin that failed to register is not trusted with run events
            try:
                impl.function(event=event)
            except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - observers must not break training
                # SystemExit/KeyboardInterrupt too: a plugin's sys.exit() must not end the supervisor
                detail = exc if isinstance(exc, Exception) else f"raised {type(exc).__name__}({exc})"
                print(f"thub: event hook of {impl.plugin_name} failed: {detail}", file=sys.stderr)

    def check_rows(self, algorithm: str, backend: str, rows: list[dict[str, Any]], locations: list[str],
                   params: dict[str, Any]) -> None:
        """The backend's own row check (``BackendSpec.check_rows``), where its translation runs:
        a row its library cannot hold raises :class:`~thub.errors.UsageError` naming it."""
        spec = self.backends.get(backend)
        if spec is None or spec.check_rows is None:
            return
        if backend in self.environments:  # its plugin lives only in a managed environment
            from thub.envs.remote import call_env

            call_env(spec.python or "", "check_rows", {"algorithm": algorithm, "backend": backend, "rows": rows,
                                                       "locations": locations, "params": params})
            return
        load_object(spec.check_rows)(algorithm, rows, locations, params)

    def translate(self, algorithm: str, backend: str, params: dict[str, Any]) -> Any:
        if backend in self.environments:
            # its plugin lives only in a managed environment: ask that interpreter
            from thub.envs.remote import translate_in_env

            return translate_in_env(self.backends[backend].python or "", algorithm, backend, params)
        spec = self.backends.get(backend)
        if spec is not None and spec.translate:
            # the spec's own translate answers first; wrappers (wrapper=True) still wrap it
            named = spec.translate

            def thub_translate_params(algorithm: str, backend: str, params: dict[str, Any]) -> Any:
                return load_object(named)(algorithm, params)

            return self.pm.hook.thub_translate_params.call_extra(
                [thub_translate_params], {"algorithm": algorithm, "backend": backend, "params": params}
            )
        return self.pm.hook.thub_translate_params(
            algorithm=algorithm, backend=backend, params=params
        )


def _same(value: object) -> object:
    return value


def _names(variable: str) -> set[str] | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _external_entry_points() -> Iterable[PluginEntryPoint]:
    allowed = _names("THUB_PLUGINS")
    disabled = _names("THUB_DISABLE_PLUGINS") or set()
    for ep in entry_points():  # cached per environment: reading metadata costs more than --help
        names = {ep.name, ep.distribution} - {None}
        if names & disabled:
            continue
        if allowed is not None and not names & allowed:
            continue
        yield ep


class _Loader:
    """Builds a :class:`Registry`, isolating each plugin's load and registration."""

    def __init__(self, extra_plugins: Iterable[tuple[str, object]] = ()) -> None:
        self.pm = pluggy.PluginManager("thub")
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry(pm=self.pm)
        self.extra_plugins = list(extra_plugins)

    def load(self, load_entry_points: bool = True) -> Registry:
        disabled = _names("THUB_DISABLE_PLUGINS") or set()
        for module_name in BUILTIN_PLUGINS:
            if module_name in disabled:
                continue
            self._add(module_name, functools.partial(importlib.import_module, module_name), None, True)
        if load_entry_points:
            for ep in _external_entry_points():
                self._add(ep.name, ep.load, (ep.distribution, ep.version), False)
        for name, plugin in self.extra_plugins:
            self._add(name, functools.partial(_same, plugin), None, False)
        self.pm.check_pending()  # every remaining plugin was validated in _add
        self._collect()
        if load_entry_points:
            self._merge_managed()
        return self.registry

    def _merge_managed(self) -> None:
        """Add backends of managed environments from their manifests (nothing is imported).

        A backend the current environment also provides is hidden: the current one wins, and
        ``registry.shadowed`` says so.
        """
        from thub.envs.manifest import managed_backends

        found, errors = managed_backends()
        for env_name, error in errors:
            self.registry.failures.append(PluginFailure(f"env:{env_name}", None, None, "managed environment", error))
        for env_name, spec in found:
            if spec.name in self.registry.backends:
                holder = self.registry.environments.get(spec.name)
                where = f"managed environment {holder!r}" if holder else "the current environment"
                self.registry.shadowed.append(
                    f"backend {spec.name!r} of managed environment {env_name!r} is hidden: {where} provides it too and "
                    "wins"
                )
                continue
            self.registry.backends[spec.name] = spec
            self.registry.environments[spec.name] = env_name

    def _fail(self, name: str, dist: tuple[str | None, str | None] | None, stage: str, exc: BaseException) -> None:
        distribution, version = dist or (None, None)
        self.registry.failures.append(
            PluginFailure(name, distribution, version, stage, f"{type(exc).__name__}: {exc}")
        )

    def _add(
        self,
        name: str,
        load: Callable[[], object],
        dist: tuple[str | None, str | None] | None,
        builtin: bool,
    ) -> None:
        if self.pm.has_plugin(name):
            return
        try:
            plugin = load()
        except BaseException as exc:  # noqa: BLE001 - SystemExit in a plugin must not kill thub
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._fail(name, dist, "import", exc)
            return
        try:
            self.pm.register(plugin, name=name)
            unknown = [
                caller.name
                for caller in self.pm.get_hookcallers(plugin) or []
                if not caller.has_spec()
            ]
            if unknown:
                self.pm.unregister(plugin)
                raise pluggy.PluginValidationError(
                    plugin, f"unknown hook(s) {', '.join(unknown)}: not part of the thub plugin API"
                )
        except Exception as exc:  # noqa: BLE001
            self._fail(name, dist, "validate", exc)
            return
        distribution: str | None
        version: str | None
        if builtin:
            distribution, version = "thub", _thub_version()
        else:
            distribution, version = dist or (None, None)
        self.registry.plugins[name] = PluginInfo(
            name=name,
            distribution=distribution,
            version=version,
            builtin=builtin,
            hooks=sorted(c.name for c in self.pm.get_hookcallers(plugin) or []),
        )

    def _collect(self) -> None:
        for kind, (hook_name, spec_type) in _REGISTRATION_HOOKS.items():
            target: dict[str, Any] = getattr(self.registry, kind)
            # registration order: built-ins first, so a later duplicate is the one reported
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                self._collect_one(impl, kind, spec_type, target)

    def _collect_one(self, impl: pluggy.HookImpl, kind: str, spec_type: type[Registered],
                     target: dict[str, Any]) -> None:
        info = self.registry.plugins[impl.plugin_name]
        provenance = Provenance(info.name, info.distribution, info.version)
        found: list[Any] = []

        def register(spec: Any) -> None:
            if not isinstance(spec, spec_type):
                raise TypeError(f"{kind}: expected {spec_type.__name__}, got {type(spec).__name__}")
            found.append(spec.with_provenance(provenance))

        try:
            impl.function(register=register)
        except Exception as exc:  # noqa: BLE001 - one bad registration must not hide the rest
            self._fail(info.name, (info.distribution, info.version), f"register {kind}", exc)
            return
        for spec in found:
            key = spec.id if kind == "checks" else spec.name
            problem = f"{key!r} is already registered by {target[key].provenance.describe()}" if key in target else None
            if problem is None and kind == "data_kinds":
                problem = _format_clash(spec, target)
            if problem:
                self._fail(info.name, (info.distribution, info.version), f"register {kind}", ValueError(problem))
                continue
            target[key] = spec
            info.registered.setdefault(kind, []).append(key)


def _format_clash(spec: DataKindSpec, kinds: dict[str, DataKindSpec]) -> str | None:
    """Why data kind ``spec`` cannot join ``kinds``: a format name another kind (or it twice)
    has, or ``auto`` (which means "detect"); None when it can."""
    names = spec.format_names()
    if not names:
        return f"data kind {spec.name!r} has no format"
    taken = {name: other for other in kinds.values() for name in other.format_names()}
    for i, name in enumerate(names):
        if name == "auto" or name in names[:i]:
            return f"data kind {spec.name!r}: format name {name!r} is reserved or repeated"
        if name in taken:
            return (f"data kind {spec.name!r}: format {name!r} is already registered by data kind "
                    f"{taken[name].name!r} ({taken[name].provenance.describe()})")
    return None


def _thub_version() -> str:
    from thub._version import __version__

    return __version__


_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _registry
    if _registry is None:
        _registry = _Loader().load()
    return _registry


def load_registry(extra_plugins: Iterable[tuple[str, object]] = (), entry_points: bool = True) -> Registry:
    """Build a fresh registry (tests, or a caller adding in-process plugins)."""
    return _Loader(extra_plugins).load(load_entry_points=entry_points)


def set_registry(registry: Registry | None) -> None:
    """Replace the process-wide registry (``None`` reloads on next use)."""
    global _registry
    _registry = registry
