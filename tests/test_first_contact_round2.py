"""Issue 24, items 6, 7 and 9: what a newcomer meets right after `scripts/setup.sh` is right. The
README's demo command is the one setup.sh ran, every fix the doctor or a backend prints is a
command that exists, listings name what `thub install` offers, and piped or narrow tables read well.
Each test runs the real CLI (click's runner or a piped child process) or reads the real files."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from thub import hookimpl
from thub.specs import BackendSpec

ROOT = Path(__file__).resolve().parents[1]


def thub(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``thub ARGS`` as a child process with stdout and stderr piped (not a terminal)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_") and k != "COLUMNS"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=300, cwd=cwd or ROOT)


# --- item 6: the README's demo command is the one setup.sh runs ---------------------------------


def _readme_demo() -> list[str]:
    """The `thub train` line of the README's code block right after "runs the demo"."""
    readme = (ROOT / "README.md").read_text()
    after = readme.split("runs the demo", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, flags=re.S)
    assert block, "no code block after 'runs the demo' in README.md"
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return shlex.split(next(line for line in lines if line.startswith("thub train")))


def _setup_demo() -> list[str]:
    """The demo command scripts/setup.sh runs (its `demo=(...)` array)."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    found = re.search(r"^\s*demo_command=\((.*?)\)\s*$", setup, flags=re.M)
    assert found, "scripts/setup.sh defines no demo_command=(...) array"
    return shlex.split(found.group(1))


def test_readme_demo_command_is_the_one_setup_runs() -> None:
    """Right after setup.sh, runs/demo-sft holds a finished run: the README's command must be the
    one setup.sh ran (with --overwrite), or it fails on the first thing a newcomer types."""
    assert _readme_demo() == _setup_demo()
    assert "--overwrite" in _readme_demo()
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '"${demo_command[@]}"' in setup, "setup.sh runs the array it prints"


# --- item 7: every fix is a command that exists --------------------------------------------------

#: Programs a fix may name that are not on this machine's PATH: they come with an NVIDIA driver,
#: a package manager or root access, on the machines where those fixes apply.
ELSEWHERE = {"nvidia-smi", "sudo", "dnf", "apt-get", "modprobe", "rmmod", "reboot", "uv"}
#: Shell builtins a fix may use.
BUILTINS = {"export", "unset", "cd", "kill", "source", "."}
OPERATORS = {"&&", "||", ";", "|", "&"}


def _segments(line: str) -> list[list[str]]:
    """The simple commands of one shell line, comments dropped, VAR=value prefixes removed."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    words = list(lexer)
    segments: list[list[str]] = [[]]
    for word in words:
        if word in OPERATORS:
            segments.append([])
        else:
            segments[-1].append(word)
    result = []
    for segment in segments:
        while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
            segment = segment[1:]
        if segment:
            result.append(segment)
    return result


def _thub_problem(args: list[str]) -> str | None:
    """Why click refuses ``thub ARGS`` (the real CLI, parsed, not run), or None."""
    import click

    from thub.cli.main import cli

    try:
        ctx = cli.make_context("thub", list(args))
        command: click.Command = cli
        while isinstance(command, click.Group):
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                return f"`thub {' '.join(args)}` names no subcommand"
            name, sub, rest = command.resolve_command(ctx, rest)
            assert sub is not None and name is not None
            ctx = sub.make_context(name, rest, parent=ctx)
            command = sub
    except click.exceptions.Exit:
        return None
    except click.ClickException as exc:
        return f"`thub {' '.join(args)}`: {exc.format_message()}"
    return None


def _pip_problem(args: list[str]) -> str | None:
    """A requirement that pip would fetch from the index although the index has no such thing."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    if "install" not in args:
        return None
    takes_value = {"-c", "-r", "--constraint", "--requirement", "--index-url", "-i", "--extra-index-url",
                   "--python", "--target", "-t", "--find-links", "-f"}
    words = args[args.index("install") + 1:]
    for index, word in enumerate(words):
        if word.startswith("-") or (index and words[index - 1] in takes_value) or word.startswith((".", "/", "~")):
            continue
        try:
            name = canonicalize_name(Requirement(word).name)
        except InvalidRequirement:
            return f"pip install {word!r}: not a requirement"
        if name == "thub" or name.startswith("thub-plugin-"):
            return f"pip install {word!r}: thub and its plugins are not on the package index (use `thub install`)"
    return None


def fix_problems(fix: str) -> list[str]:
    """Why the lines of ``fix`` are not commands that exist ([] when they all are)."""
    problems = []
    for line in fix.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            segments = _segments(line)
        except ValueError as exc:
            problems.append(f"{line!r}: not shell ({exc})")
            continue
        for words in segments:
            program, args = words[0], words[1:]
            if program in ("python", "python3") or program == sys.executable:
                if args[:2] == ["-m", "pip"]:
                    program, args = "pip", args[2:]
                elif args[:2] == ["-m", "thub"]:
                    program, args = "thub", args[2:]
                elif args[:1] == ["-m"]:
                    continue
            if program == "uv" and args[:1] == ["pip"]:
                program, args = "pip", args[1:]
            if program == "thub":
                problem = _thub_problem(args)
            elif program == "pip" or program.endswith("/pip"):
                problem = _pip_problem(args)
            elif program in BUILTINS or program in ELSEWHERE:
                problem = None
            elif "/" in program:
                problem = None if os.access(os.path.expanduser(program), os.X_OK) else f"{program}: no such program"
            else:
                problem = None if shutil.which(program) else f"{program}: not on PATH and no known installer"
            if problem:
                problems.append(f"{line!r}: {problem}")
    return problems


def test_the_fix_checker_catches_what_it_should() -> None:
    """The checker itself: it refuses what the issue found and accepts real commands."""
    assert fix_problems("thub install unsloth --into managed\n# a comment") == []
    assert fix_problems(f"{sys.executable} -m pip install 'verl[vllm]==0.9.1'") == []
    assert fix_problems("export CUDA_VISIBLE_DEVICES=0,1   # or unset it") == []
    assert fix_problems("CUDA_VISIBLE_DEVICES=0 thub doctor core.gpus") == []
    assert fix_problems("python -m venv ~/.venvs/art && ~/.venvs/art/bin/pip install 'thub-plugin-art[backend]'")
    assert fix_problems("pip install 'thub-plugin-trl' torch==2.13.0")
    assert fix_problems("thub install unsloth --into elsewhere")
    assert fix_problems("thub instal unsloth")
    assert fix_problems("thub doctor --no-such-option")
    assert fix_problems("run on a machine with an NVIDIA GPU")


FAKE_SMI = """#!/bin/sh
case "$*" in
  *query-gpu*) printf '%s\\n' "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 79000, 81559, 9.0" \\
                              "1, GPU-bbbb, NVIDIA H100 80GB HBM3, 3, 81559, 9.0" ;;
  *query-compute-apps*) printf '%s\\n' "4242, GPU-aaaa, 78000, python" ;;
  -L) printf '%s\\n' "GPU 0: NVIDIA H100 (UUID: GPU-aaaa)" "GPU 1: NVIDIA H100 (UUID: GPU-bbbb)" ;;
  *) printf '%s\\n' "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |" ;;
esac
"""
BROKEN_SMI = "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n"


def _tool_dir(directory: Path, script: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "nvidia-smi"
    tool.write_text(script)
    tool.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


def _all_fixes(registry, slow: bool = False) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Every fix the registered checks give here for no --backend, and the backend check's for
    each backend (the only check that reads the backend: the others run for all of them)."""
    from thub.doctor import make_context, run_checks

    specs = [s for s in registry.checks.values() if slow or "slow" not in s.tags]
    runs = [(None, specs)] + [(b, [registry.checks["core.backend-requirements"]]) for b in sorted(registry.backends)]
    fixes: dict[str, str] = {}
    for backend, chosen in runs:
        for outcome in run_checks(chosen, make_context(backend=backend, env=dict(os.environ))):
            if outcome.status in ("warn", "fail") and outcome.result.fix:
                fixes[f"{outcome.id} (backend {backend}, {outcome.result.summary})"] = outcome.result.fix
    return fixes


def _assert_commands(fixes: dict[str, str]) -> None:
    bad = {where: problems for where, fix in fixes.items() if (problems := fix_problems(fix))}
    assert not bad, "fixes that are not commands that exist:\n" + "\n".join(
        f"{where}:\n    " + "\n    ".join(problems) for where, problems in bad.items())


def _assert_one_install_command_per_backend(fixes: dict[str, str], *, some: bool = True) -> None:
    """One report, one fix per problem: every check that says how to install backend X says the
    same `thub install X ...` command (``some``: and there is at least one)."""
    commands: dict[str, set[str]] = {}
    for fix in fixes.values():
        for line in fix.splitlines():
            command = line.split("#")[0].strip()
            if command.startswith("thub install "):
                commands.setdefault(command.split()[2], set()).add(command)
    assert commands or not some, fixes
    assert all(len(found) == 1 for found in commands.values()), commands


def test_every_backend_install_hint_is_the_thub_install_command(thub_registry) -> None:  # type: ignore[no-untyped-def]
    """Each installed backend's BackendSpec.install: a command that exists, and for a backend
    `thub install` knows, the `thub install NAME` it would run (no hand-made venv, no index)."""
    from thub.envs.catalog import catalog_entry

    hints = {f"{b.name} install hint": b.install for b in thub_registry.backends.values() if b.install}
    _assert_commands(hints)
    for spec in thub_registry.backends.values():
        entry = catalog_entry(spec.name)
        if entry is None or spec.provenance.distribution != entry.distribution:
            continue
        commands = [line.split("#")[0].strip() for line in (spec.install or "").splitlines()]
        commands = [c for c in commands if c]
        assert commands and all(c.startswith(f"thub install {entry.name}") for c in commands), (spec.name, commands)


def test_every_fix_any_check_gives_is_a_command_that_exists(thub_registry, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            monkeypatch) -> None:
    """All checks of all installed plugins, here (no GPU), with a working and with a broken
    nvidia-smi, and with the failures that can be fabricated: every fix line is a command."""
    import thub.selection
    import thub_builtins.checks.system as system
    from thub.manager import PluginFailure

    fixes = _all_fixes(thub_registry, slow=True)
    # as installed: none when every backend's requirements are met (setup.sh + thub install mini-trainer)
    _assert_one_install_command_per_backend(fixes, some=False)
    # a GPU machine: two H100s, one held by another process, no uv on PATH
    monkeypatch.setenv("PATH", _tool_dir(tmp_path / "gpu", FAKE_SMI))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fixes |= _all_fixes(thub_registry)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,7")
    fixes |= _all_fixes(thub_registry)
    monkeypatch.setenv("PATH", _tool_dir(tmp_path / "broken", BROKEN_SMI))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    fixes |= _all_fixes(thub_registry)
    # no GPU and a library missing for every backend; a plugin that failed to load; an old Python
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(thub.selection, "requirement_problem", lambda spec: f"{spec} is not installed")
    monkeypatch.setattr(system, "MIN_PYTHON", (3, 99))
    thub_registry.failures.append(PluginFailure("trl", "thub-plugin-trl", "0.1.0", "load", "ImportError: x"))
    missing = _all_fixes(thub_registry)
    _assert_one_install_command_per_backend(missing)  # every backend lacks a library: install lines, one each
    fixes |= missing
    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: True)
    fixes |= _all_fixes(thub_registry)
    assert any("core.backend-requirements" in where for where in fixes)  # the situations did arise
    assert any("core.plugins" in where for where in fixes) and any("core.gpu-memory" in where for where in fixes)
    _assert_commands(fixes)


# --- item 9: smaller things a newcomer reads ---------------------------------------------------


class _GpuOnly:
    """GPU-only backends, as many as asked, with everything they need installed."""

    def __init__(self, *names: str) -> None:
        self.names = names

    @hookimpl
    def thub_register_backends(self, register):  # type: ignore[no-untyped-def]
        for name in self.names:
            register(BackendSpec(name, "gpu only", {"sft": frozenset()}, "nowhere:run", needs_cuda=True,
                                 requirements=("packaging",)))


def test_doctor_grammar_one_backend_needs_several_need(thub_plugin, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import thub.selection
    from thub.doctor import make_context, run_checks

    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: False)
    for names, verb in ((("gpua",), "gpua needs"), (("gpua", "gpub"), "gpua, gpub need")):
        registry = thub_plugin(("gpu", _GpuOnly(*names)), entry_points=False)
        (outcome,) = run_checks([registry.checks["core.backend-requirements"]], make_context())
        text = " ".join([outcome.result.summary, *outcome.result.details])
        assert f"{verb} an NVIDIA GPU" in text, text
        if len(names) == 1:
            assert "gpua need an" not in text, text


def test_backends_lists_what_thub_install_offers(thub_plugin, thub_cli) -> None:  # type: ignore[no-untyped-def]
    """Nothing installed: `thub backends sft` still names every backend thub can install for sft,
    marked as not installed, each with its install command (table and --json)."""
    from thub.envs.catalog import backends_running

    thub_plugin(entry_points=False)
    listing = thub_cli("backends", "sft")
    assert listing.exit_code == 0, listing.stderr
    offered = [e.name for e in backends_running("sft")]
    assert offered and "trl" in offered
    for name in offered:
        row = next((line for line in listing.stdout.splitlines() if line.startswith(f"{name} ")), None)
        assert row is not None, listing.stdout
        assert "not installed" in row and f"thub install {name}" in row, row
    data = thub_cli("backends", "sft", "--json").json()
    assert data["backends"] == []
    assert [b["name"] for b in data["installable"]] == offered
    assert all(b["install"].startswith(f"thub install {b['name']}") for b in data["installable"])
    osft = thub_cli("backends", "osft", "--json").json()
    assert [b["name"] for b in osft["installable"]] == ["mini-trainer"]


def test_installed_backends_are_not_offered_again(thub_registry, thub_cli) -> None:  # type: ignore[no-untyped-def]
    installed = {b.provenance.distribution for b in thub_registry.backends.values()}
    data = thub_cli("backends", "--json").json()
    assert not [b for b in data["installable"] if b["distribution"] in installed]


def test_missing_path_suggests_the_sibling_it_resembles(tmp_path: Path) -> None:
    """`--model-path examples/tiy` next to examples/tiny, a data file one letter off: did you mean."""
    run = ["train", "sft", "--backend", "trl", "--ckpt-output-dir", str(tmp_path / "run")]
    model = thub(*run, "--model-path", "examples/tiy", "--data-path", "examples/data/chat.jsonl",
                 env={"HF_HUB_OFFLINE": "1"})
    assert model.returncode == 2, model.stderr
    assert "did you mean 'examples/tiny'?" in model.stderr, model.stderr
    data = thub(*run, "--model-path", "examples/tiny", "--data-path", "examples/data/chta.jsonl", "--dry-run")
    assert data.returncode == 2, data.stderr
    assert "did you mean 'examples/data/chat.jsonl'?" in data.stderr, data.stderr
    deeper = thub(*run, "--model-path", "exmples/tiny", "--data-path", "examples/data/chat.jsonl",
                  env={"HF_HUB_OFFLINE": "1"})
    assert "did you mean 'examples/tiny'?" in deeper.stderr, deeper.stderr
    assert not (tmp_path / "run").exists()


def test_piped_output_has_no_trailing_whitespace() -> None:
    for args in (("plugins",), ("backends",), ("algorithms",), ("doctor", "core.python", "core.tmpdir")):
        done = thub(*args)
        padded = [line for line in done.stdout.splitlines() if line != line.rstrip()]
        assert not padded, (args, padded[:3])
        assert done.stdout.strip(), args


def test_narrow_tables_wrap_between_words() -> None:
    """On a 100-column screen cells wrap at spaces: every word of the narrow table is a whole word
    of the same table unwrapped, and no line is wider than the screen."""
    for args in (("backends",), ("plugins",), ("algorithms",)):
        wide = thub(*args).stdout
        narrow = thub(*args, env={"COLUMNS": "100"}).stdout
        assert max(len(line) for line in narrow.splitlines()) <= 100, narrow
        whole = set(wide.split())
        broken = [word for word in narrow.split() if word not in whole]
        assert not broken, (args, broken[:5], narrow)


def test_config_init_names_each_group_once() -> None:
    from thub.cli.config_cmd import render_template

    for algorithm in ("sft", "grpo", "lora_sft"):
        headers = [line for line in render_template(algorithm).splitlines() if line.startswith("# --- ")]
        assert len(headers) == len(set(headers)) > 1, headers


def test_help_says_what_an_unset_default_means() -> None:
    done = thub("train", "sft", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "default: -" not in text
    assert "default: the backend's" in text
    cli_doc = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert "default: the backend's" in cli_doc
