"""``thub env``: the copy-paste environment report, with secrets redacted, with or without torch."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from thub.cli.main import cli
from thub.doctor.envreport import REDACTED, redact, relevant_env
from thub.manager import set_registry

SECRETS = {
    "HF_TOKEN": "hf_supersecretvalue1",
    "WANDB_API_KEY": "wandb-supersecretvalue2",
    "THUB_DB_PASSWORD": "supersecretvalue3",
    "MLFLOW_TRACKING_SECRET": "supersecretvalue4",
    "AWS_SECRET_ACCESS_KEY": "supersecretvalue5",  # not a reported prefix: not shown at all
    "PIP_INDEX_URL": "https://user:supersecretvalue6@pypi.example.com/simple",
}
PLAIN = {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0", "PET_NNODES": "2", "SLURM_JOB_ID": "123",
         "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TMPDIR": "/tmp"}


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    set_registry(None)
    yield
    set_registry(None)


def env_cmd(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["env", *args], env=env, catch_exceptions=False)


def test_text_report() -> None:
    result = env_cmd("--no-torch", env=PLAIN)
    assert result.exit_code == 0
    out = result.stdout
    assert out.startswith("Copy-and-paste")
    for heading in ("thub:", "Python:", "Platform:", "Packages:", "torch:", "NVIDIA driver:",
                    "Environment variables:"):
        assert heading in out
    assert "- version: 0.1.0" in out and f"- version: {sys.version.split()[0]}" in out
    assert "- click: " in out
    assert "- NCCL_DEBUG: INFO" in out and "- PET_NNODES: 2" in out


def test_secrets_are_redacted_in_text_and_json() -> None:
    for args in (("--no-torch",), ("--no-torch", "--json")):
        result = env_cmd(*args, env={**SECRETS, **PLAIN})
        assert result.exit_code == 0
        for value in SECRETS.values():
            assert "supersecretvalue" not in result.stdout, value
    data = json.loads(env_cmd("--no-torch", "--json", env={**SECRETS, **PLAIN}).stdout)
    shown = data["environment"]
    assert shown["HF_TOKEN"] == shown["WANDB_API_KEY"] == shown["THUB_DB_PASSWORD"] == REDACTED
    assert shown["MLFLOW_TRACKING_SECRET"] == REDACTED
    assert "AWS_SECRET_ACCESS_KEY" not in shown
    assert shown["PIP_INDEX_URL"] == f"https://{REDACTED}@pypi.example.com/simple"
    assert shown["CUDA_VISIBLE_DEVICES"] == "0" and shown["SLURM_JOB_ID"] == "123"


def test_redaction_rules() -> None:
    assert redact("SOME_API_KEY", "x") == REDACTED
    assert redact("hf_token", "x") == REDACTED
    assert redact("NCCL_SOCKET_IFNAME", "eth0") == "eth0"
    assert relevant_env({"HOME": "/root", "THUB_X": "1", "TORCH_HOME": "/t"}) == {"THUB_X": "1", "TORCH_HOME": "/t"}


def test_json_schema() -> None:
    data = json.loads(env_cmd("--json").stdout)
    assert data["schema_version"] == 1
    assert data["thub"]["version"] == "0.1.0"
    assert any(p["name"] == "thub_builtins.checks" for p in data["thub"]["plugins"])
    assert data["python"]["version"] == sys.version.split()[0]
    assert "pluggy" in data["packages"]
    torch = data["torch"]
    if torch["installed"]:
        assert torch["version"] and "cuda_available" in torch
    assert isinstance(data["environment"], dict)


def test_works_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes find_spec report torch as absent and `import torch` fail.
    monkeypatch.setitem(sys.modules, "torch", None)
    result = env_cmd("--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["torch"] == {"installed": False}
    text = env_cmd().stdout
    assert "- installed: False" in text


def test_reports_fake_nvidia_driver(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$*" in
          *query-gpu*) echo "0, NVIDIA H200, 570.86.15, 143771, 9.0" ;;
          *) echo "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |" ;;
        esac
    """))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    result = env_cmd("--no-torch", "--json", env={"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    nvidia = json.loads(result.stdout)["nvidia"]
    assert nvidia["driver_version"] == "570.86.15" and nvidia["cuda_version"] == "12.8"
    assert nvidia["gpus"][0]["name"] == "NVIDIA H200"


def test_no_torch_flag_does_not_import_torch() -> None:
    code = textwrap.dedent("""
        import sys
        from click.testing import CliRunner
        from thub.cli.main import cli
        r = CliRunner().invoke(cli, ["env", "--no-torch"])
        assert r.exit_code == 0, r.output
        print("torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
