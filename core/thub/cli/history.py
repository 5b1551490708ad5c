"""Run history commands: ``list [DIR]``, ``show RUN``, ``diff RUN_A RUN_B``, ``compare RUN_A RUN_B`` (eval results).

Exposed as the group ``history`` (register ``"history": "thub.cli.history:history"``); the
same commands can be attached to ``thub runs`` with ``runs.add_command(list_runs)`` etc.
"""

from __future__ import annotations

import time

import click

from thub.ui.output import console, emit_json, stdout_console, table


def _when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "-" if value is None else str(value)


def _status(run: dict[str, object]) -> str:
    """``running (pid 12, 13)`` for a live run, else its status."""
    pids = run.get("pids")
    if isinstance(pids, list) and pids:
        return f"{run['status']} (pid {', '.join(map(str, pids))})"
    return str(run["status"])


@click.command("list", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON on stdout.")
def list_runs(directory: str, as_json: bool) -> None:
    """Runs under DIRECTORY (default .): status, algorithm, backend, steps, final loss/reward, duration."""
    from thub.insight.history import summarise_all

    runs, skipped = summarise_all(directory)
    for path, why in skipped:
        click.echo(f"warning: skipped {path}: {why}", err=True)
    if as_json:
        emit_json({"schema_version": 1, "runs": runs})
        return
    if not runs:
        console().print(f"no thub runs under {directory}")
        return
    rows = [[r["path"], _status(r), r["algorithm"] or "-", r["backend"] or "-",
             f"{_value(r['step'])}/{_value(r['max_steps'])}", f"{r['final_metric']} {_value(r['final_value'])}",
             _duration(r["duration_seconds"]), _when(r["started"])] for r in runs]
    table(None, ["run", "status", "algorithm", "backend", "steps", "final", "duration", "started"], rows)


@click.command("show", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON on stdout.")
def show_run(run: str, as_json: bool) -> None:
    """One run: resolved configuration with sources, versions, result and checkpoints."""
    from thub.config.fields import format_value
    from thub.insight.history import show

    data = show(run)
    if as_json:
        emit_json({"schema_version": 1, **data})
        return
    out = stdout_console()
    out.print(f"[bold]{data['path']}[/bold]: {data['status']}, {data['algorithm']} on {data['backend']}, "
              f"step {_value(data['step'])}/{_value(data['max_steps'])}, {data['final_metric']} "
              f"{_value(data['final_value'])}, {_duration(data['duration_seconds'])}, started {_when(data['started'])}")
    rows = [[name, format_value(p.get("value")), str(p.get("source"))] for name, p in data["parameters"].items()]
    table(None, ["parameter", "value", "source"], rows)
    versions = data["versions"]
    library = versions.get("library") or {}
    out.print(f"thub {versions.get('thub')}, {library.get('name')} {library.get('version')}, "
              f"Python {versions.get('python')}")
    if data["command_line"]:
        out.print("command: " + " ".join(data["command_line"]), markup=False)
    for path in data["checkpoints"]:
        out.print(f"checkpoint: {path}", markup=False)
    if data["final_checkpoint"]:
        out.print(f"final checkpoint: {data['final_checkpoint']}", markup=False)
    from thub.trackers import describe

    for name, info in data["trackers"].items():
        out.print(f"tracker: {describe(name, info)}", markup=False)
    _eval_tables(data.get("eval"))


def _eval_tables(summary: dict[str, object] | None) -> None:
    """One table per evaluated task: each model's metrics and the tuned-minus-base difference."""
    from thub.evaluate.results import table_rows

    tasks = (summary or {}).get("tasks") or {}
    for task, data in tasks.items():  # type: ignore[attr-defined]
        models = {label: {**entry, "higher_is_better": data.get("higher_is_better") or {}}
                  for label, entry in (data.get("models") or {}).items()}
        columns, rows = table_rows({"models": models})
        table(f"eval {task}", columns, rows)


@click.command("diff", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_a", type=click.Path(file_okay=False))
@click.argument("run_b", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON on stdout.")
def diff_runs(run_a: str, run_b: str, as_json: bool) -> None:
    """The parameters (and algorithm, backend, library version) that differ between two runs."""
    from thub.config.fields import format_value
    from thub.insight.history import diff

    data = diff(run_a, run_b)
    if as_json:
        emit_json({"schema_version": 1, **data})
        return
    rows = [[d["name"], format_value(d["a"]), format_value(d["b"])] for d in data["run"]]
    rows += [[d["name"], format_value(d["a"]), format_value(d["b"])] for d in data["parameters"]
             if d["name"] != "ckpt_output_dir"]
    if not rows:
        console().print("no differences besides the run directory")
        return
    table(None, ["", run_a, run_b], rows)


@click.command("compare", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_a", type=click.Path(file_okay=False))
@click.argument("run_b", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON on stdout.")
def compare_runs(run_a: str, run_b: str, as_json: bool) -> None:
    """Two runs' thub eval results side by side: per task and metric, each one's base, tuned and delta."""
    from thub.evaluate.results import comparison, verdict
    from thub.insight.history import summarise

    for run in (run_a, run_b):
        summarise(run)  # not a run: a clear error
    data = comparison(run_a, run_b)
    if as_json:
        emit_json({"schema_version": 1, **data})
        return
    if not data["rows"]:
        console().print("neither run has eval results (`thub eval RUN --base --tasks ...`)")
        return

    def delta(side: dict[str, object], higher: bool | None) -> str:
        value = side.get("delta")
        return "-" if not isinstance(value, float) else f"{value:+.4g} {verdict(value, higher)}".rstrip()

    rows = [[r["task"], r["metric"], *(cell for side in ("a", "b") for cell in (
        _value(r[side]["base"]), _value(r[side]["tuned"]), delta(r[side], r["higher_is_better"])))]
        for r in data["rows"]]
    table(None, ["task", "metric", "A base", "A tuned", "A delta", "B base", "B tuned", "B delta"], rows)
    console().print(f"A: {run_a}\nB: {run_b}", markup=False)


class _HistoryGroup(click.Group):
    """Shows a thub error as ``Error: ...`` with its exit code also when invoked on its own."""

    def invoke(self, ctx: click.Context) -> object:
        from thub.cli.main import Failure
        from thub.errors import ThubError

        try:
            return super().invoke(ctx)
        except ThubError as exc:
            raise Failure(str(exc), exc.exit_code) from None


@click.group(cls=_HistoryGroup, context_settings={"help_option_names": ["-h", "--help"]})
def history() -> None:
    pass


history.add_command(list_runs)
history.add_command(show_run)
history.add_command(diff_runs)
history.add_command(compare_runs)
