"""A parameter no installed backend honours for an algorithm says so in that algorithm's --help."""

from __future__ import annotations

import re

import pytest

from thub.manager import load_registry


def _help_of(thub_cli, algorithm: str) -> dict[str, str]:
    text = thub_cli("train", algorithm, "--help").stdout
    options = re.split(r"\n  (?=--)", text)
    return {block.split()[0].split("/")[0]: " ".join(block.split()) for block in options if block.startswith("--")}


def test_unhonoured_parameters_are_marked_per_algorithm(thub_cli) -> None:
    registry = load_registry()
    if not registry.backends_for("osft") or "trl" not in registry.backends:
        pytest.skip("needs the mini-trainer and trl plugins")
    osft, sft = _help_of(thub_cli, "osft"), _help_of(thub_cli, "sft")
    assert "honoured by: none installed" in osft["--beta1"]  # mini-trainer fixes AdamW's betas for osft
    assert "honoured by: none installed" not in sft["--beta1"]
    assert "honoured by: none installed" not in osft["--learning-rate"]
    assert "honoured by: none installed" not in osft["--model-path"]  # thub's own


def test_the_schema_says_so_too(thub_cli) -> None:
    if not load_registry().backends_for("osft"):
        pytest.skip("needs the mini-trainer plugin")
    properties = thub_cli("config", "schema", "osft").json()["properties"]
    assert properties["beta1"]["description"].endswith("Honoured by: none installed.")
    assert "none installed" not in properties["learning_rate"].get("description", "")
