"""Every starting config under examples/configs is a valid run (torchtune's named, tested configs):
its dry run on trl resolves, passes the data gate and translates, for the algorithm it is named after."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from thub.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "examples" / "configs").glob("*.yaml"))


def test_there_is_a_config_per_demo() -> None:
    assert {path.stem for path in CONFIGS} >= {"sft", "lora_sft", "grpo", "dpo"}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.stem)
def test_the_config_dry_runs(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the configs name paths relative to the checkout, as the README runs them
    result = CliRunner().invoke(cli, ["train", config.stem, "--backend", "trl", "--config", str(config),
                                      # the tiny model itself: the dpo demo starts from the SFT demo's output
                                      "--model-path", str(ROOT / "examples" / "tiny"),
                                      "--ckpt-output-dir", str(tmp_path / "run"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "run").exists()
