"""Import cost is a contract: the CLI starts without any training library."""

from __future__ import annotations

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
        ("train", "grpo", "--dry-run", "--json", "--model-path", "m", "--data-path", "d.jsonl", "--ckpt-output-dir", "o"),
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
    probe = _cli("--help") + "import sys\nassert 'thub_builtins.params' not in sys.modules, 'params loaded'\n"
    assert imported_heavy_modules(probe) == []


def test_help_does_not_import_pydantic() -> None:
    # pydantic costs ~0.1 s at import: `thub --help` must list commands without it
    probe = _cli("--help") + "import sys\nassert 'pydantic' not in sys.modules, 'pydantic imported'\n"
    assert imported_heavy_modules(probe) == []
