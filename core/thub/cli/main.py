"""The ``thub`` command group. Subcommands are imported only when invoked (lazy group).

Exit codes: 0 ok, 1 failure, 2 usage or input error, 130 interrupted.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import click

from thub._version import __version__
from thub.errors import Interrupted, ThubError


class Failure(click.ClickException):
    """A :class:`ThubError` shown as ``Error: ...`` with its exit code (no traceback)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click types it a ClassVar, yet reads self.exit_code


class LazyGroup(click.Group):
    """Lists commands without importing them: every command, built-in or a plugin's, is registered
    through ``thub_register_commands`` by name, import string and short help, and listed from a
    cache (:mod:`thub.cli.plugin_commands`); a command is imported when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from thub.cli.plugin_commands import listing

        return sorted(listing())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        from thub.cli.plugin_commands import listing

        entry = listing().get(name)
        if entry is None:
            return None
        from thub.specs import load_object

        try:
            command = load_object(entry["target"])
        except Exception as exc:  # noqa: BLE001 - a broken plugin command must not take the CLI down
            raise ThubError(f"command {name!r} could not be loaded from {entry['target']}: "
                            f"{type(exc).__name__}: {exc} (see `thub plugins`)") from None
        if not isinstance(command, click.Command):
            raise ThubError(f"command {name!r}: {entry['target']} is a {type(command).__name__}, "
                            "not a click command")
        return _summarised(command, entry["short_help"])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own version calls get_command() on every name, importing every command module
        from thub.cli.plugin_commands import listing

        commands = listing()
        # a group's commands (CommandSpec.group: a dialect's command line): one line, not seven
        groups: dict[str, list[str]] = {}
        for name, entry in commands.items():  # as registered
            if entry.get("group"):
                groups.setdefault(entry["group"], []).append(name)
        own = [name for name in sorted(commands) if not commands[name].get("group")]
        if not own:
            return
        limit = formatter.width - 6 - max(len(name) for name in own)
        rows = [(name, _shorten(commands[name]["short_help"], limit)) for name in own]
        for group, names in groups.items():
            rows.append((f"{names[0]}, ...", _shorten(f"{group}: {', '.join(names)}", limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            if args and "No such command" in exc.message:
                from thub.errors import did_you_mean

                exc.message += did_you_mean(args[0], self.list_commands(ctx))  # type: ignore[misc]  # click: Final
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # click would print "Aborted!" and exit 1
            name = exc.name if isinstance(exc, Interrupted) else "SIGINT"
            click.echo(f"interrupted ({name})", err=True)
            raise click.exceptions.Exit(130) from None
        except ThubError as exc:
            from thub.redact import redact_text  # a message may quote a URI with a password in it

            raise Failure(redact_text(str(exc)), exc.exit_code) from None


def _summarised(command: click.Command, short_help: str) -> click.Command:
    """``command`` with its registered short help, the one definition of its summary: the line
    ``thub --help`` lists and the first paragraph of ``thub NAME --help``, above the docstring."""
    if short_help and command.short_help != short_help:
        command.short_help = short_help
        # dedented first: click dedents the whole text by its least indented line after the first
        command.help = short_help + (f"\n\n{inspect.cleandoc(command.help)}" if command.help else "")
    return command


def _shorten(text: str, limit: int) -> str:
    """Cut ``text`` at a word boundary to ``limit`` characters with '...', as click lists commands."""
    if len(text) <= limit:
        return text
    words: list[str] = []
    used = 0
    for word in text.split():
        if used + len(word) + (1 if words else 0) > limit - 3:
            break
        words.append(word)
        used += len(word) + (1 if len(words) > 1 else 0)
    return " ".join(words).rstrip(",;:.") + "..."


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from thub.manager import get_registry

    click.echo(f"thub {__version__} (Python {sys.version.split()[0]})")
    for info in get_registry().plugins.values():
        if not info.builtin:
            click.echo(f"  plugin {info.name}: {info.distribution} {info.version}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show thub's version and its plugins, then exit.")
def cli() -> None:
    """thub: LLM post-training (SFT, OSFT, LoRA, GRPO, DPO, KTO) on the backend of your choice.

    \b
    Examples:
      thub backends                      which backend runs which algorithm
      thub train sft --backend trl --config sft.yaml --dry-run
      thub train sft --model-path m --data-path d.jsonl --ckpt-output-dir out
      thub doctor                        find what is broken in this environment

    Docs: docs/cli.md
    """


def _help_sources() -> dict[str, int]:
    """Modification times of every file a ``thub train ALGO --help`` page is built from (thub's own
    packages, managed environments' manifests; the plugins' files are recorded with the page): a
    few hundred ``stat`` calls."""
    import os
    from importlib.util import find_spec

    roots = [os.path.dirname(sys.modules["thub"].__file__ or "")]
    builtins = find_spec("thub_builtins")
    if builtins is not None and builtins.submodule_search_locations:
        roots.extend(builtins.submodule_search_locations)
    found = {}
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    found[path] = os.stat(path).st_mtime_ns
    from thub.envs.paths import MANIFEST_NAME, envs_dir

    try:  # managed environments add backends (their manifests are read at registry load)
        for entry in os.scandir(envs_dir()):
            manifest = os.path.join(entry.path, MANIFEST_NAME)
            if os.path.exists(manifest):
                found[manifest] = os.stat(manifest).st_mtime_ns
    except OSError:
        pass
    return found


def _train_help(argv: list[str]) -> bool:
    """Print ``thub train ALGO --help`` from the cache when nothing it depends on changed.

    Building that page imports the plugins and pydantic and builds the parameter models (~0.5 s;
    issue 18 asks <= 0.25 s). The page is cached with :mod:`thub.discovery` under the installed
    distributions, the terminal width, the files of thub, its built-in plugins and the external
    plugins; any ``THUB_*`` variable (it may change what a run would do) bypasses the cache.
    Returns False when the page was not printed from the cache (click then builds it as usual).
    """
    import os
    import shutil

    if len(argv) != 3 or argv[0] != "train" or argv[2] not in ("--help", "-h") or argv[1].startswith("-"):
        return False
    if any(name.startswith("THUB_") for name in os.environ):
        return False
    from thub.discovery import fingerprint, read_cache, unchanged, write_cache

    width = shutil.get_terminal_size().columns
    key = f"{fingerprint()}:{width}:{__version__}:{argv[1]}"
    name = f"help-train-{argv[1]}.json"
    sources = _help_sources()
    hit = read_cache(name, key)
    try:
        if isinstance(hit, dict) and hit["sources"] == sources and unchanged(hit["plugins"]):
            click.echo(hit["text"])
            return True
    except (KeyError, TypeError, AttributeError):
        pass
    try:
        # the contexts click builds for `thub train ALGO --help` (same settings, so the same page)
        root = click.Context(cli, info_name="thub", **cli.context_settings)
        group = cli.get_command(root, "train")
        if not isinstance(group, click.Group):
            return False
        middle = click.Context(group, info_name="train", parent=root, **group.context_settings)
        command = group.get_command(middle, argv[1])
        if command is None:
            return False
        text = click.Context(command, info_name=argv[1], parent=middle, **command.context_settings).get_help()
    except Exception:  # noqa: BLE001 - click reports the problem the usual way
        return False
    from thub.cli.plugin_commands import plugin_files
    from thub.manager import get_registry

    write_cache(name, key, {"text": text, "sources": sources, "plugins": plugin_files(get_registry())})
    click.echo(text)
    return True


_HANDLER_PID: list[int] = []  # the process that installed _interrupt (main)


def _interrupt(signum: int, _frame: Any) -> None:
    import os

    if _HANDLER_PID and os.getpid() != _HANDLER_PID[0]:
        # a process forked from thub (a library's multiprocessing.Pool, stopped with terminate()) inherits
        # this handler: there the signal ends the process as it would without thub, with no traceback
        import signal

        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Interrupted(signum)


_STOP_SIGNALS: list[Any] = []  # filled by install_signal_handlers (SIGINT, SIGTERM)
_MASKS: list[Any] = []  # the forking thread's signal mask, kept across one os.fork()


def _before_fork() -> None:
    import signal

    _MASKS.append(signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS))


def _after_fork_in_parent() -> None:
    import signal

    if _MASKS:
        signal.pthread_sigmask(signal.SIG_SETMASK, _MASKS.pop())


def _after_fork_in_child() -> None:
    """A forked child (a library's ``multiprocessing.Pool`` worker) stops on SIGINT/SIGTERM as it
    would without thub. The signals were blocked across the fork, so one sent at once (``Pool.terminate``
    right after the pool started) waits in the kernel and ends the child here, with the default action;
    with thub's Python handler inherited it could arrive before the interpreter's after-fork reset, be
    cleared there and leave the child, and its parent's ``join``, waiting forever."""
    import signal

    try:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
    finally:
        if _MASKS:
            signal.pthread_sigmask(signal.SIG_SETMASK, _MASKS.pop())


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM stop thub like Ctrl-C (exit 130, files left whole); processes forked
    from it get the default action back (:func:`_after_fork_in_child`)."""
    import os
    import signal

    first = not _HANDLER_PID
    _HANDLER_PID[:] = [os.getpid()]
    _STOP_SIGNALS[:] = [signal.SIGINT, signal.SIGTERM]
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    if first:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    install_signal_handlers()
    try:
        if _train_help(sys.argv[1:] if argv is None else list(argv)):
            sys.exit(0)
        cli.main(args=argv, prog_name="thub", standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
