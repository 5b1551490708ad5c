"""The contract kit (thub.testing.contract) fails when a plugin breaks a promise it checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from thub.testing.contract import BackendContract, RecordingParams, _cell_value, _default_column_rows

pytest.importorskip("thub_plugin_trl")


def test_recording_params_records_every_kind_of_read() -> None:
    params = RecordingParams({"a": 1, "b": None, "c": 3})
    params["a"], params.get("b"), "z" in params
    assert params.read == {"a", "b", "z"}
    list(params.items())
    assert params.read == {"a", "b", "c", "z"}


def test_default_columns_are_parsed() -> None:
    text = "| thub parameter | lib | default |\n|---|---|---|\n| `learning_rate` | `lr` | 1e-5 (backend) |\n" \
           "| `seed` | `seed` | 42 |\n| `a` / `b` | x | off |\n\n| `x` | y |\n"
    rows = list(_default_column_rows(text))
    assert rows == [(["learning_rate"], "1e-5 (backend)"), (["seed"], "42"), (["a", "b"], "off")]
    assert (_cell_value("1e-5 (backend)"), _cell_value("42"), _cell_value("`cosine`"), _cell_value("off"),
            _cell_value("True")) == (1e-5, 42, "cosine", None, True)


class _Trl(BackendContract):
    backend = "trl"
    plugin_module = "thub_plugin_trl"
    _base = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "o"}
    samples = {"sft": _base, "lora_sft": _base, "grpo": {**_base, "reward": ["math"]},
               "lora_grpo": {**_base, "reward": ["math"]}, "dpo": _base, "kto": _base}


def test_a_wrong_readme_default_fails(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("| thub parameter | TRL | default |\n|---|---|---|\n| `learning_rate` | `learning_rate` | 3e-4 "
                      "|\n")
    kit = _Trl()
    kit.readme = readme
    with pytest.raises(AssertionError, match=r"learning_rate: README says '3e-4'"):
        kit.test_readme_default_columns_equal_declared_defaults()
    readme.write_text("| thub parameter | TRL | default |\n|---|---|---|\n| `learning_rate` | `learning_rate` | 2e-5 "
                      "|\n")
    kit.test_readme_default_columns_equal_declared_defaults()


def test_undeclared_checks_and_unread_parameters_fail() -> None:
    kit = _Trl()
    with pytest.raises(AssertionError, match="declare the plugin's doctor checks"):
        kit.test_checks_registered()
    with pytest.raises(AssertionError, match="honoured but never read by translate"):
        kit.test_translation_reads_exactly_the_honoured_parameters()
    # trl reads bnb_4bit_quant_type only beside load_in_4bit (datasets, which core applies, is no example;
    # wandb_entity without wandb_project is refused before any translation: thub.trackers.check_keys)
    kit.samples = {**kit.samples, "lora_sft": {**kit.samples["lora_sft"], "bnb_4bit_quant_type": "nf4"}}
    with pytest.raises(AssertionError, match=r"the sample sets \['bnb_4bit_quant_type'\], which the translation "
                                             r"never"):
        kit.test_translation_for_samples()


def _throwaway_plugin(root: Path, files: dict[str, str], name: str = "thub_plugin_throwaway") -> str:
    """A plugin package ``name`` under ``root`` with ``files`` (file name -> source)."""
    package = root / name
    package.mkdir()
    for name, source in {"__init__.py": "", **files}.items():
        (package / name).write_text(source)
    return package.name


def test_a_plugin_importing_thub_internals_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _throwaway_plugin(tmp_path, {
        "translate.py": "from thub.backend import UsageError\nfrom thub.runner.batching import split_batch\n",
        "runner.py": "def run(context):\n    import thub.data\n    from thub import hookimpl\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    kit = _Trl()
    kit.plugin_module = name
    with pytest.raises(AssertionError) as failure:
        kit.test_imports_only_the_backend_sdk()
    message = str(failure.value)
    assert "thub_plugin_throwaway/translate.py:2: from thub.runner.batching import split_batch" in message
    assert "thub_plugin_throwaway/runner.py:2: import thub.data" in message
    assert "thub_plugin_throwaway/runner.py:3: from thub import hookimpl" in message
    assert "translate.py:1" not in message  # thub.backend is the SDK


def test_the_sdk_and_the_test_kit_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _throwaway_plugin(tmp_path, {
        "translate.py": "from thub.backend import UsageError, split_batch\nfrom thub import backend\nimport thubx\n",
        "test_own.py": "from thub.testing import BackendContract\nfrom thub.testing.contract import sdk_violations\n",
    }, name="thub_plugin_throwaway_ok")
    monkeypatch.syspath_prepend(str(tmp_path))
    kit = _Trl()
    kit.plugin_module = name
    kit.test_imports_only_the_backend_sdk()
    # only test files may use the test kit
    (tmp_path / name / "runner.py").write_text("from thub.testing import BackendContract\n")
    with pytest.raises(AssertionError, match=r"runner.py:1: from thub.testing import BackendContract"):
        kit.test_imports_only_the_backend_sdk()


def test_every_sdk_name_resolves_to_its_defining_module() -> None:
    import importlib

    import thub.backend
    import thub.selection

    for name, module in thub.backend._EXPORTS.items():
        assert getattr(thub.backend, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="the backend SDK exports"):
        thub.backend.batching  # noqa: B018
    assert thub.backend.cuda_visible is thub.selection.cuda_visible


def test_a_runner_reading_data_path_itself_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The data comes from the run context (the rows the parent validated): reading data_path or
    calling thub's readers in a runner fails the kit, naming file and line; translate.py may map
    data_path, and a declared function may read it."""
    name = _throwaway_plugin(tmp_path, {
        "translate.py": "def translate(algorithm, params):\n    return {'data': params['data_path']}\n",
        "runner.py": ("from thub.backend import RunContext, training_rows\n\n\n"
                      "def run(context):\n"
                      "    rows = load(context.params['data_path'])\n"
                      "    path = context.params.get('data_path')\n"
                      "    return tasks(context.params)\n\n\n"
                      "def tasks(params):\n"
                      "    return open(params['data_path']).read()\n"),
    }, name="thub_plugin_throwaway_data")
    monkeypatch.syspath_prepend(str(tmp_path))
    kit = _Trl()
    kit.plugin_module = name
    with pytest.raises(AssertionError) as failure:
        kit.test_reads_data_through_the_run_context()
    message = str(failure.value)
    assert "runner.py:1: from thub.backend import RunContext, training_rows" in message
    assert "runner.py:5: context.params['data_path']" in message
    assert "runner.py:6: context.params.get('data_path')" in message
    assert "runner.py:11: params['data_path']" in message
    assert "translate.py" not in message
    (tmp_path / name / "runner.py").write_text(
        "def run(context):\n    return tasks(context.params) or context.rows()\n\n\n"
        "def tasks(params):\n    return open(params['data_path']).read()\n")
    kit.reads_data_path = frozenset({"tasks"})
    kit.test_reads_data_through_the_run_context()


def test_the_backend_plugins_read_their_data_through_the_run_context() -> None:
    """Every backend plugin here: no data_path read, no thub data reader (art's rollout tasks declared)."""
    from thub.testing.contract import data_entry_violations

    plugins = sorted(Path(__file__).parents[1].glob("thub-plugin-*/src/thub_plugin_*"))
    assert len(plugins) >= 8
    found = {package.name: data_entry_violations(package, frozenset({"load_tasks"}) if package.name ==
                                                 "thub_plugin_art" else frozenset()) for package in plugins}
    assert found == {package.name: [] for package in plugins}


def test_writing_plugins_documents_every_sdk_name() -> None:
    import thub.backend

    text = (Path(__file__).parents[1] / "docs" / "writing-plugins.md").read_text()
    missing = [name for name in thub.backend.__all__ if f"`{name}`" not in text]
    assert not missing, f"docs/writing-plugins.md does not document {missing}"


def test_honoured_means_used_passes_a_real_plugin_and_fails_a_deleted_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    """The differential test: trl's translation passes; the same translation with validation_frequency's
    effect deleted (eval_steps no longer set, as llamafactory's once was) fails on validation_frequency,
    although read_elsewhere declares it (no exemption from "changing it must change the plan")."""
    from thub.manager import Registry

    kit = _Trl()
    kit.test_every_honoured_parameter_changes_the_native_configuration()
    real = Registry.translate

    def without_eval_steps(self: Registry, algorithm: str, backend: str, params: Any) -> Any:
        native = real(self, algorithm, backend, params)
        native["config"].pop("eval_steps", None)
        return native

    monkeypatch.setattr(Registry, "translate", without_eval_steps)
    kit.read_elsewhere = frozenset({"validation_frequency"})
    with pytest.raises(AssertionError) as failure:
        kit.test_every_honoured_parameter_changes_the_native_configuration()
    lines = [line.strip() for line in str(failure.value).splitlines()[1:] if line.startswith("  ")]
    assert [line.split(":")[:2] for line in lines] == [["sft", " validation_frequency"],
                                                        ["lora_sft", " validation_frequency"]]
    assert "changes nothing in the native configuration" in lines[0]


def test_differential_values_come_from_the_field_and_respect_its_bounds() -> None:
    from thub.testing.differential import candidate_values
    from thub_builtins.params import SFTParams

    fields = SFTParams.model_fields
    assert candidate_values("overlong", fields["overlong"]) == ["truncate", "drop", "error"]
    assert candidate_values("packing", fields["packing"]) == [True, False]
    assert all(0 <= v < 1 for v in candidate_values("validation_split", fields["validation_split"]))
    assert 0 not in candidate_values("save_steps", fields["save_steps"])  # ge=1
    assert candidate_values("save_steps", fields["save_steps"], {"save_steps": (10, 20)}) == [10, 20]
