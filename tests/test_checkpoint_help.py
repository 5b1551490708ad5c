"""``thub checkpoint SUB --help`` reads as prose: the summary and the docstring's paragraphs, dedented."""

from __future__ import annotations

import re

import pytest

from thub.cli.checkpoint import _modules, checkpoint


@pytest.mark.parametrize("name", _modules())
def test_every_subcommand_help_has_no_indentation_left_mid_sentence(name: str) -> None:
    from click.testing import CliRunner

    done = CliRunner().invoke(checkpoint, [name, "--help"])
    assert done.exit_code == 0, done.output
    prose = done.output.split("Options:")[0]
    assert not re.search(r"\S {3,}\S", prose), prose  # the docstring's own indentation, kept by mistake
