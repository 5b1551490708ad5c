"""``thub data check|preview|stats|prepare``: see what will be trained on before any GPU is touched.

A dataset is ``PATH`` or ``PATH:key=value,...`` with per-dataset settings (``format``,
``role_tag``, ``content_tag``, ``user_tag``, ``assistant_tag``, ``system_tag``, ``messages``,
``document_column``, ``prob``), given as arguments or with the repeatable ``--dataset``.
Bad input exits 2 with ``file:line: field: expected X, found Y``; nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from thub.data.mixing import STRATEGIES
from thub.data.tokenize import OVERLONG
from thub.errors import UsageError
from thub.ui.output import JSON_SCHEMA_VERSION, console, emit_json, stdout_console, table


class _FormatChoice(click.Choice):  # type: ignore[type-arg]
    """``auto`` or a registered data format, looked up when the option is used (or ``--help`` is
    shown), not when the command is imported."""

    def __init__(self) -> None:
        super().__init__(["auto"])

    @property  # type: ignore[override]
    def choices(self) -> list[str]:
        from thub.data.kinds import format_names

        return ["auto", *format_names()]

    @choices.setter
    def choices(self, value: Any) -> None:
        pass  # always the registry's


_FORMAT_CHOICE = _FormatChoice()


def _dataset_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """DATA arguments, --dataset, --format, mixing options (shared by every data command)."""
    for option in reversed([
        click.argument("paths", nargs=-1, metavar="DATA..."),
        click.option("--dataset", "-d", "datasets", multiple=True, metavar="SPEC",
                     help="A dataset PATH[:key=value,...]; repeatable (same as DATA arguments)."),
        click.option("--format", "data_format", type=_FORMAT_CHOICE, default="auto", show_default=True,
                     help="Format of datasets that do not set their own (auto: detected from the first row)."),
        click.option("--mix", "strategy", type=click.Choice(STRATEGIES), default=None,
                     help="How several datasets are combined. [default: concat; `check` without --mix "
                          "checks each dataset on its own]"),
        click.option("--probabilities", metavar="P1,P2,...", default=None,
                     help="Interleave weights, one per dataset, in order."),
        click.option("--seed", type=int, default=42, show_default=True, help="Seed of the interleave draw."),
    ]):
        fn = option(fn)
    return fn


def _sources(paths: tuple[str, ...], datasets: tuple[str, ...], data_format: str) -> list[Any]:
    from thub.data.formats import DatasetSource

    specs = [*paths, *datasets]
    if not specs:
        raise UsageError("data: expected at least one dataset (DATA argument or --dataset), found none")
    return [DatasetSource.parse(spec, default_format=data_format) for spec in specs]


def _probabilities(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--probabilities: expected comma-separated numbers, found {text!r}") from None


@click.group()
def data() -> None:
    """\b
    Examples:
      thub data check train.jsonl extra.parquet
      thub data check sharegpt.json:role_tag=role,content_tag=content --json
      thub data preview --model ./model train.jsonl -n 2
      thub data stats --model ./model train.jsonl --max-seq-len 4096
      thub data prepare --model ./model a.jsonl b.jsonl --mix interleave_under \\
          --probabilities 0.7,0.3 -o prepared.jsonl --num-proc 4

    Docs: docs/data.md
    """


@data.command()
@_dataset_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
def check(paths: tuple[str, ...], datasets: tuple[str, ...], data_format: str, strategy: str,
          probabilities: str | None, seed: int, as_json: bool) -> None:
    """Validate datasets fast (no tokenizer): schema, roles, empty turns, trainable last turn."""
    from thub.data.loading import load_source
    from thub.data.mixing import mix_loaded
    from thub.data.problems import Problems

    sources = _sources(paths, datasets, data_format)
    problems = Problems()
    loaded = [load_source(source, problems) for source in sources]
    report: dict[str, Any] = {"schema_version": JSON_SCHEMA_VERSION, "ok": not problems,
                              "sources": [{"path": item.source.path, "format": item.format, "rows": item.records,
                                           "valid_rows": len(item.rows), "roles": dict(item.roles)}
                                          for item in loaded],
                              **problems.as_dict()}
    # Several files are checked each on its own (`thub data check data/*.jsonl`); the mixing
    # rules (one kind of row, probabilities) apply only to a mix: --mix, --probabilities or
    # per-dataset prob=, as a config's `datasets:` would mix them.
    mixing = strategy is not None or probabilities is not None or any(s.probability is not None for s in sources)
    if not problems and mixing:
        strategy = strategy or "concat"
        kinds = {item.kind for item in loaded}
        try:
            if len(kinds) > 1:
                raise UsageError("datasets: expected sources of one kind to mix, found "
                                 + ", ".join(f"{i.source.label()} is {i.format}" for i in loaded))
            rows, _ = mix_loaded(loaded, strategy, _probabilities(probabilities), seed)
            report["mixed_rows"] = len(rows)
        except UsageError as exc:
            report.update(ok=False, error_count=1, errors=[{"location": "", "field": "", "message": str(exc)}])
            if not as_json:
                raise
    if as_json:
        emit_json(report)
        if not report["ok"]:
            raise SystemExit(2)
        return
    problems.raise_if_errors()
    rows_ = [[item.source.path, item.format, str(len(item.rows)),
              " ".join(f"{role}:{n}" for role, n in sorted(item.roles.items())) or "-"] for item in loaded]
    table(None, ["dataset", "format", "rows", "messages per role"], rows_)
    if "mixed_rows" in report:
        mixed = f"; {report['mixed_rows']} rows after {strategy}" if len(loaded) > 1 else ""
    else:
        mixed = f" in {len(loaded)} datasets, each checked on its own" if len(loaded) > 1 else ""
    stdout_console().print(f"[green]ok[/green]: {sum(len(i.rows) for i in loaded)} valid rows{mixed}")


def _load_mixed(sources: list[Any], strategy: str | None, probabilities: str | None,
                seed: int) -> tuple[list[Any], list[dict[str, Any]], list[str]]:
    from thub.data.loading import load_sources
    from thub.data.mixing import mix_loaded

    loaded = load_sources(sources)
    rows, locations = mix_loaded(loaded, strategy or "concat", _probabilities(probabilities), seed)
    return loaded, rows, locations


def _tokenizer_and_template(model: str, need_template: bool) -> tuple[Any, Any]:
    from thub.data.prepare import load_tokenizer
    from thub.data.templates import ChatTemplate, check_template

    tokenizer = load_tokenizer(model)
    if not need_template:
        return tokenizer, None
    template = ChatTemplate(tokenizer)
    problems = check_template(tokenizer, template)
    if problems:
        raise UsageError("\n".join(problems))
    return tokenizer, template


@data.command()
@click.option("--model", "-m", required=True, help="Model (or tokenizer) directory whose chat template is used.")
@_dataset_options
@click.option("-n", "count", type=int, default=1, show_default=True, help="Examples shown per dataset.")
@click.option("--max-seq-len", type=int, default=None, help="Show where samples would be cut.")
@click.option("--unmask", is_flag=True, help="Train on every token (not only assistant turns).")
@click.option("--backend", "-b", default=None,
              help="Also show the tokens this backend trains on, from its own preprocessing, compared with thub's.")
@click.option("--json", "as_json", is_flag=True, help="Spans and counts as JSON on stdout.")
def preview(model: str, paths: tuple[str, ...], datasets: tuple[str, ...], data_format: str, strategy: str,
            probabilities: str | None, seed: int, count: int, max_seq_len: int | None, unmask: bool,
            backend: str | None, as_json: bool) -> None:
    """Render the first example(s) of each dataset with the model's chat template.

    Trained tokens are shown in green, masked ones dimmed (piped or redirected, where colour is
    lost: trained text between [[ and ]]): check that exactly the assistant's answers (and their
    end-of-turn marker) are trained.
    """
    from thub.data.kinds import kind_spec
    from thub.data.loading import load_sources
    from thub.data.preview import PreviewView, panels
    from thub.data.templates import TemplateRejected

    loaded = load_sources(_sources(paths, datasets, data_format))
    spec = kind_spec(loaded[0].kind)
    tokenizer, template = _tokenizer_and_template(model, spec.chat_template)
    view = PreviewView(tokenizer, template, unmask, max_seq_len)
    report = []
    for item in loaded:
        for row, location in list(zip(item.rows, item.locations, strict=True))[:count]:
            try:
                shown = panels(row, view, item.kind)
            except TemplateRejected as exc:  # the template's own raise_exception: the row is the problem
                raise UsageError(f"{location}: expected a row {model}'s chat template renders, found one it "
                                 f"refuses: {exc}") from None
            first = {k: v for k, v in shown[0].items() if k != "title"}  # one-panel kinds: the example itself
            report.append({"source": item.source.path, "location": location, "format": item.format, **first,
                           "panels": shown})
    if backend:  # the backend's own preprocessing of the same rows (docs/data.md)
        from thub.data.backend_masks import backend_preview

        shown = [row for item in loaded for row in item.rows[:count]]
        backend_preview(report, shown, backend, model, tokenizer, max_seq_len=max_seq_len, unmask=unmask,
                        as_json=as_json)
        return
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "model": model, "examples": report})
        return
    out = stdout_console()
    coloured = out.is_terminal and out.color_system is not None
    for example in report:
        header = f"{example['location']} ({example['format']})"
        if coloured:
            out.rule(header)
        else:
            out.print(f"==> {header} <==", markup=False)
        shown = example["panels"]
        if coloured and len(shown) > 1 and out.width >= _PANEL_WIDTH * len(shown):
            _print_side_by_side(out, shown)  # chosen | rejected: the masks compared at a glance
        else:  # piped: one after the other, so each panel's text stays greppable whole
            for panel in shown:
                _print_panel(out, panel, coloured)


_PANEL_WIDTH = 40  # narrowest column worth showing a panel in, side by side


def _print_side_by_side(out: Any, shown: list[dict[str, Any]]) -> None:
    """Several panels of one row (a preference pair's chosen and rejected) in columns."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2), expand=True)
    for _ in shown:
        grid.add_column(ratio=1)
    cells = []
    for panel in shown:
        counts = Text.from_markup(f"[bold]{panel['tokens']}[/bold] tokens, [green]{panel['trained_tokens']} "
                                  f"trained[/green]" + (" [yellow](truncated)[/yellow]" if panel["truncated"] else ""))
        cells.append(Group(Text(str(panel.get("title") or ""), style="bold underline"),
                           _marked_text(panel, coloured=True), counts))
    grid.add_row(*cells)
    out.print(grid)
    out.print("legend: [bold green]trained[/bold green] [dim]masked[/dim]")
    for panel in shown:
        if panel["trained_tokens"] == 0 and panel.get("trains", True):
            console().print(f"[red]warning:[/red] no trained token in {panel.get('title')}: check roles and the "
                            "chat template")


def _marked_text(panel: dict[str, Any], coloured: bool) -> Any:
    """The panel's text with its trained tokens marked: green (a terminal) or between [[ and ]]."""
    from rich.text import Text

    text = Text()
    for segment in panel["segments"]:
        if coloured:
            text.append(segment["text"], style="bold green" if segment["trained"] else "dim")
        elif segment["trained"]:
            text.append(f"[[{segment['text']}]]")  # without colour the markers carry the mask
        else:
            text.append(segment["text"])
    return text


def _print_panel(out: Any, panel: dict[str, Any], coloured: bool) -> None:
    """One panel of a previewed row: its title, the text with trained tokens marked, the counts."""
    if panel.get("title"):
        out.print(f"-- {panel['title']} --", markup=False)
    out.print(_marked_text(panel, coloured))
    cut = " [yellow](truncated to max_seq_len)[/yellow]" if panel["truncated"] else ""
    legend = "[bold green]trained[/bold green] [dim]masked[/dim]" if coloured else r"\[\[trained]] masked"
    out.print(f"[bold]{panel['tokens']}[/bold] tokens, [green]{panel['trained_tokens']} trained[/green]{cut}"
              f"   legend: {legend}")
    if panel["trained_tokens"] == 0 and panel.get("trains", True):
        console().print("[red]warning:[/red] no trained token in this example: check roles and the chat template")


@data.command()
@_dataset_options
@click.option("--model", "-m", default=None, help="Tokenize with this model's tokenizer for token counts.")
@click.option("--max-seq-len", type=int, default=None, help="Count samples longer than this.")
@click.option("--unmask", is_flag=True, help="Train on every token (not only assistant turns).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
def stats(paths: tuple[str, ...], datasets: tuple[str, ...], data_format: str, strategy: str,
          probabilities: str | None, seed: int, model: str | None, max_seq_len: int | None, unmask: bool,
          as_json: bool) -> None:
    """Counts per dataset; with --model, token lengths (p50/p90/p99/max) and trained tokens."""
    from thub.data.kinds import kind_spec
    from thub.data.kinds import loaded as loaded_object
    from thub.data.tokenize import percentiles

    strategy = strategy or "concat"
    loaded, rows, locations = _load_mixed(_sources(paths, datasets, data_format), strategy, probabilities, seed)
    report: dict[str, Any] = {"schema_version": JSON_SCHEMA_VERSION, "rows": len(rows), "strategy": strategy,
                              "sources": [{"path": i.source.path, "format": i.format, "rows": len(i.rows),
                                           "roles": dict(i.roles)} for i in loaded]}
    spec = kind_spec(loaded[0].kind)
    if rows and all("messages" in r for r in rows):  # conversations, whatever their kind
        report["messages_per_row"] = percentiles([len(r["messages"]) for r in rows])
    if model is not None and spec.tokenize is not None:
        tokenizer, template = _tokenizer_and_template(model, spec.chat_template)
        _, tstats = loaded_object(spec.tokenize)(rows, tokenizer, {"max_seq_len": None, "overlong": "truncate",
                                                                   "unmask": unmask}, locations, template, None)
        report["tokens"] = tstats.tokens
        report["trained_tokens"] = tstats.trained_tokens
        report["token_length"] = percentiles(tstats.lengths)
        report["dropped_untrainable"] = tstats.dropped_untrainable
        report["rejected_by_template"] = tstats.rejected_by_template
        if max_seq_len is not None:
            report["longer_than_max_seq_len"] = sum(1 for n in tstats.lengths if n > max_seq_len)
        if tstats.trained_tokens == 0:
            raise UsageError("data: expected trained tokens, found 0 after the chat template and loss mask; "
                             "check roles and the template (thub data preview shows what is trained)")
    if as_json:
        emit_json(report)
        return
    table(None, ["dataset", "format", "rows"], [[s["path"], s["format"], str(s["rows"])] for s in report["sources"]])
    lines = [f"rows: {report['rows']}" + (f" ({strategy})" if len(loaded) > 1 else "")]
    if "messages_per_row" in report:
        lines.append("messages per row: " + _pct(report["messages_per_row"]))
    if "tokens" in report:
        share = report["trained_tokens"] / report["tokens"] if report["tokens"] else 0.0
        lines.append(f"tokens: {report['tokens']} ({report['trained_tokens']} trained, {share:.0%})")
        lines.append("tokens per sample: " + _pct(report["token_length"]))
        if "longer_than_max_seq_len" in report:
            lines.append(f"longer than {max_seq_len}: {report['longer_than_max_seq_len']}")
        for key in ("dropped_untrainable", "rejected_by_template"):
            if report[key]:
                lines.append(f"[yellow]{key.replace('_', ' ')}: {report[key]}[/yellow]")
    for line in lines:
        stdout_console().print(line)


def _pct(values: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items())


@data.command()
@click.option("--model", "-m", required=True, help="Model (or tokenizer) directory: chat template and tokenizer.")
@_dataset_options
@click.option("--output", "-o", required=True, help="Output file: .jsonl (input_ids/labels per line) or .parquet.")
@click.option("--max-seq-len", type=int, default=None, help="Maximum tokens per sample.")
@click.option("--overlong", type=click.Choice(OVERLONG), default="truncate", show_default=True,
              help="Samples longer than --max-seq-len: cut, drop, or fail. Always reported with counts.")
@click.option("--unmask", is_flag=True, help="Train on every token (not only assistant turns).")
@click.option("--num-proc", type=int, default=1, show_default=True, help="Worker processes.")
@click.option("--no-cache", is_flag=True, help="Prepare again even if the output matches data+tokenizer+settings.")
@click.option("--json", "as_json", is_flag=True, help="Counts as JSON on stdout.")
def prepare(model: str, paths: tuple[str, ...], datasets: tuple[str, ...], data_format: str, strategy: str,
            probabilities: str | None, seed: int, output: str, max_seq_len: int | None, overlong: str,
            unmask: bool, num_proc: int, no_cache: bool, as_json: bool) -> None:
    """Apply the chat template, tokenize and build loss masks into a file backends read."""
    import time

    from thub.data.prepare import prepare as run_prepare

    if num_proc < 1:
        raise UsageError(f"--num-proc: expected 1 or more, found {num_proc}")
    sources = _sources(paths, datasets, data_format)
    start = time.perf_counter()
    result = run_prepare(sources, model, output, max_seq_len=max_seq_len, overlong=overlong,
                         strategy=strategy or "concat", probabilities=_probabilities(probabilities), seed=seed,
                         unmask=unmask,
                         num_proc=num_proc, use_cache=not no_cache)
    seconds = time.perf_counter() - start
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "output": result.output, "cached": result.cached,
                   "key": result.key, "seconds": round(seconds, 3), **result.stats.as_dict()})
        return
    out = console()
    for line in result.stats.warnings():
        out.print(f"[yellow]warning:[/yellow] {line}")
    st = result.stats
    how = "reused (cache hit)" if result.cached else f"written in {seconds:.1f}s"
    out.print(f"[green]ok[/green]: {st.samples_out} samples, {st.tokens} tokens ({st.trained_tokens} trained) "
              f"-> {result.output} {how}")
