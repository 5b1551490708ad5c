"""``thub plot RUN_DIR... [-o FILE.png]``: metric curves by step, several runs overlaid.

Always prints a summary per run (stderr, or JSON on stdout with ``--json``); writes an image
with matplotlib when ``-o`` is given; ``--ascii`` adds a sparkline per run. See docs/plot.md.
"""

from __future__ import annotations

import click

from thub.ui.output import console, emit_json, stdout_console, table


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option("--metric", "-m", default=None,
              help="loss, reward, eval_loss, learning_rate, grad_norm or any key in the metrics "
                   "(default: loss; reward for GRPO runs).")
@click.option("--eval", "eval_metric", default=None, metavar="[TASK:]METRIC",
              help="Plot a thub eval metric (RUN_DIR/eval/) per checkpoint step instead of a training metric.")
@click.option("--x", "x_axis", type=click.Choice(["step", "tokens", "time"]), default="step", show_default=True,
              help="x-axis: optimizer step, tokens seen, or seconds since the first line.")
@click.option("--ema", "ema_alpha", type=float, default=None, metavar="A",
              help="Also draw an exponential moving average with smoothing factor A in (0, 1], e.g. 0.1.")
@click.option("--label", "labels", multiple=True,
              help="Legend label, once per run in order (default: from thub_run.json).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the plot to this .png, .svg or .pdf (needs matplotlib).")
@click.option("--title", default=None, help="Plot title.")
@click.option("--ascii", "ascii_plot", is_flag=True, help="Draw a sparkline per run in the terminal.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-run summary (and points) as JSON on stdout.")
def plot(run_dirs: tuple[str, ...], metric: str | None, eval_metric: str | None, x_axis: str, ema_alpha: float | None,
         labels: tuple[str, ...], output: str | None, title: str | None, ascii_plot: bool, as_json: bool) -> None:
    """\b
    Examples:
      thub plot runs/demo-sft                         summary of the loss curve
      thub plot runs/a runs/b --ema 0.2 -o loss.png   two runs overlaid, smoothed
      thub plot runs/demo-grpo --metric reward --ascii
      thub plot runs/demo-sft --eval arith:acc        a thub eval metric per checkpoint

    Reads thub's training_metrics.jsonl, or for runs made outside thub TRL's trainer_state.json and
    mini-trainer / instructlab metric files. Docs: docs/plot.md
    """
    from thub.insight.plotting import ema, load_eval_series, load_series, sparkline, write_image

    if eval_metric:
        from thub.errors import UsageError

        if metric or x_axis != "step":
            raise UsageError("--eval plots an eval metric by step: it takes no --metric or --x")
        series = load_eval_series(list(run_dirs), eval_metric, labels=list(labels) or None)
        for s in series:
            s.smoothed = ema(s.ys, ema_alpha) if ema_alpha is not None else None
    else:
        series = load_series(list(run_dirs), metric=metric, x_axis=x_axis, labels=list(labels) or None,
                             ema_alpha=ema_alpha)
    for s in series:
        for warning in s.warnings:
            click.echo(f"warning: {warning}", err=True)
    written = None
    error = None
    if output:
        from thub.errors import ThubError

        try:
            written = write_image(series, output, title=title)
        except ThubError as exc:
            if exc.exit_code == 2:
                raise
            error = exc
    if as_json:
        emit_json({
            "schema_version": 1,
            "output": str(written) if written else None,
            "runs": [{**s.summary(), "x": s.xs, "y": s.ys, "smoothed": s.smoothed} for s in series],
        })
    else:
        rows = [[s.label, s.metric if s.key == s.metric else f"{s.metric} ({s.key})", str(len(s.ys)),
                 f"{_fmt(s.xs[0])}-{_fmt(s.xs[-1])}", _fmt(s.ys[0]), _fmt(s.ys[-1]), _fmt(s.summary()["best"]),
                 _fmt(s.smoothed[-1] if s.smoothed else None)] for s in series]
        table(None, ["run", "metric", "points", x_axis, "first", "last", "best", "last EMA"], rows)
        out = stdout_console()  # the summary is what the user asked to see; "wrote" is a diagnostic
        if ascii_plot:
            width = max(len(s.label) for s in series)
            for s in series:
                out.print(f"{s.label:<{width}}  {sparkline(s.smoothed or s.ys)}  {_fmt(s.ys[0])} -> {_fmt(s.ys[-1])}",
                          markup=False)
        for s in series:
            for note in s.notes:
                out.print(f"[dim]{s.label}: {note}[/dim]")
        if written:
            console().print(f"wrote {written}")
    if error:
        raise error
