"""thub install / envs, fast part: plans, the conflict check, manifests and listing (no installs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thub.envs.catalog import resolve_source
from thub.envs.manifest import Manifest, list_manifests
from thub.envs.planner import DistInfo, cuda_packages, find_conflicts, plan_managed

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "plugins"


def thub(*args: str, data_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update({"THUB_DATA_DIR": str(data_dir), **(env or {})})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=120)


def fake_env(data_dir: Path, name: str = "echo", backend: str = "echo") -> Manifest:
    """A managed environment whose interpreter is this one (enough for listing and translation)."""
    env = data_dir / "envs" / name
    env.mkdir(parents=True)
    (env / "requirements.lock").write_text("six==1.16.0\n")
    manifest = Manifest(env / "thub-env.json", {
        "schema_version": 1, "name": name, "path": str(env), "python": sys.executable,
        "python_version": "3.11.7", "site_packages": "/nonexistent", "installer": "pip", "torch": None,
        "lock": "requirements.lock", "lock_sha256": None, "thub": {"version": "0.1.0"},
        "plugins": [{"name": backend, "distribution": f"thub-plugin-{backend}", "version": "0.1.0"}],
        "backends": [{
            "name": backend, "summary": "fixture",
            "algorithms": {"sft": ["model_path", "data_path", "ckpt_output_dir"]},
            "runner": "x:run", "requirements": ["six==1.16.0"], "installed": {"six": "1.16.0"},
            "library": {"name": "six", "version": "1.16.0"}, "needs_cuda": False, "priority": -5, "defaults": {},
            "launcher": "python", "docs": None, "plugin": backend, "distribution": f"thub-plugin-{backend}",
            "version": "0.1.0",
        }],
    })
    manifest.write()
    return manifest


def test_dry_run_prints_exact_commands(tmp_path: Path) -> None:
    done = thub("install", "trl", "--into", "managed", "--installer", "pip", "--torch", "torch==2.13.0+cpu",
                "--dry-run", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    env = tmp_path / "envs" / "trl"
    py = env / "bin" / "python"
    lines = done.stdout.splitlines()
    assert f"{sys.executable} -m venv {env}" in lines
    assert f"{py} -m pip install torch==2.13.0+cpu" in lines
    install = next(line for line in lines if line.startswith(f"{py} -m pip install -c "))
    assert f"-c {env / 'constraints.txt'}" in install and str(ROOT / "thub-plugin-trl") in install
    assert f"{py} -m pip freeze --all > {env / 'requirements.lock'}" in lines
    assert not env.exists(), "a dry run creates nothing"


def test_dry_run_json_and_catalog_extras(tmp_path: Path) -> None:
    done = thub("install", "mini-trainer", "--into", "managed", "--installer", "pip", "--torch", "2.13.0+cpu",
                "--dry-run", "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["plans"][0]
    assert plan["environment"] == "mini-trainer" and plan["torch"] == "torch==2.13.0+cpu"
    assert plan["sources"] == [f"{ROOT / 'thub-plugin-minitrainer'}[mini-trainer]"]
    assert not any("cuda" in " ".join(c) for c in plan["commands"]), "GPU extras only with --gpu"
    gpu = json.loads(thub("install", "mini-trainer", "--into", "managed", "--gpu", "--dry-run", "--json",
                          data_dir=tmp_path).stdout)["plans"][0]
    assert gpu["sources"] == [f"{ROOT / 'thub-plugin-minitrainer'}[mini-trainer,cuda]"]


def test_unknown_backend_is_a_usage_error(tmp_path: Path) -> None:
    done = thub("install", "no such thing!", "--dry-run", data_dir=tmp_path)
    assert done.returncode == 2 and "unknown backend" in done.stderr


def test_sources() -> None:
    folder = resolve_source(str(FIXTURES / "thub-plugin-echo"))
    assert (folder.name, folder.distribution, folder.local) == ("echo", "thub-plugin-echo", True)
    assert resolve_source("minitrainer").name == "mini-trainer"
    req = resolve_source("thub-plugin-foo>=1", extras=("x",), package=True)
    assert (req.name, req.local, req.argument()) == ("foo", False, "thub-plugin-foo[x]>=1")


def test_plan_uses_pip_for_torch_even_with_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THUB_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: "/usr/bin/uv" if name == "uv" else None)
    plan = plan_managed([resolve_source("trl")], torch="torch==2.13.0+cpu")
    assert plan.installer == "uv"
    assert plan.steps[0].argv[:2] == ["uv", "venv"]
    assert plan.steps[1].argv[1:] == ["-m", "pip", "install", "torch==2.13.0+cpu"]
    assert plan.steps[2].argv[:3] == ["uv", "pip", "install"] and "-c" in plan.steps[2].argv


def _dist(name: str, version: str, *requires: str, plugin: bool = False) -> DistInfo:
    return DistInfo(name, version, list(requires), plugin)


def test_conflict_names_both_pins() -> None:
    installed = {
        "thub": _dist("thub", "0.1.0", plugin=True),
        "thub-plugin-unsloth": _dist("thub-plugin-unsloth", "0.1.0", "unsloth>=2026.1", plugin=True),
        "unsloth": _dist("unsloth", "2026.10.9", "datasets<5.0.0,>=3.4.1", "trl<=1.15.0"),
        "datasets": _dist("datasets", "4.8.5"),
        "trl": _dist("trl", "1.15.0"),
    }
    planned = {
        "thub-plugin-minitrainer": _dist("thub-plugin-minitrainer", "0.1.0", "rhai-innovation-mini-trainer>=0.9"),
        "rhai-innovation-mini-trainer": _dist("rhai-innovation-mini-trainer", "0.9.0", "datasets>=5.0.0"),
        "datasets": _dist("datasets", "5.2.0"),
    }
    conflicts = find_conflicts(installed, planned)
    assert len(conflicts) == 1
    text = conflicts[0].message()
    assert "datasets<5.0.0,>=3.4.1 is required by unsloth 2026.10.9, needed by thub-plugin-unsloth" in text
    assert "datasets 5.2.0 (now 4.8.5)" in text and "rhai-innovation-mini-trainer: datasets>=5.0.0" in text


def test_no_conflict_when_pins_agree_or_were_already_broken() -> None:
    installed = {
        "thub-plugin-a": _dist("thub-plugin-a", "1", "six==1.16.0", "extra-lib; extra == 'x'", plugin=True),
        "six": _dist("six", "1.16.0"),
    }
    assert find_conflicts(installed, {"six": _dist("six", "1.16.0")}) == []
    # the extra 'x' is not in use (extra-lib missing), so its pins do not bind
    installed["thub-plugin-a"].requires.append("packaging<20; extra == 'x'")
    assert find_conflicts(installed, {"packaging": _dist("packaging", "24")}) == []


def test_cuda_packages_detected() -> None:
    planned = {"torch": _dist("torch", "2.14.1", "nvidia-cublas==13.1; platform_system == 'Linux'"),
               "nvidia-cublas": _dist("nvidia-cublas", "13.1"), "six": _dist("six", "1.17.0")}
    assert cuda_packages(planned) == ["nvidia-cublas 13.1", "torch 2.14.1 (CUDA build)"]
    assert cuda_packages({"torch": _dist("torch", "2.13.0+cpu")}) == []


def test_managed_backend_listed_with_location_and_translated_there(tmp_path: Path) -> None:
    fake_env(tmp_path)
    done = thub("backends", "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    echo = next(b for b in json.loads(done.stdout)["backends"] if b["name"] == "echo")
    assert echo["environment"] == "echo" and echo["path"] == str(tmp_path / "envs" / "echo")
    assert echo["python"] == sys.executable and echo["requirements"] == ["six==1.16.0"]
    trl = next(b for b in json.loads(done.stdout)["backends"] if b["name"] == "trl")
    assert trl["environment"] == "current"
    plugins = json.loads(thub("plugins", "--json", data_dir=tmp_path).stdout)
    assert plugins["managed"][0]["environment"] == "echo"
    # THUB_ENVS="" hides managed environments, as THUB_PLUGINS="" hides plugins
    hidden = json.loads(thub("backends", "--json", data_dir=tmp_path, env={"THUB_ENVS": ""}).stdout)
    assert "echo" not in [b["name"] for b in hidden["backends"]]


def test_current_environment_wins_and_says_so(tmp_path: Path) -> None:
    fake_env(tmp_path, name="trl-env", backend="trl")
    data = json.loads(thub("backends", "--json", data_dir=tmp_path).stdout)
    trl = next(b for b in data["backends"] if b["name"] == "trl")
    assert trl["environment"] == "current"
    assert any("'trl-env' is hidden: the current environment provides it too" in n for n in data["shadowed"])


def test_envs_list_show_lock_remove(tmp_path: Path) -> None:
    fake_env(tmp_path)
    listed = json.loads(thub("envs", "list", "--json", data_dir=tmp_path).stdout)
    assert [e["name"] for e in listed["environments"]] == ["echo"] and listed["environments"][0]["backends"] == ["echo"]
    assert json.loads(thub("envs", "show", "echo", "--json", data_dir=tmp_path).stdout)["name"] == "echo"
    assert thub("envs", "lock", "echo", data_dir=tmp_path).stdout == "six==1.16.0\n"
    assert thub("envs", "show", "ech", data_dir=tmp_path).returncode == 2
    dry = thub("envs", "remove", "echo", "--dry-run", data_dir=tmp_path)
    assert dry.stdout.strip() == f"rm -r {tmp_path / 'envs' / 'echo'}" and (tmp_path / "envs" / "echo").exists()
    assert thub("uninstall", "echo", "--dry-run",
                data_dir=tmp_path).stdout.strip() == f"rm -r {tmp_path / 'envs' / 'echo'}"
    assert thub("envs", "remove", "echo", data_dir=tmp_path).returncode == 0
    assert not (tmp_path / "envs" / "echo").exists()


def test_doctor_check_reports_missing_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from thub.envs.check import check_managed_envs
    from thub.specs import CheckContext

    monkeypatch.setenv("THUB_DATA_DIR", str(tmp_path))
    assert check_managed_envs(CheckContext()).status == "skip"
    manifest = fake_env(tmp_path)
    manifest.data["python"] = str(tmp_path / "gone" / "bin" / "python")
    manifest.write()
    result = check_managed_envs(CheckContext())
    assert result.status == "fail" and "interpreter" in result.details[0] and "--force" in (result.fix or "")
    assert [m.name for m in list_manifests()] == ["echo"]


def test_the_evaluator_installs_into_thubs_own_environment_only(tmp_path: Path) -> None:
    """``thub install lmeval``: the catalog's evaluator entry, installed where ``thub eval`` imports it."""
    from thub.evaluate.evaluators import install_hint

    done = thub("install", "lmeval", "--into", "current", "--dry-run", "--json", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["plans"][0]["sources"] == [str(ROOT / "thub-plugin-lmeval")]
    gpu = thub("install", "lmeval", "--into", "current", "--gpu", "--dry-run", "--json", data_dir=tmp_path)
    assert json.loads(gpu.stdout)["plans"][0]["sources"] == [f"{ROOT / 'thub-plugin-lmeval'}[vllm]"]
    managed = thub("install", "lmeval", "--into", "managed", "--dry-run", data_dir=tmp_path)
    assert managed.returncode == 2 and "lmeval is an evaluator" in managed.stderr, managed.stderr
    assert "Traceback" not in managed.stderr
    assert install_hint() == "thub install lmeval"
    listing = json.loads(thub("backends", "--json", data_dir=tmp_path).stdout)
    assert "lmeval" not in json.dumps(listing.get("installable", listing)), "an evaluator is not a backend"
