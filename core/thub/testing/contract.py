"""The contract every backend plugin's tests subclass (langchain-tests style).

    class TestTrlContract(BackendContract):
        backend = "trl"
        plugin_module = "thub_plugin_trl"
        readme = Path(__file__).parents[1] / "README.md"
        samples = {"sft": {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o"}}
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from thub.config.fields import param_infos
from thub.doctor.runner import PREFLIGHT_TAG, SLOW_TAG
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


class BackendContract:
    """Checks a backend plugin keeps thub's promises. Subclass and set the class attributes."""

    backend: ClassVar[str]
    plugin_module: ClassVar[str]
    readme: ClassVar[Path]
    samples: ClassVar[dict[str, dict[str, Any]]] = {}
    #: tags of the plugin's own, beyond :data:`KNOWN_CHECK_TAGS`
    check_tags: ClassVar[frozenset[str]] = frozenset()

    def registry(self) -> Registry:
        return load_registry()

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
        from thub.config.resolve import resolve

        registry = self.registry()
        spec = registry.backends[self.backend]
        assert set(self.samples) >= set(spec.algorithms), "give a sample config for every algorithm"
        for algorithm, sample in self.samples.items():
            resolved = resolve(registry, algorithm, backend=self.backend, flags=sample, environ={})
            native = registry.translate(algorithm, self.backend, resolved.values())
            assert native is not None, f"{algorithm}: no translation"
            json.dumps(native)  # must be serialisable for --dry-run --json and thub_run.json

    def test_checks_registered(self) -> None:
        """Every check the plugin registers is well-formed (registering none is fine: the core's
        ``core.backend-requirements`` already checks ``requirements`` and ``needs_cuda``)."""
        from thub.specs import CheckContext, CheckResult

        registry = self.registry()
        spec = registry.backends[self.backend]
        plugin = spec.provenance.plugin
        known = KNOWN_CHECK_TAGS | self.check_tags
        context = CheckContext(backend=self.backend)
        for check in (c for c in registry.checks.values() if c.provenance.plugin == plugin):
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
