"""The contract every backend plugin's tests subclass (langchain-tests style).

    class TestTrlContract(BackendContract):
        backend = "trl"
        plugin_module = "thub_plugin_trl"
        readme = Path(__file__).parents[1] / "README.md"
        samples = {"sft": {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o"}}
        read_samples = [("lora_sft", {..., "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"})]
        read_elsewhere = frozenset({"datasets"})  # the runner loads the data
        checks = frozenset()                       # the doctor checks the plugin registers

``translate`` is run on a mapping that records every parameter it reads: it must read exactly the
honoured ones (those the runner or the launcher reads instead are declared in ``read_elsewhere``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from thub.config.fields import param_infos
from thub.doctor.execution import PREFLIGHT_TAG, SLOW_TAG
from thub.manager import Registry, load_registry

HEAVY_MODULES = ("torch", "transformers", "trl", "peft", "datasets", "vllm", "unsloth", "verl", "art",
                 "mini_trainer", "instructlab", "deepspeed", "flash_attn", "wandb", "mlflow", "tensorboard")

#: The doctor's tags (docs/doctor.md): preflight, gpu, security, slow.
KNOWN_CHECK_TAGS = frozenset({PREFLIGHT_TAG, "gpu", "security", SLOW_TAG})


def imported_heavy_modules(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; return the heavy modules it left in ``sys.modules``."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps([m for m in {HEAVY_MODULES!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"probe failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


#: the only ``thub`` modules a backend plugin's code may import (docs/writing-plugins.md)
SDK_MODULE = "thub.backend"
TEST_KIT_MODULE = "thub.testing"


def sdk_violations(package_dir: str | Path) -> list[str]:
    """``file:line: import`` of every ``thub.*`` import under ``package_dir`` other than the SDK.

    A plugin's code imports from :mod:`thub.backend` only; ``test_*.py`` / ``*_test.py`` /
    ``conftest.py`` files may also import :mod:`thub.testing` (and its submodules). Relative
    imports and other packages are not looked at. Read with :mod:`ast`: nothing is imported.
    """
    import ast

    root = Path(package_dir)
    found = []
    for source in sorted(root.rglob("*.py")):
        is_test = source.name.startswith("test_") or source.name.endswith("_test.py") or source.name == "conftest.py"
        allowed = (SDK_MODULE, TEST_KIT_MODULE) if is_test else (SDK_MODULE,)
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from thub import backend` names the SDK module itself
                modules = ([f"{node.module}.{alias.name}" for alias in node.names] if node.module == "thub"
                           else [node.module])
            else:
                continue
            for module in modules:
                if module.split(".")[0] != "thub":
                    continue
                if not any(module == ok or module.startswith(ok + ".") and ok == TEST_KIT_MODULE for ok in allowed):
                    where = source.relative_to(root.parent) if root.parent != root else source
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


#: thub's data readers, which a backend never calls on the run's data itself (the run context does)
DATA_READERS = frozenset({"training_rows", "training_sources", "load_dataset_rows", "load_source", "load_sources",
                          "DatasetSource", "prepare", "mix", "mix_loaded"})


def data_entry_violations(package_dir: str | Path, allowed: frozenset[str] = frozenset()) -> list[str]:
    """``file:line: code`` wherever a plugin reads the run's data other than through the run context.

    That is: importing one of :data:`DATA_READERS` from thub, or reading the ``data_path``
    parameter (``params["data_path"]``, ``.get("data_path")``) anywhere but ``translate.py`` (which
    maps parameters) and the functions named in ``allowed``. The data comes from
    ``context.data()`` / ``rows()`` / ``prepare()``: the rows the parent validated, with
    ``datasets`` and the mixing settings applied once. Test files are not looked at.
    """
    import ast

    root = Path(package_dir)
    found = []
    for source in sorted(root.rglob("*.py")):
        if source.name.startswith("test_") or source.name.endswith("_test.py") or source.name == "conftest.py":
            continue
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
        exempt: set[int] = set()  # lines of the allowed functions
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in allowed:
                exempt.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        where = source.relative_to(root.parent) if root.parent != root else source
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)  # ast.mod and a few other nodes have no position
            bad = False
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "thub":
                bad = any(alias.name in DATA_READERS for alias in node.names)
            elif source.name != "translate.py" and line not in exempt:
                if isinstance(node, ast.Subscript):
                    bad = isinstance(node.slice, ast.Constant) and node.slice.value == "data_path"
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                    bad = bool(node.args) and isinstance(node.args[0],
                                                         ast.Constant) and node.args[0].value == "data_path"
            if bad:
                found.append(f"{where}:{line}: {ast.unparse(node)}")
    return found


class RecordingParams(dict):
    """Resolved parameters that record every name read (``[]``, ``get``, ``in``, iteration)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)

    def _all(self) -> None:
        self.read.update(self.keys())

    def items(self):  # type: ignore[override]
        self._all()
        return super().items()

    def values(self):  # type: ignore[override]
        self._all()
        return super().values()

    def __iter__(self) -> Iterator[str]:
        self._all()
        return super().__iter__()

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        self._all()
        return dict(self)


class BackendContract:
    """Checks a backend plugin keeps thub's promises. Subclass and set the class attributes."""

    backend: ClassVar[str]
    plugin_module: ClassVar[str]
    readme: ClassVar[Path]
    samples: ClassVar[dict[str, dict[str, Any]]] = {}
    #: more (algorithm, flags) configurations, so that the parameters a translation reads only
    #: under a condition (``bnb_4bit_*`` with ``load_in_4bit``) are read at least once
    read_samples: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    #: honoured parameters the translation does not read because the runner or the launcher does
    read_elsewhere: ClassVar[frozenset[str]] = frozenset()
    #: ids of the doctor checks the plugin registers (declared: registering none must be said)
    checks: ClassVar[frozenset[str] | None] = None
    #: tags of the plugin's own, beyond :data:`KNOWN_CHECK_TAGS`
    check_tags: ClassVar[frozenset[str]] = frozenset()
    #: functions that may read ``params["data_path"]`` themselves (say why: e.g. files that are
    #: not thub training data); everything else gets the data from the run context
    reads_data_path: ClassVar[frozenset[str]] = frozenset()
    #: values the differential test tries for a parameter (default: from its pydantic field;
    #: :mod:`thub.testing.differential`), when those do not resolve or mean the same
    differential_values: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def registry(self) -> Registry:
        return load_registry()

    def _translate_recording(self, registry: Registry, algorithm: str,
                             flags: dict[str, Any]) -> tuple[Any, set[str], set[str]]:
        """(native, names read, names the user set) for one configuration."""
        from thub.config.resolve import resolve

        resolved = resolve(registry, algorithm, backend=self.backend, flags=flags, environ={})
        params = RecordingParams(resolved.values())
        native = registry.translate(algorithm, self.backend, params)
        return native, params.read, set(resolved.user_set())

    def _consumed_by_core(self, registry: Registry, algorithm: str) -> set[str]:
        """Parameters thub's core reads itself: paths, torchrun flags, thub-routed trackers."""
        from thub.config.fields import core_applied
        from thub.launch.torchrun import PET_VARIABLES
        from thub.trackers import parent_logged_params

        spec = registry.backends[self.backend]
        core = set(core_applied(registry.algorithm(algorithm).load_parameters())) \
            | set(parent_logged_params(spec, algorithm))
        if spec.launcher == "torchrun":
            core |= set(PET_VARIABLES)  # the torchrun settings, one PET_* variable each
        return core

    def test_translation_reads_exactly_the_honoured_parameters(self) -> None:
        """``translate`` reads every honoured parameter (over ``samples`` and ``read_samples``) and
        no other; honoured parameters read only by the runner/launcher are declared."""
        registry = self.registry()
        spec = registry.backends[self.backend]
        configurations = [*self.samples.items(), *self.read_samples]
        read: dict[str, set[str]] = {algorithm: set() for algorithm in spec.algorithms}
        for algorithm, flags in configurations:
            read[algorithm] |= self._translate_recording(registry, algorithm, flags)[1]
        elsewhere_unknown = sorted(self.read_elsewhere - set().union(*spec.algorithms.values()))
        assert not elsewhere_unknown, \
            f"read_elsewhere names parameters the backend does not honour: {elsewhere_unknown}"
        for algorithm, honoured in spec.algorithms.items():
            core = self._consumed_by_core(registry, algorithm)
            unread = sorted(set(honoured) - read[algorithm] - self.read_elsewhere - core)
            assert not unread, (f"{algorithm}: honoured but never read by translate: {unread} (add a read_samples "
                                "configuration that sets them, or declare them in read_elsewhere)")
            foreign = sorted(read[algorithm] - set(honoured) - core)
            assert not foreign, f"{algorithm}: translate reads parameters the backend does not honour: {foreign}"

    def test_every_honoured_parameter_changes_the_native_configuration(self) -> None:
        """Honoured means used: two valid values of each honoured parameter give two native
        configurations (``read_elsewhere`` is no exemption; core's own and core's data settings
        are: :mod:`thub.testing.differential`)."""
        from thub.config.resolve import resolve
        from thub.testing.differential import unchanged_parameters

        registry = self.registry()
        spec = registry.backends[self.backend]

        def translate(algorithm: str, flags: dict[str, Any]) -> tuple[Any, set[str]]:
            resolved = resolve(registry, algorithm, backend=self.backend, flags=flags, environ={})
            params = RecordingParams(resolved.values())
            return registry.translate(algorithm, self.backend, params), params.read

        problems = unchanged_parameters(
            translate, lambda algorithm: registry.algorithm(algorithm).load_parameters().model_fields,
            spec.algorithms, [*self.samples.items(), *self.read_samples],
            lambda algorithm: self._consumed_by_core(registry, algorithm), self.differential_values)
        assert not problems, "honoured parameters that change nothing:\n  " + "\n  ".join(problems)

    def test_imports_only_the_backend_sdk(self) -> None:
        """The plugin's code imports thub through :mod:`thub.backend` only (tests: also
        :mod:`thub.testing`), so thub's internals can move without breaking it."""
        import importlib

        package = Path(importlib.import_module(self.plugin_module).__file__ or "").parent
        found = sdk_violations(package)
        assert not found, (f"{self.plugin_module} imports thub internals; import these names from {SDK_MODULE} "
                           "(docs/writing-plugins.md lists what it exports):\n  " + "\n  ".join(found))

    def test_reads_data_through_the_run_context(self) -> None:
        """The runner gets its rows from ``context.data()`` / ``rows()`` / ``prepare()`` (the rows
        thub validated before the run), never by reading ``data_path`` or calling thub's readers."""
        import importlib

        package = Path(importlib.import_module(self.plugin_module).__file__ or "").parent
        found = data_entry_violations(package, self.reads_data_path)
        assert not found, (f"{self.plugin_module} reads the run's data itself; use context.data(), context.rows() "
                           "or context.prepare() (docs/writing-plugins.md, 'The data'):\n  " + "\n  ".join(found))

    def test_registration_imports_nothing_heavy(self) -> None:
        heavy = imported_heavy_modules(
            f"import {self.plugin_module}\nfrom thub.manager import load_registry\nload_registry()"
        )
        assert heavy == [], f"registering {self.plugin_module} imported {heavy}"

    def test_backend_registered_by_plugin(self) -> None:
        registry = self.registry()
        assert self.backend in registry.backends, [f.error for f in registry.failures]
        spec = registry.backends[self.backend]
        assert spec.provenance.plugin != "?"
        assert spec.algorithms, "a backend must run at least one algorithm"

    def test_honoured_parameters_exist(self) -> None:
        registry = self.registry()
        spec = registry.backends[self.backend]
        for algorithm, honoured in spec.algorithms.items():
            fields = param_infos(registry.algorithm(algorithm).load_parameters())
            unknown = sorted(set(honoured) - set(fields))
            assert not unknown, f"{algorithm}: honours parameters that do not exist: {unknown}"
            bad_defaults = sorted(set(spec.defaults_for(algorithm)) - set(fields))
            assert not bad_defaults, f"{algorithm}: defaults for unknown parameters: {bad_defaults}"

    def test_translation_for_samples(self) -> None:
        """Every sample translates to a JSON-serialisable plan that reads each parameter the sample
        sets (a set parameter nobody reads would be silently dropped)."""
        registry = self.registry()
        spec = registry.backends[self.backend]
        assert set(self.samples) >= set(spec.algorithms), "give a sample config for every algorithm"
        for algorithm, sample in [*self.samples.items(), *self.read_samples]:
            native, read, user_set = self._translate_recording(registry, algorithm, sample)
            assert isinstance(native, dict) and native, f"{algorithm}: translation is {native!r}"
            json.dumps(native)  # must be serialisable for --dry-run --json and thub_run.json
            dropped = sorted(user_set - read - self.read_elsewhere - self._consumed_by_core(registry, algorithm))
            assert not dropped, f"{algorithm}: the sample sets {dropped}, which the translation never reads"

    def test_checks_registered(self) -> None:
        """The plugin registers exactly the declared ``checks`` (none is fine when declared: the core's
        ``core.backend-requirements`` already checks ``requirements`` and ``needs_cuda``), each well-formed."""
        from thub.specs import CheckContext, CheckResult

        registry = self.registry()
        spec = registry.backends[self.backend]
        plugin = spec.provenance.plugin
        known = KNOWN_CHECK_TAGS | self.check_tags
        context = CheckContext(backend=self.backend)
        mine = [c for c in registry.checks.values() if c.provenance.plugin == plugin]
        assert self.checks is not None, "declare the plugin's doctor checks: checks = frozenset({...}) (or frozenset())"
        assert {c.id for c in mine} == set(self.checks), f"registered checks {sorted(c.id for c in mine)}"
        for check in mine:
            assert check.id.startswith(f"{plugin}."), f"{check.id}: a check id starts with the plugin name {plugin!r}"
            assert check.title, f"{check.id}: no title"
            unknown = sorted(check.tags - known)
            assert not unknown, f"{check.id}: unknown tags {unknown} (known: {sorted(known)}; set check_tags)"
            unknown_backends = sorted(check.backends - set(registry.backends))
            assert not unknown_backends, f"{check.id}: declared for backends that do not exist: {unknown_backends}"
            if check.applies is not None and not check.applies(context):
                continue  # reported as skip here; run() is not called
            result = check.run(context)
            assert isinstance(result, CheckResult), f"{check.id}: run() returned {result!r}"
            assert result.status in ("ok", "warn", "fail", "skip"), f"{check.id}: status {result.status!r}"
            assert result.summary, f"{check.id}: empty summary"
            assert result.status not in ("warn", "fail") or result.fix, f"{check.id}: {result.status} without a fix"

    def test_backend_requirements_messages(self, monkeypatch: Any) -> None:
        """What ``thub train --backend X`` stops with when a library or the GPU is missing: the core
        check ``core.backend-requirements``, from ``requirements``, ``install`` and ``needs_cuda``."""
        import thub.selection
        from thub.specs import CheckContext

        registry = self.registry()
        spec = registry.backends[self.backend]
        if spec.python or not spec.requirements:
            return
        first = spec.requirements[0]
        monkeypatch.setattr(thub.selection, "cuda_visible", lambda: False)
        monkeypatch.setattr(thub.selection, "requirement_problem",
                            lambda s: f"{s} is not installed" if s == first else None)
        result = registry.checks["core.backend-requirements"].run(CheckContext(backend=self.backend))
        assert result.status == "fail" and f"{first} is not installed" in result.details
        if spec.install:
            assert spec.install in (result.fix or "")
        if spec.needs_cuda:
            assert result.summary == f"backend {spec.name} needs an NVIDIA GPU; none found (and is missing {first})"
            assert "run on a machine with an NVIDIA GPU" in (result.fix or "") and "--backend " in (result.fix or "")
        else:
            assert result.summary == f"backend {spec.name} is missing {first}"

    def test_docs_table_present(self) -> None:
        text = self.readme.read_text()
        spec = self.registry().backends[self.backend]
        honoured = set().union(*spec.algorithms.values())
        missing = sorted(name for name in honoured if f"`{name}`" not in text)
        assert not missing, f"{self.readme} does not document: {missing}"

    def test_no_fallback_literal_repeats_a_declared_default(self) -> None:
        """``params.get("name") or <literal>`` in the plugin's code, for a parameter whose declared
        default is never None, repeats that default in a second place (and hides a drift)."""
        import ast
        import importlib

        registry = self.registry()
        spec = registry.backends[self.backend]
        always: set[str] | None = None
        for algorithm in spec.algorithms:
            infos = param_infos(registry.algorithm(algorithm).load_parameters())
            names = {name for name, info in infos.items()
                     if spec.defaults_for(algorithm).get(name, info.default) is not None}
            always = names if always is None else always & names
        package = Path(importlib.import_module(self.plugin_module).__file__ or "").parent
        found = []
        for source in sorted(package.rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2):
                    continue
                first = node.values[0]
                if (isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr == "get"
                        and isinstance(first.func.value, ast.Name) and first.func.value.id == "params" and first.args
                    and isinstance(first.args[0], ast.Constant) and first.args[0].value in (always or ())):
                    found.append(f"{source.name}:{node.lineno}: {ast.unparse(node)}")
        assert not found, "fallbacks repeating a declared default (read params[name]):\n  " + "\n  ".join(found)

    def test_readme_default_columns_equal_declared_defaults(self) -> None:
        """A README table with a ``default`` column states, for each parameter with a declared
        default (the backend's, else thub's), that value."""
        registry = self.registry()
        spec = registry.backends[self.backend]
        declared: dict[str, Any] = {}
        for algorithm in spec.algorithms:
            for name, info in param_infos(registry.algorithm(algorithm).load_parameters()).items():
                default = spec.defaults_for(algorithm).get(name, info.default)
                if default is not None and not callable(default):
                    declared.setdefault(name, set()).add(json.dumps(default, default=str))
        wrong = []
        for row in _default_column_rows(self.readme.read_text()):
            names, cell = row
            if len(names) != 1 or names[0] not in declared:
                continue
            stated = _cell_value(cell)
            if stated is not None and json.dumps(stated, default=str) not in declared[names[0]]:
                wrong.append(f"{names[0]}: README says {cell.strip()!r}, declared {sorted(declared[names[0]])}")
        assert not wrong, f"{self.readme}: default column differs from the declared defaults:\n  " + "\n  ".join(wrong)


def _default_column_rows(text: str) -> Iterator[tuple[list[str], str]]:
    """(parameter names of the first cell, default cell) of every table whose header has ``default``."""
    column = None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            lowered = [c.lower() for c in cells]
            column = lowered.index("default") if "default" in lowered else -1
            continue
        if column < 0 or set(line) <= set("|-: ") or len(cells) <= column:
            continue
        yield re.findall(r"`([a-z0-9_]+)`", cells[0]), cells[column]


def _cell_value(cell: str) -> Any:
    """The value a default cell states (its first token), or None when it states no plain value."""
    token = cell.strip().split(" (")[0].strip().strip("`")
    lowered = token.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        number = float(token)
    except ValueError:
        return token if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", token) and lowered not in (
            "required", "unset", "off", "none", "on") else None
    return int(number) if number.is_integer() and "." not in token and "e" not in lowered else number
