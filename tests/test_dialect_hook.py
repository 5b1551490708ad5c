"""The parameter-dialect hook (issue 36): another tool's names, CLI and API as a plugin registers them.

Training Hub's dialect is the built-in ``thub_builtins.training_hub``, registered through
``thub_register_dialects`` like any third-party one; ``tests/plugins/thub-plugin-axolotl-names``
adds a second one from outside thub with zero core edits. A resolve with thub's own names imports
no dialect's module; one holding a dialect's name consults it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import thub
from thub.errors import ThubError, UsageError
from thub.hookspecs import hookimpl
from thub.specs import DialectSpec, load_object

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugins" / "thub-plugin-axolotl-names"
CHAT = str(ROOT / "examples" / "data" / "chat.jsonl")
pytestmark = pytest.mark.needs_module("trl")

_PROBE = """
import json, sys
from thub.config.resolve import resolve
from thub.manager import get_registry
registry = get_registry()
flags = {{"model_path": "m", "data_path": {chat!r}, "ckpt_output_dir": "o", **json.loads(sys.argv[1])}}
resolve(registry, "sft", backend="trl", flags=flags)
dialect_modules = [name for name in sys.modules if name.startswith("thub_builtins.training_hub.")]
print(json.dumps({{"dialects": sorted(registry.dialects), "loaded": sorted(dialect_modules)}}))
"""


def _probe(**flags: Any) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(chat=CHAT), json.dumps(flags)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_plain_resolve_imports_no_dialect() -> None:
    plain = _probe(learning_rate=1e-5, max_seq_len=512)
    assert plain["dialects"] == ["training-hub"]
    assert plain["loaded"] == [], plain  # the plugin's registration only: no rules, no API, no CLI
    # the check can fail: a Training Hub name loads the dialect's rules
    spoken = _probe(random_seed=7)
    assert "thub_builtins.training_hub.rules" in spoken["loaded"] and "thub_builtins.training_hub.names" in spoken[
        "loaded"], spoken
    # a thub name whose Training Hub value the dialect converts (DialectSpec.converts) consults it too
    assert "thub_builtins.training_hub.names" in _probe(rdzv_id=5)["loaded"]


def test_the_converted_names_are_the_rule_tables_own() -> None:
    from thub_builtins.training_hub import DIALECT, rules

    assert DIALECT.converts == {name for name, rule in rules.RULES.items() if rule.kind == "same" and rule.convert}


def test_the_face_looks_the_dialects_api_up(thub_plugin) -> None:
    registry = thub_plugin()
    spec = registry.dialects["training-hub"]
    assert spec.provenance.plugin == "thub_builtins.training_hub"
    for name, target in spec.api.items():
        assert getattr(thub, name) is load_object(target), name
    assert {"sft", "gepa", "TrainingHubCallback"} <= set(spec.api)


def test_without_the_dialect_its_names_are_unknown(tmp_path: Path) -> None:
    env = {**os.environ, "THUB_DISABLE_PLUGINS": "thub_builtins.training_hub"}
    face = subprocess.run([sys.executable, "-c", "import thub; thub.sft"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert face.returncode == 1 and "no installed plugin provides it" in face.stderr, face.stderr
    config = tmp_path / "th.yaml"
    config.write_text(yaml.safe_dump({"model_path": "m", "data_path": CHAT, "ckpt_output_dir": "o",
                                      "max_batch_len": 4096}, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--config", str(config),
                           "--dry-run"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and f"{config}:4: unknown parameter 'max_batch_len'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


class _Leaky:
    """A dialect whose rules forget to translate one of their names."""

    @staticmethod
    def accepted_names(algorithm: str, infos: Any) -> list[str]:
        return ["leaky_rate"]

    @staticmethod
    def translate_layers(algorithm: str, layers: list[Any], infos: Any) -> tuple[list[Any], list[str]]:
        return layers, []


class _LeakyPlugin:
    @hookimpl
    def thub_register_dialects(self, register):
        register(DialectSpec("leaky", "forgets a name", f"{__name__}:_Leaky"))


class _Duplicate:
    @hookimpl
    def thub_register_dialects(self, register):
        register(DialectSpec("training-hub", "a second one of the same name", f"{__name__}:_Leaky"))


class _Broken:
    @hookimpl
    def thub_register_dialects(self, register):
        register(DialectSpec("broken", "rules that do not import", "no_such_module_for_thub:rules"))


def test_a_dialect_that_leaves_a_name_untranslated_is_named(thub_plugin) -> None:
    thub_plugin(("leaky", _LeakyPlugin()))
    with pytest.raises(ThubError) as caught:
        thub.dry_run("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir="o", leaky_rate=1)
    assert "parameter dialect leaky (leaky) left 'leaky_rate' untranslated" in str(caught.value)


def test_a_duplicate_dialect_name_is_an_error_naming_both(thub_plugin) -> None:
    registry = thub_plugin(("dup", _Duplicate()))
    failure = next(f for f in registry.failures if f.name == "dup")
    assert failure.stage == "register dialects"
    assert "'training-hub' is already registered by thub_builtins.training_hub" in failure.error
    assert registry.dialects["training-hub"].provenance.plugin == "thub_builtins.training_hub"


def test_a_dialect_whose_rules_do_not_import_is_named_not_a_traceback(thub_plugin) -> None:
    thub_plugin(("broken", _Broken()))
    plain = thub.dry_run("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir="o")
    assert plain["parameters"]["model_path"]["value"] == "m"  # thub's own names never load a dialect
    with pytest.raises(ThubError) as caught:
        thub.dry_run("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir="o", not_a_name=1)
    assert "parameter dialect 'broken' (broken): its rules no_such_module_for_thub:rules could not be loaded" \
        in str(caught.value)


# --- a dialect from outside thub ----------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin pip-installed (no dependencies) into a folder of its own, as test_outside_plugin does."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(PLUGIN)], check=True, capture_output=True, text=True)
    return target


def _thub(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    env.pop("THUB_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)


def test_the_outside_plugin_imports_only_public_thub_modules() -> None:
    import ast

    public = {"thub", "thub.backend", "thub.specs", "thub.params"}
    for source in (PLUGIN / "src" / "thub_plugin_axolotl_names").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("thub"):
                assert node.module in public, f"{source.name}: {node.module}"


def test_an_outside_dialect_is_honoured_by_train_config(installed: Path, tmp_path: Path) -> None:
    config = tmp_path / "axolotl.yaml"
    config.write_text(yaml.safe_dump({"base_model": "m", "sequence_len": 256, "data_path": CHAT,
                                      "ckpt_output_dir": str(tmp_path / "run"), "random_seed": 7},
                                     sort_keys=False))
    done = _thub(installed, "train", "sft", "--backend", "trl", "--config", str(config), "--dry-run", "--json",
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    params = json.loads(done.stdout)["parameters"]
    assert params["model_path"] == {"value": "m", "source": f"{config}:1, axolotl name base_model → model_path"}
    assert params["max_seq_len"]["value"] == 256 and "axolotl name sequence_len" in params["max_seq_len"]["source"]
    # a Training Hub name in the same file: both dialects translate, each its own names
    assert params["seed"] == {"value": 7, "source": f"{config}:5, training-hub name random_seed → seed"}
    listed = json.loads(_thub(installed, "plugins", "--json", cwd=tmp_path).stdout)
    mine = next(p for p in listed["plugins"] if p["name"] == "axolotl-names")
    assert mine["registered"] == {"dialects": ["axolotl-names"]}

    # its refusals: exit 2 naming the file and line, nothing written
    config.write_text(yaml.safe_dump({"base_model": "m", "data_path": CHAT, "ckpt_output_dir": str(tmp_path / "r2"),
                                      "adapter": "lora"}, sort_keys=False))
    done = _thub(installed, "train", "sft", "--backend", "trl", "--config", str(config), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{config}:4: axolotl's adapter is not supported by thub: LoRA is its own algorithm" in done.stderr
    config.write_text(yaml.safe_dump({"base_model": "m", "model_path": "n", "data_path": CHAT,
                                      "ckpt_output_dir": str(tmp_path / "r3")}, sort_keys=False))
    done = _thub(installed, "train", "sft", "--backend", "trl", "--config", str(config), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2 and "base_model and model_path both set model_path" in done.stderr, done.stderr
    assert not (tmp_path / "r2").exists() and not (tmp_path / "r3").exists()


def test_the_api_takes_an_outside_dialects_names_too(installed: Path, tmp_path: Path) -> None:
    probe = ("import json, thub\n"
             f"plan = thub.dry_run('sft', backend='trl', base_model='m', data_path={CHAT!r}, ckpt_output_dir='o')\n"
             "print(json.dumps(plan['parameters']['model_path']))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(installed), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"value": "m", "source": "api base_model, axolotl name base_model → model_path"}


def test_usage_errors_stay_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown parameter 'max_batch_lenn'.*did you mean 'max_batch_len'"):
        thub.dry_run("sft", backend="trl", model_path="m", data_path=CHAT, ckpt_output_dir="o", max_batch_lenn=1)
