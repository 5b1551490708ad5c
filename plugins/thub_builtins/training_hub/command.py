"""Training Hub's ``thub`` command line, run by thub: ``thub sft|osft|lora-sft|lora-grpo|grpo|gepa|
embedding-sft --config FILE --kebab-flags ...`` as Training Hub 0.11.2 takes it.

Training Hub ships a console script named ``thub`` too; whichever was installed last wins, so its
users' command lines must work here unchanged. Each subcommand parses its flags as Training Hub
does (:mod:`thub_builtins.training_hub.cli`) and makes the same call as ``thub.sft(...)`` and
friends (:func:`thub_builtins.training_hub.functions._training_hub_run`: one mapping for the Python API and the command
line), printing the equivalent ``thub train`` command once on stderr. The subcommands are hidden
from ``thub --help`` (one line there names them).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from thub.errors import ThubError, UsageError

HELP_LINE = ("Training Hub compatibility: thub sft|osft|lora-sft|lora-grpo|grpo|gepa|embedding-sft "
             "[--config FILE] [--FLAG VALUE ...] run as Training Hub's CLI (docs/migrating-from-training-hub.md).")


def equivalent_command(resolved: Any) -> str:
    """The ``thub train`` command that resolves to the same values: every value not from a
    default, as thub's own flag (``--set NAME=VALUE`` where thub has none)."""
    import json

    from thub.config.fields import param_infos

    infos = param_infos(resolved.algorithm.load_parameters())
    values = resolved.values()
    argv = ["thub", "train", resolved.algorithm.name, "--backend", resolved.backend.name]
    for name in sorted(resolved.user_set()):
        info, value = infos.get(name), values.get(name)
        if info is None or value is None:
            continue
        if info.is_flag and isinstance(value, bool):
            argv.append(f"--{'' if value else 'no-'}{info.option.removeprefix('--')}")
        elif info.is_list and isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            for item in value:
                argv += [info.option, str(item)]
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            argv += [info.option, str(value)]
        else:
            argv += ["--set", f"{name}={json.dumps(value)}"]
    return shlex.join(argv)


def _say(line: str) -> None:
    click.echo(line, err=True)


def run(subcommand: str, argv: list[str]) -> None:
    """``thub SUBCOMMAND ARGV`` as Training Hub runs it; bad input raises UsageError (exit 2)."""
    from thub import __version__, api
    from thub.manager import get_registry
    from thub_builtins.training_hub import cli, functions
    from thub_builtins.training_hub.rules import FUNCTIONS

    keywords, control = cli.keywords(subcommand, argv)
    if control["version"]:
        click.echo(f"thub {__version__} (runs Training Hub 0.11.2's command line)")
        return
    function = cli.SUBCOMMANDS[subcommand]
    registry = get_registry()
    if function not in registry.algorithms:
        raise UsageError(f"thub {subcommand}: Training Hub's {function} is not available here: no installed plugin "
                         f"registers the algorithm {function!r} (`thub algorithms` lists those that are)")
    printed: list[str] = []

    def on_resolved(resolved: Any) -> None:
        if not printed:  # once, before anything runs
            printed.append(equivalent_command(resolved))
            _say(f"thub {subcommand}: Training Hub's command line; the thub equivalent is:\n  {printed[0]}")
            for note in resolved.notes if not control["dry_run"] else ():  # the dry run's plan lists them
                _say(f"training-hub name {note}")

    caller = api.Caller(label=f"thub {subcommand}", command_line=("thub", subcommand, *argv),
                         dry_run=control["dry_run"], on_resolved=on_resolved)
    runs = {"overwrite": control["overwrite"], "resume": control["resume"], "allow_ignored": control["allow_ignored"],
            "progress": not control["as_json"]}
    if function in FUNCTIONS:
        outcome = functions._training_hub_run(function, (), {**keywords, **runs}, caller)
    else:  # a thub algorithm with no Training Hub keyword table: thub's names are Training Hub's
        backend = keywords.pop("backend", None)
        outcome = api.train_call(function, backend, None, None, runs["overwrite"], runs["resume"],
                                 runs["allow_ignored"], runs["progress"], keywords, caller=caller)
    if control["dry_run"]:
        from thub.ui.plan import show_plan

        show_plan(outcome, control["as_json"])
        return
    from thub.runner.poststeps import exit_code
    from thub.ui.output import emit_json

    if control["as_json"]:
        emit_json(outcome)
    sys.exit(exit_code(outcome))


def _command(subcommand: str) -> click.Command:
    def callback(args: tuple[str, ...]) -> None:
        argv = list(args)
        show = any(arg == "--traceback" for arg in argv)
        try:
            run(subcommand, argv)
        except (ThubError, KeyboardInterrupt):
            if show:
                import traceback

                traceback.print_exc()
            raise  # the group prints it (exit 2 for bad input, 130 interrupted)
        except Exception as exc:  # noqa: BLE001 - Training Hub's contract: one error line, --traceback for more
            if show:
                import traceback

                traceback.print_exc()
            raise ThubError(f"{type(exc).__name__}: {exc} (--traceback shows where)") from None

    return click.Command(
        subcommand, callback=callback, hidden=True, add_help_option=False,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "allow_interspersed_args": False},
        help=f"Training Hub's `thub {subcommand}` ({subcommand} --help lists its flags).",
    )


sft = _command("sft")
osft = _command("osft")
lora_sft = _command("lora-sft")
lora_grpo = _command("lora-grpo")
grpo = _command("grpo")
gepa = _command("gepa")
embedding_sft = _command("embedding-sft")
