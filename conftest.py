"""Repository-wide fixtures: the tiny local model every real training test uses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session", autouse=True)
def nothing_left_in_the_checkout() -> Iterator[None]:
    """A test (or the code under test) that writes into the working directory (MLflow's ./mlruns,
    W&B's ./wandb, a stray run directory) fails the session: runs belong under tmp_path."""
    before = {entry.name for entry in ROOT.iterdir()}
    yield
    left = sorted({entry.name for entry in ROOT.iterdir()} - before - {"__pycache__", ".pytest_cache"})
    assert not left, f"tests left files in the checkout: {left}"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama + byte-level BPE tokenizer with a ChatML template, built locally."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([sys.executable, str(EXAMPLES / "make_tiny_model.py"), "--out", str(out)],
                   check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def demo_data() -> Path:
    """The committed demo datasets (chat, grpo, documents, sharegpt, alpaca)."""
    return EXAMPLES / "data"


@pytest.fixture(scope="session")
def edge_cases() -> Path:
    """The edge-case data set (tool calls, odd turn orders, overlong rows, Unicode, unmask, documents);
    tests/fixtures/edge_cases/README.md describes each row."""
    return ROOT / "tests" / "fixtures" / "edge_cases"


@pytest.fixture(scope="session")
def edge_cases_max_seq_len() -> int:
    """The max_seq_len tests use with the edge-case set: every chat row fits but the overlong one."""
    return 256



@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite MLflow store for the session (creating one runs MLflow's migrations: seconds);
    tests that only read back their own run ids share it."""
    pytest.importorskip("mlflow")
    from thub_builtins.trackers_mlflow import ensure_experiment

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    ensure_experiment(uri, "Default")  # creates the tables once
    return uri

# --- optional plugins and libraries: skip, never a collection error ------------------------------
# After the README's first command (scripts/setup.sh) only the trl backend is installed; the
# second (scripts/test-all.sh) installs the rest. A plugin's tests, or a test module importing a
# library that is missing, are then skipped with the install command as the reason.

ALL_TEST_REQUIREMENTS = "bash scripts/test-all.sh installs every test requirement"
#: What pip installs for an optional module the tests import (the pinned versions: scripts/test-all.sh).
PIP_NAMES = {
    "mlflow": "mlflow-skinny sqlalchemy alembic", "wandb": "wandb", "tensorboard": "tensorboard",
    "sqlalchemy": "sqlalchemy", "alembic": "alembic", "instructlab": "instructlab-training",
    "mini_trainer": "rhai-innovation-mini-trainer", "hydra": "hydra-core", "omegaconf": "omegaconf",
}
#: Top-level modules scripts/test-all.sh installs for the tests (besides the thub_plugin_* ones).
OPTIONAL_MODULES = frozenset({
    "instructlab", "mini_trainer", "hydra", "omegaconf", "tensorboard", "mlflow", "wandb", "sqlalchemy",
    "alembic", "training_hub", "verl", "art", "llamafactory", "axolotl", "unsloth",
})


def _plugin_package(folder: Path) -> str | None:
    """The import package of a ``thub-plugin-*`` folder (its only ``src/`` package)."""
    packages = [p.name for p in (folder / "src").glob("*") if (p / "__init__.py").exists()]
    return packages[0] if len(packages) == 1 else None


def _installed(package: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _missing_reason(module: str, folder: Path | None = None) -> str:
    if folder is not None or module.startswith("thub_plugin_"):
        found = next(ROOT.glob(f"thub-plugin-*/src/{module}/__init__.py"), None)
        name = folder.name if folder else found.parents[1].name if found else module.replace("_", "-")
        return f"{module} is not installed: python -m pip install --no-deps -e ./{name} (or {ALL_TEST_REQUIREMENTS})"
    if module in PIP_NAMES:
        return f"{module} is not installed: python -m pip install {PIP_NAMES[module]} (or {ALL_TEST_REQUIREMENTS})"
    return f"{module} is not installed: {ALL_TEST_REQUIREMENTS}"


# --- tiers: a test that trains, installs or starts SLURM is marked automatically ---------------------
# The fast tier is ``-m "not slow"`` (README "Two commands"). Like pytest's own testing/conftest.py, a
# test is marked by what it uses: a fixture below in its closure (directly or through another fixture)
# makes it ``slow`` (and ``install`` where the fixture installs packages), so a new test of a trained run
# cannot land in the fast tier by forgetting a marker. Keys are ``file::fixture`` (names such as
# ``installed`` recur in other modules with other meanings). tests/test_ci_collection.py checks that every
# key still names a fixture and that every fixture whose code runs ``thub train``, ``thub install`` or
# ``pip install`` is listed here.

#: Fixtures that train a model for real or start a cluster: their tests are ``slow``.
SLOW_FIXTURES: dict[str, str] = {
    "tests/conftest.py::trl_lora_run": "thub train lora_sft (trl) with --export",
    "tests/conftest.py::fsdp2_dcp": "FSDP2 over 2 gloo processes, dcp.save",
    "tests/conftest.py::slurm_env": "a one-node SLURM (scripts/slurm-up.sh)",
    "tests/test_checkpoint_push.py::trained": "thub train sft (trl) with --export",
    "tests/test_trust_copied_run.py::copied_run": "thub train sft (trl)",
    "tests/test_plot.py::real_runs": "two thub train sft runs",
    "thub-plugin-trl/tests/test_preference.py::overlong_run": "thub train dpo per overlong policy",
    "thub-plugin-lmeval/tests/conftest.py::trained_model": "60 AdamW steps on the tiny model",
}
#: Fixtures that install packages (pip, thub install): their tests are ``slow`` and ``install``; the fast
#: tier installs nothing.
INSTALL_FIXTURES: dict[str, str] = {
    "thub-plugin-llamafactory/tests/conftest.py::lf_env": "thub install llamafactory --into managed",
    "tests/test_install_envs.py::minitrainer_install": "thub install mini-trainer --into managed",
    "tests/test_install_envs.py::trl_env": "thub install trl --into managed",
    "tests/test_install_envs.py::pinned_env": "thub install of a fixture plugin --into managed",
    "tests/test_outside_plugin.py::installed": "pip install --target of examples/plugins/thub-plugin-pairs",
    "tests/test_plugins.py::broken_site": "pip install of two plugin distributions",
    "tests/test_plugins.py::commands_site": "pip install of a plugin distribution",
    "tests/test_installed_metadata.py::environment": "a new venv its tests pip-install wheels into",
    "tests/test_storage_hook.py::installed": "pip install --target of tests/plugins' storage plugin",
    "tests/test_dialect_hook.py::installed": "pip install --target of tests/plugins' dialect plugin",
    "tests/test_launcher_hook.py::site": "pip install --target of tests/plugins' launcher plugin",
}


def fixture_key(func: object) -> str | None:
    """``file::name`` of a fixture function, the file relative to the checkout (None outside it)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    try:
        where = Path(code.co_filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return f"{where.as_posix()}::{getattr(func, '__name__', code.co_name)}"


def tier_marks(item: pytest.Item) -> list[str]:
    """The marks a test gets from the fixtures it uses: ``["slow"]``, ``["slow", "install"]`` or ``[]``."""
    info = getattr(item, "_fixtureinfo", None)  # the test's fixture closure, as pytest resolved it
    keys = {fixture_key(d.func) for defs in getattr(info, "name2fixturedefs", {}).values() for d in defs}
    if keys & INSTALL_FIXTURES.keys():
        return ["slow", "install"]
    return ["slow"] if keys & SLOW_FIXTURES.keys() else []


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects (pytest's mark plugin)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test ``slow``/``install`` by the fixtures it uses (:func:`tier_marks`)."""
    for item in items:
        for mark in tier_marks(item):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_module(*modules): skipped, naming the install, unless all import")
    config.addinivalue_line("markers", "needs_backend(*names): skipped, naming the plugin's install, unless "
                                       "these backends are registered")
    config.addinivalue_line("markers", "needs_system(*binaries): skipped, naming scripts/system-packages.sh, "
                                       "unless these programs are on PATH")


#: The command that installs the system packages some tests need (apt-get: SLURM, munge, openssl, shellcheck).
SYSTEM_PACKAGES = "sudo bash scripts/system-packages.sh"


def _missing_system(binaries: Iterable[str]) -> str | None:
    """Why a test needing ``binaries`` cannot run (the missing ones and their install), or None."""
    import shutil

    missing = [b for b in binaries if shutil.which(b) is None]
    return f"not on PATH: {', '.join(missing)}; install with: {SYSTEM_PACKAGES}" if missing else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs_module``/``needs_backend`` whose library or backend plugin is not
    installed (e.g. after scripts/setup.sh alone) is skipped with the command that installs it."""
    for mark in item.iter_markers("needs_module"):
        for module in mark.args:
            if not _installed(module):
                pytest.skip(_missing_reason(module))
    why = _missing_system(b for mark in item.iter_markers("needs_system") for b in mark.args)
    if why:
        pytest.skip(why)
    names = [name for mark in item.iter_markers("needs_backend") for name in mark.args]
    if names:
        from thub.envs.catalog import catalog_entry
        from thub.manager import get_registry

        registered = get_registry().backends
        for name in names:
            entry = catalog_entry(name)
            if name not in registered and entry is not None:
                folder = ROOT / entry.distribution
                pytest.skip(f"backend {name} is not installed: " + _missing_reason(_plugin_package(folder) or name,
                                                                                   folder).partition(": ")[2])
            assert name in registered, f"no backend {name!r}, and thub install does not offer one"


class _SkippedTests(pytest.Directory):
    """A plugin's tests folder whose plugin is not installed: one skip, with the reason."""

    reason = ""

    def collect(self):  # type: ignore[no-untyped-def]
        raise pytest.skip.Exception(self.reason, allow_module_level=True)


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if path.name == "tests" and path.parent.name.startswith("thub-plugin-") and path.parent.parent == ROOT:
        package = _plugin_package(path.parent)
        if package and not _installed(package):
            node = _SkippedTests.from_parent(parent, path=path)
            node.reason = _missing_reason(package, path.parent)
            return node
    return None


class _OptionalModule(pytest.Module):
    """A test module importing a missing optional plugin or library: skipped with the reason."""

    def _getobj(self):  # type: ignore[no-untyped-def]
        try:
            return super()._getobj()
        except self.CollectError as exc:
            cause = exc.__cause__
            name = getattr(cause, "name", None) if isinstance(cause, ModuleNotFoundError) else None
            top = (name or "").partition(".")[0]
            if top.startswith("thub_plugin_") or top in OPTIONAL_MODULES:
                raise pytest.skip.Exception(_missing_reason(top), allow_module_level=True) from None
            raise


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if module_path.name == "__init__.py":
        return None
    return _OptionalModule.from_parent(parent, path=module_path)
