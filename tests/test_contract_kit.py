"""The contract kit (thub.testing.contract) fails when a plugin breaks a promise it checks."""

from __future__ import annotations

from pathlib import Path

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
               "lora_grpo": {**_base, "reward": ["math"]}}


def test_a_wrong_readme_default_fails(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("| thub parameter | TRL | default |\n|---|---|---|\n| `learning_rate` | `learning_rate` | 3e-4 |\n")
    kit = _Trl()
    kit.readme = readme
    with pytest.raises(AssertionError, match=r"learning_rate: README says '3e-4'"):
        kit.test_readme_default_columns_equal_declared_defaults()
    readme.write_text("| thub parameter | TRL | default |\n|---|---|---|\n| `learning_rate` | `learning_rate` | 2e-5 |\n")
    kit.test_readme_default_columns_equal_declared_defaults()


def test_undeclared_checks_and_unread_parameters_fail() -> None:
    kit = _Trl()
    with pytest.raises(AssertionError, match="declare the plugin's doctor checks"):
        kit.test_checks_registered()
    with pytest.raises(AssertionError, match="honoured but never read by translate"):
        kit.test_translation_reads_exactly_the_honoured_parameters()
    kit.samples = {**kit.samples, "sft": {**kit.samples["sft"], "datasets": ["d.jsonl"]}}
    with pytest.raises(AssertionError, match=r"the sample sets \['datasets'\], which the translation never reads"):
        kit.test_translation_for_samples()
