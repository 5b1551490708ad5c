"""thub install with real installs from the package index (CPU): managed environments for trl and
mini-trainer side by side, a demo trained through one, ``pip check`` in a fresh one, a refused
conflicting install, and GPU-less resolves that pull no CUDA torch.

Slow (``-m slow``): each of the trl and mini-trainer environments takes about a minute on two
idle cores (torch comes from pip's local wheel, everything else from the package index or pip's
cache); both are built once per module, at the same time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.install]

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "plugins"
PLUGIN_FOLDERS = sorted(p for p in ROOT.glob("thub-plugin-*") if (p / "pyproject.toml").exists())

try:
    TORCH = f"torch=={metadata.version('torch')}"
except metadata.PackageNotFoundError:  # pragma: no cover - CI installs the CPU torch first
    TORCH = None


def run(python: str | Path, *args: str, data_dir: Path, env: dict[str, str] | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update({"THUB_DATA_DIR": str(data_dir), **(env or {})})
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=environ, timeout=timeout)


def thub(*args: str, data_dir: Path, env: dict[str, str] | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, "-m", "thub", *args, data_dir=data_dir, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("thub-data")


def _install(backend: str) -> list[str]:
    return ["install", backend, "--into", "managed", "--installer", "pip", "--torch", str(TORCH), "--json"]


@pytest.fixture(scope="module")
def minitrainer_install(data_dir: Path, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[tuple[subprocess.Popen[str], Path] | None]:
    """mini-trainer's real ``thub install``, started in the background as this module's first environment
    build begins when a test of this run needs it (each build is about a minute of mostly single-process
    pip work: two at once take little longer than one); None when no test does."""
    wanted = any("minitrainer_env" in getattr(item, "fixturenames", ()) for item in request.session.items)
    if TORCH is None or not wanted:
        yield None
        return
    logs = tmp_path_factory.mktemp("minitrainer-install")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ["THUB_DATA_DIR"] = str(data_dir)
    with (logs / "stdout").open("w") as stdout, (logs / "stderr").open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "thub", *_install("mini-trainer")], stdout=stdout,
                                   stderr=stderr, text=True, env=environ)
    try:
        yield process, logs
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def trl_env(data_dir: Path, minitrainer_install: tuple[subprocess.Popen[str], Path] | None) -> dict:
    if TORCH is None:
        pytest.skip("no torch beside thub to pin")
    done = thub(*_install("trl"), data_dir=data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((data_dir / "envs" / "trl" / "thub-env.json").read_text())


@pytest.fixture(scope="module")
def pinned_env(data_dir: Path) -> dict:
    done = thub("install", str(FIXTURES / "thub-plugin-pinned"), "--into", "managed", "--installer", "pip",
                "--torch", "none", data_dir=data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((data_dir / "envs" / "pinned" / "thub-env.json").read_text())


@pytest.fixture(scope="module")
def minitrainer_env(trl_env: dict, minitrainer_install: tuple[subprocess.Popen[str], Path] | None,
                    data_dir: Path) -> dict:
    """mini-trainer's managed environment, built for real next to trl's (both installs run at once)."""
    assert minitrainer_install is not None
    process, logs = minitrainer_install
    code = process.wait(timeout=900)  # a hang guard
    assert code == 0, (logs / "stderr").read_text()[-3000:]
    installed = json.loads((logs / "stdout").read_text())["installed"]
    assert [(i["environment"], i["backends"], i["pip_check"])
            for i in installed] == [("mini-trainer", ["mini-trainer"], "ok")]
    return json.loads((data_dir / "envs" / "mini-trainer" / "thub-env.json").read_text())


# THUB_DISABLE_PLUGINS=trl hides the trl plugin installed in the test environment itself,
# so the managed one is the trl backend (otherwise the current environment wins).
HIDE_LOCAL_TRL = {"THUB_DISABLE_PLUGINS": "trl"}
# The same for both backends (the test environment has the mini-trainer plugin too), on a
# machine that shows no GPU (CUDA_VISIBLE_DEVICES="") whatever the CI host has.
HIDE_LOCAL_BOTH = {"THUB_DISABLE_PLUGINS": "trl,minitrainer", "CUDA_VISIBLE_DEVICES": ""}


def test_side_by_side_envs_listed_with_their_location(trl_env: dict, pinned_env: dict, data_dir: Path) -> None:
    assert trl_env["python"] != pinned_env["python"]
    assert trl_env["pip_check"] == "ok" and trl_env["torch"] == TORCH
    lock = (data_dir / "envs" / "trl" / "requirements.lock").read_text()
    assert f"\n{TORCH}\n" in lock and "\ntrl==" in lock
    assert not any(line.startswith("nvidia-") for line in lock.splitlines()), "a CPU install pulled CUDA"
    data = json.loads(thub("backends", "--json", data_dir=data_dir, env=HIDE_LOCAL_TRL).stdout)
    where = {b["name"]: b for b in data["backends"]}
    assert where["trl"]["environment"] == "trl" and where["trl"]["path"] == str(data_dir / "envs" / "trl")
    assert where["trl"]["ready"] and where["trl"]["library"]["name"] == "trl"
    assert where["pinned"]["environment"] == "pinned" and where["pinned"]["python"] == pinned_env["python"]
    # without hiding it, the current environment's trl wins and the listing says so
    shown = json.loads(thub("backends", "--json", data_dir=data_dir).stdout)
    assert next(b for b in shown["backends"] if b["name"] == "trl")["environment"] == "current"
    assert any("'trl' is hidden" in note for note in shown["shadowed"])
    table = thub("backends", data_dir=data_dir, env=HIDE_LOCAL_TRL)
    assert "env trl" in table.stdout  # a listing: stdout (pip, git, kubectl)


def test_demo_trained_through_managed_env(trl_env: dict, tiny_model: Path, demo_data: Path, tmp_path: Path,
                                          data_dir: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
            str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "2"]
    plan = json.loads(thub(*args, "--dry-run", "--json", data_dir=data_dir, env=HIDE_LOCAL_TRL).stdout)
    assert plan["backend"] == "trl" and plan["translation"], plan  # translated by the managed env's plugin
    done = thub(*args, "--json", data_dir=data_dir, env=HIDE_LOCAL_TRL)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded", result
    record = json.loads((out / "thub_run.json").read_text())
    env = record["environment"]
    assert env["kind"] == "managed" and env["name"] == "trl" and env["python"] == trl_env["python"]
    assert env["lock"]["sha256"] == trl_env["lock_sha256"] and any(r.startswith("trl==")
                                                                   for r in env["lock"]["requirements"])
    assert record["versions"]["library"]["name"] == "trl" and record["versions"]["library"]["version"]
    lines = read_metrics(out / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2] and all("loss" in line for line in lines)


def _lock(env: dict) -> dict[str, str]:
    lines = (Path(env["path"]) / "requirements.lock").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))


def test_trl_and_minitrainer_side_by_side(trl_env: dict, minitrainer_env: dict, tiny_model: Path, demo_data: Path,
                                          tmp_path: Path, data_dir: Path) -> None:
    from packaging.requirements import Requirement
    from packaging.version import Version

    mt = minitrainer_env
    assert mt["path"] == str(data_dir / "envs" / "mini-trainer") and mt["python"] != trl_env["python"]
    assert mt["pip_check"] == "ok" and mt["torch"] == TORCH and mt["failures"] == []
    # both listed, each with where it lives; mini-trainer not ready only for want of a GPU
    data = json.loads(thub("backends", "--json", data_dir=data_dir, env=HIDE_LOCAL_BOTH).stdout)
    where = {b["name"]: b for b in data["backends"]}
    for name, env in (("trl", trl_env), ("mini-trainer", mt)):
        assert (where[name]["environment"], where[name]["path"],
                where[name]["python"]) == (name, env["path"], env["python"])
        assert where[name]["missing"] == []
    assert where["trl"]["ready"] is True
    assert where["mini-trainer"]["ready"] is False
    assert where["mini-trainer"]["status"] == "needs an NVIDIA GPU and none is visible"
    lock = _lock(mt)
    library = {"name": "rhai-innovation-mini-trainer", "version": lock["rhai-innovation-mini-trainer"]}
    assert where["mini-trainer"]["library"] == library
    # its requirements are satisfied inside its environment: by the manifest, and by that env's own thub
    entry = mt["backends"][0]
    assert entry["requirements"] and all(
        entry["installed"][Requirement(r).name] is not None
        and Requirement(r).specifier.contains(entry["installed"][Requirement(r).name], prereleases=True)
        for r in entry["requirements"])
    inside = json.loads(run(mt["python"], "-m", "thub", "backends", "--json", data_dir=data_dir,
                            env={"THUB_ENVS": "", "CUDA_VISIBLE_DEVICES": ""}).stdout)
    assert [(b["name"], b["environment"], b["missing"], b["status"]) for b in inside["backends"]] == [
        ("mini-trainer", "current", [], "needs an NVIDIA GPU and none is visible")]
    table = thub("backends", data_dir=data_dir, env={**HIDE_LOCAL_BOTH, "COLUMNS": "300"})
    assert "env trl" in table.stderr + table.stdout and "env mini-trainer" in table.stderr + table.stdout
    # thub envs list shows both
    listed = json.loads(thub("envs", "list", "--json", data_dir=data_dir).stdout)["environments"]
    envs = {e["name"]: e for e in listed}
    assert envs["trl"]["backends"] == ["trl"] and envs["mini-trainer"]["backends"] == ["mini-trainer"]
    assert envs["mini-trainer"]["path"] == mt["path"] and envs["mini-trainer"]["python_exists"]
    assert envs["mini-trainer"]["libraries"] == {library["name"]: library["version"]}
    text = thub("envs", "list", data_dir=data_dir, env={"COLUMNS": "300"})
    assert "mini-trainer" in text.stdout + text.stderr and str(data_dir / "envs" / "trl") in text.stdout + text.stderr
    # each environment passes pip check
    for env in (trl_env, mt):
        check = run(env["python"], "-m", "pip", "check", data_dir=data_dir)
        assert check.returncode == 0, (env["name"], check.stdout)
    # mini-trainer's environment: datasets>=5 (unsloth's range would refuse it) and the CPU torch, no CUDA
    assert Version(lock["datasets"]) >= Version("5"), lock["datasets"]
    assert f"torch=={lock['torch']}" == TORCH and lock["torch"].endswith("+cpu")
    assert lock["rhai-innovation-mini-trainer"].startswith("0.9.")
    assert not [n for n in lock if n.lower().startswith(("nvidia-", "cuda-")) or n.lower() == "triton"], lock
    versions = run(mt["python"], "-c",
                   "import importlib.metadata as m; print(m.version('torch'), m.version('datasets'))",
                   data_dir=data_dir).stdout.split()
    assert versions == [lock["torch"], lock["datasets"]]
    # the osft dry run is translated by the managed environment's interpreter (its site-packages
    # are in the command), not by this one (whose mini-trainer plugin is hidden)
    out = tmp_path / "osft"
    args = ["train", "osft", "--backend", "mini-trainer", "--model-path", str(tiny_model), "--data-path",
            str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--unfreeze-rank-ratio", "0.5",
            "--dry-run", "--json"]
    done = thub(*args, data_dir=data_dir, env=HIDE_LOCAL_BOTH)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout)
    translation = plan["translation"]
    assert plan["backend"] == "mini-trainer" and translation["function"] == "mini_trainer.run_training"
    training_args = translation["training_args"]
    assert training_args["osft"] is True and training_args["osft_unfreeze_rank_ratio"] == 0.5
    assert f"{mt['site_packages']}/mini_trainer/train.py" in translation["command"], translation["command"]
    assert plan["parameters"]["learning_rate"]["source"] == "backend mini-trainer"  # defaults from the manifest
    assert not out.exists(), "a dry run creates nothing"
    hidden = thub(*args, data_dir=data_dir, env={**HIDE_LOCAL_BOTH, "THUB_ENVS": "trl"})
    assert hidden.returncode == 2 and "backend 'mini-trainer' is not installed" in hidden.stderr  # its env not read
    assert "thub install mini-trainer" in hidden.stderr


def test_fresh_env_passes_pip_check_and_lists_only_its_backend(pinned_env: dict, data_dir: Path) -> None:
    python = pinned_env["python"]
    check = run(python, "-m", "pip", "check", data_dir=data_dir)
    assert check.returncode == 0, check.stdout
    data = json.loads(run(python, "-m", "thub", "backends", "--json", data_dir=data_dir, env={"THUB_ENVS": ""}).stdout)
    assert [(b["name"], b["ready"], b["environment"]) for b in data["backends"]] == [("pinned", True, "current")]


def test_conflicting_current_install_refused_with_pins(pinned_env: dict, data_dir: Path) -> None:
    python = pinned_env["python"]
    newsix = str(FIXTURES / "thub-plugin-newsix")
    done = run(python, "-m", "thub", "install", newsix, "--into", "current", "--torch", "none", data_dir=data_dir)
    assert done.returncode == 2, done.stderr
    assert "six==1.16.0 is required by thub-plugin-pinned 0.1.0" in done.stderr
    assert "thub-plugin-newsix: six>=1.17" in done.stderr and "--into managed" in done.stderr
    assert run(python, "-c", "import importlib.metadata as m; print(m.version('six'))",
               data_dir=data_dir).stdout.strip() == "1.16.0"
    # auto picks a managed environment instead, and says why
    auto = run(python, "-m", "thub", "install", newsix, "--torch", "none", "--dry-run", data_dir=data_dir)
    assert auto.returncode == 0, auto.stderr
    assert "would conflict" in auto.stderr and "# into managed environment 'newsix'" in auto.stdout


def test_current_install_without_conflict_goes_in(pinned_env: dict, data_dir: Path) -> None:
    python = pinned_env["python"]
    echo = str(FIXTURES / "thub-plugin-echo")
    done = run(python, "-m", "thub", "install", echo, "--into", "current", "--torch", "none", "--json",
               data_dir=data_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    installed = json.loads(done.stdout)["installed"][0]
    assert installed["target"] == "current" and installed["python"] == python and installed["pip_check"] == "ok"
    data = json.loads(run(python, "-m", "thub", "backends", "--json", data_dir=data_dir, env={"THUB_ENVS": ""}).stdout)
    assert sorted(b["name"] for b in data["backends"]) == ["echo", "pinned"]
    again = run(python, "-m", "thub", "install", echo, data_dir=data_dir)
    assert again.returncode == 0 and "already installed in the current environment" in again.stderr


def test_doctor_check_matches_manifests(trl_env: dict, minitrainer_env: dict, pinned_env: dict, data_dir: Path) -> None:
    done = thub("doctor", "--json", "--timeout", "600", data_dir=data_dir, timeout=900)  # hang guards
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["core.managed-envs"]["status"] == "ok", checks["core.managed-envs"]
    assert all(name in checks["core.managed-envs"]["summary"] for name in ("trl", "mini-trainer", "pinned")), \
        checks["core.managed-envs"]


@pytest.mark.parametrize("folder", PLUGIN_FOLDERS, ids=[p.name for p in PLUGIN_FOLDERS])
def test_gpu_less_resolve_pulls_no_cuda_torch(folder: Path, tmp_path: Path) -> None:
    if TORCH is None:
        pytest.skip("no torch beside thub to pin")
    # the evaluator goes into thub's own environment only (thub install refuses a managed one for it)
    into = "current" if folder.name == "thub-plugin-lmeval" else "managed"
    done = thub("install", str(folder), "--into", into, "--torch", TORCH, "--dry-run", "--resolve", "--json",
                data_dir=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    resolved = json.loads(done.stdout)["plans"][0]["resolve"]
    assert "error" not in resolved, resolved
    assert resolved["cuda_packages"] == [], resolved["cuda_packages"]
    if "torch" in resolved["install"]:
        assert f"torch=={resolved['install']['torch']}" == TORCH


def test_uninstall_removes_the_managed_env(pinned_env: dict, data_dir: Path) -> None:
    done = thub("uninstall", "pinned", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    assert not (data_dir / "envs" / "pinned").exists()
    assert "pinned" not in [b["name"]
                            for b in json.loads(thub("backends", "--json", data_dir=data_dir).stdout)["backends"]]
