"""``thub eval`` and ``thub evaluators``: score a trained model on tasks (docs/eval.md).

The logic lives in :mod:`thub.evaluate` (models, tasks, evaluators, results); this module only
parses options and prints.
"""

from __future__ import annotations

import click

from thub.ui.output import JSON_SCHEMA_VERSION, console, emit_json, stdout_console, table


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def evaluators(as_json: bool) -> None:
    """Each evaluator: its plugin, whether its requirements are met here, and how to install them."""
    from thub.evaluate.evaluators import install_hint, listing
    from thub.manager import get_registry

    rows = listing(get_registry())
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "evaluators": rows, "install": install_hint()})
        return
    if not rows:
        console().print(f"No evaluator installed; install lm-evaluation-harness's with `{install_hint()}`.",
                        markup=False)
        return
    table("Evaluators", ["evaluator", "status", "plugin", "task files", "summary"],
          [[r["name"], "✓ ready" if r["ready"] else f"✗ {'; '.join(r['missing'])}"
            + (f" (install: {r['install']})" if r["install"] else ""), r["plugin"], ", ".join(r["task_files"]),
            r["summary"]] for r in rows])


@click.command("eval", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model_or_run", metavar="MODEL_OR_RUN")
@click.option("--tasks", "-t", "tasks", multiple=True, required=True, metavar="T1,T2",
              help="Tasks: the harness's named tasks and/or local task files (e.g. .jsonl), comma-separated.")
@click.option("--base", is_flag=True, help="Also score the run's base model (its model_path): deltas are tuned - base.")
@click.option("--checkpoints", type=click.Choice(["final", "all", "best"]), default="final", show_default=True,
              help="From a run: its final model, every complete checkpoint (and the final model), or result.json's "
                   "best_checkpoint.")
@click.option("--evaluator", default=None, help="Evaluator name (`thub evaluators`); default: the only one installed.")
@click.option("--limit", type=int, default=None, help="At most N examples per task.")
@click.option("--batch-size", type=int, default=1, show_default=True, help="Examples per forward pass.")
@click.option("--device", default=None, help="cpu, cuda, cuda:0, ... (default: the evaluator's choice).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="Evaluator-specific setting, passed through (repeatable).")
@click.option("--allow-template-change", is_flag=True,
              help="Score a checkpoint whose chat template differs from the training input's (refused otherwise).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Results folder for a model folder (a run keeps its results in RUN_DIR/eval/).")
@click.option("--json", "as_json", is_flag=True, help="Print the results (or the plan, with --dry-run) as JSON.")
@click.option("--dry-run", is_flag=True, help="Resolve models, tasks and settings; load and write nothing.")
def eval_command(model_or_run: str, tasks: tuple[str, ...], base: bool, checkpoints: str, evaluator: str | None,
                 limit: int | None, batch_size: int, device: str | None, options: tuple[str, ...],
                 allow_template_change: bool, out: str | None, as_json: bool, dry_run: bool) -> None:
    """\b
    Examples:
      thub eval runs/demo --base --tasks arith.jsonl          tuned vs base on a local task
      thub eval runs/demo --checkpoints all --tasks hellaswag  every checkpoint on a harness task
      thub eval ./my-model --tasks arith.jsonl --out results/

    MODEL_OR_RUN is a run directory (results go to RUN_DIR/eval/<task>.json and result.json's
    eval) or a Hugging Face model folder. Each model is served as trained: its chat template
    (for chat data), the run's max_seq_len, its generation_config.json. Docs: docs/eval.md
    """
    from thub.evaluate.run import execute, parse_options, plan

    eval_plan = plan(model_or_run, tasks, base=base, checkpoints=checkpoints, evaluator=evaluator, limit=limit,
                     batch_size=batch_size, device=device, options=parse_options(options),
                     allow_template_change=allow_template_change, out=out, print_only=as_json)
    if dry_run:
        data = eval_plan.as_dict()
        if as_json:
            emit_json({"schema_version": JSON_SCHEMA_VERSION, "dry_run": True, **data})
            return
        out_console = stdout_console()
        out_console.print(f"evaluator: {data['evaluator']['name']} ({data['evaluator']['plugin']})", markup=False)
        table(None, ["model", "step", "loads", "chat template", "max_seq_len", "template check"],
              [[m["label"], "-" if m["step"] is None else str(m["step"]),
                m["model_path"] + (f" (merged from {m['source']})" if m["merge"] else ""),
                "yes" if m["apply_chat_template"] else "no", str(m["max_seq_len"] or "-"),
                m["template"].get("status", "-")] for m in data["models"]])
        out_console.print("tasks: " + ", ".join(t["name"] + (f" ({t['path']})" if t["path"] else "")
                                               for t in data["tasks"]), markup=False)
        out_console.print(f"results: {data['results'] or 'printed only'}", markup=False)
        return
    done = execute(eval_plan, say=lambda message: click.echo(message, err=True))
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, **eval_plan.as_dict(), **done})
        return
    from thub.evaluate.results import table_rows

    for task, document in done["results"].items():
        columns, rows = table_rows(document)
        table(f"{task}" + (f" ({document['path']})" if document.get("path") else ""), columns, rows)
    for path in done["written"]:
        console().print(f"wrote {path}", markup=False)
