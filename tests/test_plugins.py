"""Plugin loading: isolation of broken plugins, allow/deny lists, provenance, every hook exercised."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

from thub import hookimpl
from thub.manager import load_registry
from thub.specs import (
    AlgorithmSpec,
    BackendSpec,
    CheckContext,
    CheckResult,
    CheckSpec,
    CommandSpec,
    EvaluatorSpec,
    LauncherSpec,
    RewardSpec,
    RunEvent,
    StorageSpec,
    TrackerSpec,
)

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "examples" / "data" / "chat.jsonl")  # a dry run checks its data


def _make_distribution(root: Path, name: str, module_source: str) -> Path:
    """A real distribution (pyproject + module) with a ``thub`` entry point."""
    src = root / name
    src.mkdir()
    module = name.replace("-", "_")
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "0.0.1"
        [project.entry-points.thub]
        {module} = "{module}"
        [tool.setuptools]
        py-modules = ["{module}"]
    """))
    (src / f"{module}.py").write_text(textwrap.dedent(module_source))
    return src


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real plugin distributions pip-installed into a temporary site directory."""
    root = tmp_path_factory.mktemp("dists")
    target = tmp_path_factory.mktemp("site")
    broken = _make_distribution(root, "thub-broken", "raise ImportError('cannot import name CUDA_HOME')\n")
    good = _make_distribution(root, "thub-good", """
        from thub import hookimpl
        from thub.specs import BackendSpec

        @hookimpl
        def thub_register_backends(register):
            register(BackendSpec("good", "a fine backend", {"sft": frozenset({"learning_rate"})}, "thub_good:run"))
    """)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(broken), str(good)], check=True, capture_output=True)
    return target


def _thub(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    environ.update(PYTHONPATH=str(site), **env)
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ)


def test_broken_distribution_is_named_and_the_rest_works(broken_site: Path) -> None:
    done = _thub(broken_site, "plugins", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    failure = next(f for f in data["failures"] if f["name"] == "thub_broken")
    assert failure["distribution"] == "thub-broken" and failure["version"] == "0.0.1"
    assert failure["stage"] == "import" and "CUDA_HOME" in failure["error"]
    names = {p["name"] for p in data["plugins"]}
    assert {"thub_good", "trl", "thub_builtins.algorithms"} <= names
    human = _thub(broken_site, "plugins")
    assert "thub_broken" in human.stdout and "failed at import" in human.stdout  # part of the listing
    # training still works with the broken plugin installed
    assert _thub(broken_site, "train", "sft", "--dry-run", "-b", "good", "--model-path", "m", "--data-path", CHAT,
                 "--ckpt-output-dir", "o").returncode == 0


def test_allow_list_and_disable_list(broken_site: Path) -> None:
    none = json.loads(_thub(broken_site, "plugins", "--json", THUB_PLUGINS="").stdout)
    from thub.manager import BUILTIN_PLUGINS

    assert {p["name"] for p in none["plugins"]} == set(BUILTIN_PLUGINS)
    assert none["failures"] == []
    only = json.loads(_thub(broken_site, "plugins", "--json", THUB_PLUGINS="thub-good").stdout)
    assert "thub_good" in {p["name"] for p in only["plugins"]} and "trl" not in {p["name"] for p in only["plugins"]}
    off = json.loads(_thub(broken_site, "plugins", "--json", THUB_DISABLE_PLUGINS="thub_broken,trl").stdout)
    assert off["failures"] == [] and "trl" not in {p["name"] for p in off["plugins"]}


class _Nonsense:
    @hookimpl
    def thub_register_backends(self, register):
        register(42)


class _UnknownHook:
    @hookimpl
    def thub_register_everything(self, register):
        pass


class _Duplicate:
    @hookimpl
    def thub_register_algorithms(self, register):
        register(AlgorithmSpec("sft", "again", "thub_builtins.params:SFTParams"))


def test_invalid_plugins_are_recorded_not_fatal() -> None:
    registry = load_registry(extra_plugins=[("nonsense", _Nonsense()), ("unknown", _UnknownHook()),
                                            ("dup", _Duplicate())], entry_points=False)
    stages = {f.name: (f.stage, f.error) for f in registry.failures}
    assert stages["nonsense"][0] == "register backends" and "expected BackendSpec, got int" in stages["nonsense"][1]
    assert stages["unknown"][0] == "validate" and "thub_register_everything" in stages["unknown"][1]
    assert stages["dup"][0] == "register algorithms"
    assert "already registered by thub_builtins.algorithms" in stages["dup"][1]
    assert registry.algorithms["sft"].summary != "again"
    assert "unknown" not in registry.plugins


class _EveryHook:
    """A plugin implementing every hook of the API."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    @hookimpl
    def thub_register_algorithms(self, register):
        register(AlgorithmSpec("toy", "a toy algorithm", "thub_builtins.params:SFTParams"))

    @hookimpl
    def thub_register_backends(self, register):
        register(BackendSpec("toyb", "toy backend", {"toy": frozenset({"learning_rate"})}, "x:run",
                             defaults={"toy": {"learning_rate": 0.5}}))

    @hookimpl
    def thub_translate_params(self, algorithm, backend, params):
        return {"lr": params["learning_rate"]} if backend == "toyb" else None

    @hookimpl
    def thub_register_rewards(self, register):
        register(RewardSpec("always_one", "thub_builtins.reward_functions:binary", "test"))

    @hookimpl
    def thub_register_evaluators(self, register):
        register(EvaluatorSpec("toy-eval", "a toy evaluator", "x:evaluate", task_files=(".jsonl",)))

    @hookimpl
    def thub_register_trackers(self, register):
        register(TrackerSpec("toy-tracker", "Toy tracker", "toy_tracker_key", ("toy_tracker_key",), writer="x:open",
                             where="x:where"))

    @hookimpl
    def thub_register_checks(self, register):
        register(CheckSpec("toy.check", "toy check", lambda ctx: CheckResult("ok", "fine")))

    @hookimpl
    def thub_register_commands(self, register):
        register(CommandSpec("toy-hello", f"{__name__}:toy_hello", "Say hello from toy."))

    @hookimpl
    def thub_register_storage(self, register):
        register(StorageSpec("toy-store", "a toy store", "toy-store://BUCKET/PREFIX"))

    @hookimpl
    def thub_register_launchers(self, register):
        register(LauncherSpec("toy-launcher", "a toy launcher", submit="x:submit"))

    @hookimpl
    def thub_on_event(self, event):
        self.events.append(event)


@click.command()
def toy_hello() -> None:
    click.echo("hello from toy")


def test_every_hook_is_called(thub_plugin, thub_cli) -> None:
    plugin = _EveryHook()
    registry = thub_plugin(("toy", plugin))
    info = registry.plugins["toy"]
    assert info.registered == {"algorithms": ["toy"], "backends": ["toyb"], "rewards": ["always_one"],
                               "evaluators": ["toy-eval"], "checks": ["toy.check"], "commands": ["toy-hello"],
                               "trackers": ["toy-tracker"], "storage": ["toy-store"], "launchers": ["toy-launcher"]}
    assert registry.launchers["toy-launcher"].provenance.plugin == "toy"
    assert registry.trackers["toy-tracker"].provenance.plugin == "toy"
    from thub.checkpoint.storage import parse_uri

    assert registry.storage["toy-store"].provenance.plugin == "toy"
    assert parse_uri("toy-store://b/p/", "push").location == "b/p"
    assert registry.evaluators["toy-eval"].provenance.plugin == "toy"
    assert registry.backends["toyb"].provenance.plugin == "toy"
    assert registry.checks["toy.check"].run(CheckContext()).status == "ok"
    plan = thub_cli("train", "toy", "--dry-run", "--json", "--model-path", "m", "--data-path", CHAT,
                    "--ckpt-output-dir", "o")
    assert plan.exit_code == 0, plan.stderr
    assert plan.json()["translation"] == {"lr": 0.5}
    from thub.cli.main import LazyGroup, cli

    assert thub_cli("toy-hello").stdout == "hello from toy\n"
    assert "toy-hello" in thub_cli("--help").stdout
    registry.fire(RunEvent("started", "/tmp/x", "toy", "toyb"))
    assert plugin.events[0].kind == "started"
    assert isinstance(cli, LazyGroup)


def test_event_hook_failure_does_not_stop_the_run(thub_plugin, capsys) -> None:
    class Crashy:
        @hookimpl
        def thub_on_event(self, event):
            raise RuntimeError("observer bug")

    registry = thub_plugin(("crashy", Crashy()), entry_points=False)
    registry.fire(RunEvent("metrics", "/tmp/x", "sft", "trl", {"step": 1}))
    assert "event hook of crashy failed: observer bug" in capsys.readouterr().err


def test_every_hook_is_documented_and_tested() -> None:
    from thub import hookspecs

    hooks = [name for name in dir(hookspecs) if name.startswith("thub_")]
    docs = (ROOT / "docs" / "hooks.md").read_text()
    tests = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for hook in hooks:
        assert re.search(rf"^## `{hook}\(", docs, re.M), f"{hook} is not documented in docs/hooks.md"
        assert f"def {hook}(" in tests, f"no test implements {hook}"


class _TranslationWrapper:
    @hookimpl(wrapper=True)
    def thub_translate_params(self, algorithm, backend, params):
        native = yield
        if backend == "trl" and native:
            native["config"]["report_to"] = ["trackio"]
        return native


def test_a_plugin_can_wrap_another_translation(thub_plugin) -> None:
    from thub.api import dry_run

    thub_plugin(("wrapper", _TranslationWrapper()))
    chat = str(Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl")  # the plan validates the data
    plan = dry_run("sft", backend="trl", model_path="m", data_path=chat, ckpt_output_dir="o")
    assert plan["translation"]["config"]["report_to"] == ["trackio"]
    assert plan["parameters"]["model_path"] == {"value": "m", "source": "api model_path"}


@pytest.fixture(scope="module")
def commands_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real distribution whose ``thub_register_commands`` raises, next to one with a working command."""
    root = tmp_path_factory.mktemp("cmd-dists")
    target = tmp_path_factory.mktemp("cmd-site")
    bad = _make_distribution(root, "thub-badcmd", """
        from thub import hookimpl

        @hookimpl
        def thub_register_commands(register):
            raise RuntimeError("command registration exploded")
    """)
    good = _make_distribution(root, "thub-goodcmd", """
        import click
        from thub import hookimpl
        from thub.specs import CommandSpec

        @click.command()
        def hello():
            click.echo("hello from goodcmd")

        @hookimpl
        def thub_register_commands(register):
            register(CommandSpec("hello-goodcmd", "thub_goodcmd:hello", "say hello from a plugin"))
            # lazily registered: a command whose module is broken is listed, and fails alone when run
            register(CommandSpec("broken-goodcmd", "thub_goodcmd_missing:hello", "a command that cannot load"))
    """)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(bad), str(good)], check=True, capture_output=True)
    return target


def test_broken_command_registration_never_breaks_the_cli(commands_site: Path, tmp_path: Path) -> None:
    # Issue 13 item 10: a raising thub_register_commands broke `thub --help` with a traceback,
    # and `thub plugins`/`doctor` called the plugin healthy.
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    for run in range(2):  # the first run collects plugin commands, the second reads them from the cache
        assert (tmp_path / "cache" / "thub" / "plugin-commands.json").exists() == (run == 1)
        helped = _thub(commands_site, "--help", **cache)
        assert helped.returncode == 0, helped.stderr
        assert "Traceback" not in helped.stderr and "exploded" not in helped.stdout
        assert "hello-goodcmd" in helped.stdout and "say hello from a plugin" in helped.stdout
        assert "broken-goodcmd" in helped.stdout and "train" in helped.stdout
    assert _thub(commands_site, "hello-goodcmd", **cache).stdout == "hello from goodcmd\n"
    hello = _thub(commands_site, "hello-goodcmd", "--help", **cache).stdout
    assert "say hello from a plugin" in hello  # the registered short help heads the command's page
    broken = _thub(commands_site, "broken-goodcmd", **cache)
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert "command 'broken-goodcmd' could not be loaded from thub_goodcmd_missing:hello" in broken.stderr
    data = json.loads(_thub(commands_site, "plugins", "--json", **cache).stdout)
    failure = next(f for f in data["failures"] if f["name"] == "thub_badcmd")
    assert failure["stage"] == "register commands" and "command registration exploded" in failure["error"]
    assert failure["distribution"] == "thub-badcmd"
    human = _thub(commands_site, "plugins", **cache)
    shown = human.stderr + human.stdout
    assert "thub_badcmd" in shown and "failed at register commands" in shown
    doctor = _thub(commands_site, "doctor", "core.python", "--json", **cache)
    assert any(f["name"] == "thub_badcmd" and f["stage"] == "register commands"
               for f in json.loads(doctor.stdout)["plugin_failures"])
    unknown = _thub(commands_site, "no-such-command", **cache)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    typo = _thub(commands_site, "hello-godcmd", **cache)
    assert typo.returncode == 2 and "did you mean 'hello-goodcmd'?" in typo.stderr


def test_a_failed_plugin_receives_no_run_events(thub_plugin) -> None:
    class HalfBroken:
        def __init__(self) -> None:
            self.events: list[RunEvent] = []

        @hookimpl
        def thub_register_backends(self, register):
            raise RuntimeError("registration bug")

        @hookimpl
        def thub_on_event(self, event):
            self.events.append(event)

    class Healthy:
        def __init__(self) -> None:
            self.events: list[RunEvent] = []

        @hookimpl
        def thub_on_event(self, event):
            self.events.append(event)

    broken, healthy = HalfBroken(), Healthy()
    registry = thub_plugin(("half", broken), ("healthy", healthy), entry_points=False)
    assert [f.stage for f in registry.failures if f.name == "half"] == ["register backends"]
    registry.fire(RunEvent("started", "/tmp/x", "sft", "trl"))
    assert broken.events == [] and [e.kind for e in healthy.events] == ["started"]


def test_a_backend_spec_names_its_translate_function(thub_plugin, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 16.1: the translation next to the runner, no hook needed; a wrapper still wraps it
    (tmp_path / "toyt_translate.py").write_text("def translate(algorithm, params):\n"
                                                "    return {'algorithm': algorithm, 'lr': params['learning_rate']}\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Named:
        @hookimpl
        def thub_register_algorithms(self, register):
            register(AlgorithmSpec("toyt", "a toy algorithm", "thub_builtins.params:SFTParams"))

        @hookimpl
        def thub_register_backends(self, register):
            register(BackendSpec("toytb", "toy backend", {"toyt": frozenset({"learning_rate"})}, "x:run",
                                 translate="toyt_translate:translate"))

    class Wrapper:
        @hookimpl(wrapper=True)
        def thub_translate_params(self, algorithm, backend, params):
            native = yield
            return {**native, "wrapped": True} if backend == "toytb" else native

    registry = thub_plugin(("named", Named()), ("wrapper", Wrapper()), entry_points=False)
    assert registry.translate("toyt", "toytb", {"learning_rate": 0.1}) == {"algorithm": "toyt", "lr": 0.1,
                                                                          "wrapped": True}
