"""Import cost is a contract: the CLI starts without any training library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.testing import imported_heavy_modules


def _cli(*args: str) -> str:
    return (
        "import sys\n"
        f"sys.argv = ['thub', *{list(args)!r}]\n"
        "from thub.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("plugins",),
        ("plugins", "--json"),
        ("backends",),
        ("train", "--help"),
        ("train", "sft", "--help"),
        ("train", "sft", "--dry-run", "--model-path", "m", "--data-path", "d.jsonl", "--ckpt-output-dir", "out"),
        ("train", "grpo", "--dry-run", "--json", "--model-path", "m", "--data-path", "d.jsonl", "--ckpt-output-dir",
         "o"),
        ("config", "schema", "lora_sft"),
    ],
)
def test_cli_imports_no_training_library(args: tuple[str, ...]) -> None:
    assert imported_heavy_modules(_cli(*args)) == []


def test_import_thub_is_cheap() -> None:
    heavy = imported_heavy_modules("import thub, thub.manager; thub.manager.get_registry()\nimport pydantic")
    assert heavy == []


def test_help_does_not_build_parameter_models() -> None:
    # pydantic model classes are built only for the command that needs them
    probe = _cli("--help") + ("import sys\nassert 'thub_builtins.params' not in sys.modules, 'params loaded'\n"
                              "assert 'thub.params' not in sys.modules, 'BaseParams loaded'\n")
    assert imported_heavy_modules(probe) == []


def test_help_does_not_import_pydantic() -> None:
    # pydantic costs ~0.1 s at import: `thub --help` must list commands without it
    probe = _cli("--help") + "import sys\nassert 'pydantic' not in sys.modules, 'pydantic imported'\n"
    assert imported_heavy_modules(probe) == []


# Every module `thub --help` may import beyond the standard library and click (issue 18: the
# listing once imported 46 thub modules, doctor checks, data formats, yaml and every plugin).
HELP_MODULES = {"thub", "thub._version", "thub.errors", "thub.cli", "thub.cli.main", "thub.cli.plugin_commands",
                "thub.discovery"}
# What `thub train sft --help` must still not import: doctor checks, data handling, yaml, rich.
TRAIN_HELP_FORBIDDEN = ("thub_builtins.checks.", "thub.data", "thub.envs.check", "thub.doctor", "yaml", "rich",
                        "thub.runner.child", "thub.insight")


def _modules_after(args: tuple[str, ...], cache: Path) -> list[str]:
    """Modules outside the standard library that ``thub ARGS`` leaves in ``sys.modules``."""
    probe = _cli(*args) + (
        "import sys, json\n"
        "std = set(sys.stdlib_module_names)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] not in std and not m.startswith('_'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")} | {"XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_imports_only_the_listed_modules(tmp_path: Path) -> None:
    cold = _modules_after(("--help",), tmp_path)  # first run: finds plugins and their commands, fills the cache
    assert "thub.manager" in cold
    warm = _modules_after(("--help",), tmp_path)
    outside = [m for m in warm if m.split(".")[0] != "click" and m not in HELP_MODULES]
    assert outside == [], f"`thub --help` imported {outside}; allowed: {sorted(HELP_MODULES)} and click"
    assert (tmp_path / "thub" / "plugin-commands.json").exists()


def test_train_help_imports_no_checks_data_or_yaml(tmp_path: Path) -> None:
    cold = _modules_after(("train", "sft", "--help"), tmp_path)  # builds the page: registry, parameter model
    bad = [m for m in cold if m.startswith(TRAIN_HELP_FORBIDDEN)]
    assert bad == [], f"`thub train sft --help` imported {bad}"
    assert "thub_builtins.params" in cold  # the options come from the parameter model
    warm = _modules_after(("train", "sft", "--help"), tmp_path)  # the page from the cache
    allowed = HELP_MODULES | {"thub.envs", "thub.envs.paths"}  # managed environments' manifests are in the key
    outside = [m for m in warm if m.split(".")[0] != "click" and m not in allowed]
    assert outside == [], f"a cached `thub train sft --help` imported {outside}"


def test_cached_train_help_is_the_page_click_builds(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")} | {
        "XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "100"}

    def page(*args: str, **extra: str) -> str:
        done = subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                              env=env | extra, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    built = page("train", "lora_sft", "--help", THUB_NOT_A_PARAMETER="1")  # any THUB_* bypasses the cache
    assert page("train", "lora_sft", "--help") == built  # written to the cache
    assert (tmp_path / "thub" / "help-train-lora_sft.json").exists()
    assert page("train", "lora_sft", "-h") == built  # read from it
    assert "--lora-r" in built and "-h, --help" in built


def test_listed_short_help_is_each_commands_own(thub_cli) -> None:
    import click

    from thub.cli.main import cli
    from thub.manager import get_registry

    # one definition: the registration's short help is what `thub --help` lists and what the
    # command itself says (its `--help` page starts with it); the docstring does not repeat it
    listed = thub_cli("--help").stdout
    commands = get_registry().commands
    assert {"train", "doctor", "runs", "clusters"} <= set(commands)
    for name, spec in commands.items():
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        assert spec.short_help == command.get_short_help_str(limit=300), f"{name!r}: short help differs"
        assert command.help.startswith(spec.short_help) and command.help.count(spec.short_help) == 1, name
        # hidden: Training Hub's subcommands (thub_builtins.training_hub.command), listed on one line of their own
        assert f"  {name} " in listed or (command.hidden and "Training Hub's CLI: sft" in listed), name
