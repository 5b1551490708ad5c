"""``thub compare ALGORITHM --backends A,B[,...]``: one config, K steps on each backend, side by side.

Every backend is resolved and planned first (:mod:`thub.launch.plan`: a parameter one of them
does not honour, bad data or a translation one refuses: exit 2, nothing run),
then each runs in its own run directory under the compare directory (``--out``, or the config's
``ckpt_output_dir``) through the same path as ``thub train`` (a managed environment included),
with ``max_steps=K`` and ``allow_data_mismatch`` (a compare shows differences, it does not stop
at them). The table and the differences come from :mod:`thub.insight.comparison`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from thub.errors import UsageError


def _mask_detail(backend: str, record: dict[str, Any], params: dict[str, Any]) -> str | None:
    """What ``thub data preview --backend`` says about the first row whose masks differ: the text
    the backend trains that thub does not, and the reverse. None where the backend trains thub's
    own masks or the row cannot be found."""
    location = record.get("first_location")
    if not location:
        return None
    from thub.data.backend_masks import backend_masks, compare, has_own_masks
    from thub.data.training import DATA_DIR, load_training_data
    from thub.manager import get_registry

    spec = get_registry().backends[backend]
    if not has_own_masks(spec.runner, spec.python):
        return None
    data = load_training_data(params, Path(record["run_dir"]) / DATA_DIR)
    if data is None or location not in data.locations or "messages" not in data.rows[data.locations.index(location)]:
        return None
    from thub.data import load_tokenizer
    from thub.data.preview import explain

    row = data.rows[data.locations.index(location)]
    tokenizer = load_tokenizer(params["model_path"], trust_remote_code=bool(params.get("trust_remote_code")))
    ours = explain(row, tokenizer, unmask=bool(params.get("unmask_messages")), max_seq_len=params.get("max_seq_len"))
    built = backend_masks(backend, params["model_path"], [row],
                          {"max_seq_len": params.get("max_seq_len"), "unmask_messages": params.get("unmask_messages")})
    theirs = explain(built[0], tokenizer) if built[0] else None
    diff = compare(ours, theirs)
    if diff.get("dropped_by_backend"):
        return f"{backend} drops {location}"
    parts = []
    if diff["backend_only"]:
        parts.append(f"{backend} also trains {diff['backend_only']!r}")
    if diff["thub_only"]:
        parts.append(f"{backend} does not train {diff['thub_only']!r}")
    return f"at {location}: " + " and ".join(parts) if parts else None


def _preflight_all(resolved: dict[str, Any]) -> None:
    """Every backend's preflight checks before the first run starts (a backend that cannot run
    here stops the compare before anything ran, as it would stop ``thub train``)."""
    from thub.doctor import blocking, format_problems, preflight
    from thub.errors import ThubError

    for name, r in resolved.items():
        outcomes = preflight(name, r.values()["ckpt_output_dir"])
        if blocking(outcomes):
            raise ThubError(f"backend {name} cannot run here (details: `thub doctor`):\n" + format_problems(outcomes))


def compare_backends(algorithm: str, backends: list[str], *, config: str | None, overrides: list[str], steps: int,
                     out: str | None, as_json: bool) -> dict[str, Any]:
    """Run ``algorithm`` for ``steps`` steps on each backend; return the comparison document."""
    from thub.config.resolve import resolve
    from thub.insight.comparison import (
        GRAD_NORM_TOLERANCE,
        LOSS_TOLERANCE,
        LR_TOLERANCE,
        backend_record,
        differences,
    )
    from thub.manager import get_registry
    from thub.runner import run_training
    from thub.runner.rundir import read_json
    from thub.ui.output import console

    if len(backends) < 2 or len(set(backends)) != len(backends):
        raise UsageError(f"--backends: expected two or more different backends, found {','.join(backends)!r}")
    if any(o.split("=", 1)[0].strip() == "max_steps" for o in overrides):
        raise UsageError("--set max_steps: thub compare runs --steps steps on each backend; use --steps")
    registry = get_registry()
    base = out
    if base is None:  # the config's ckpt_output_dir is the compare directory
        base = resolve(registry, algorithm, backend=backends[0], config_file=config, overrides=list(overrides)
                       ).values()["ckpt_output_dir"]
    root = Path(base)
    resolved = {b: resolve(registry, algorithm, backend=b, config_file=config,
                           overrides=[*overrides, f"max_steps={steps}", f"ckpt_output_dir={root / b}",
                                      "allow_data_mismatch=true"])
                for b in backends}  # all of them before anything runs: a refusal runs nothing
    exported = next((r.values()["export"] for r in resolved.values() if r.values().get("export")), None)
    if exported:  # one folder per model: every backend's export would go to the same place
        raise UsageError(f"export: expected no export folder in thub compare (each backend's model would go to "
                         f"{exported}), found one; export the run you keep with thub checkpoint merge/consolidate "
                         "or a thub train --export of its own")
    pushed = next((r.values()["push"] for r in resolved.values() if r.values().get("push")), None)
    if pushed:  # every backend's model would be published to the same target (the second push refused)
        raise UsageError(f"push: expected no push target in thub compare (each backend's model would go to "
                         f"{pushed}), found one; push the run you keep with thub checkpoint push or a thub train "
                         "--push of its own")
    from thub.launch.plan import plan_for

    plans = {b: plan_for(r) for b, r in resolved.items()}  # each one's data gate and translation, too
    _preflight_all(resolved)
    for b, r in resolved.items():
        if not as_json:
            console().print(f"[bold]compare[/bold]: {algorithm} on [bold]{b}[/bold] for {steps} steps -> {root / b}")
        run_training(r, overwrite=True, command_line=["thub", *sys.argv[1:]], quiet_json=as_json, plan=plans[b])
    records = [backend_record(b, root / b) for b in backends]
    known = {b: dict(registry.backends[b].known_differences) for b in backends}
    sources = {b: (read_json(root / b / "thub_run.json") or {}).get("parameters") or {} for b in backends}
    found = differences(records, known, sources)
    for item in found:
        if item["quantity"] == "masks":
            details = [_mask_detail(b, next(r for r in records if r["backend"] == b), resolved[b].values())
                       for b in item["backends"]]
            extra = "; ".join(d for d in details if d)
            if extra:
                item["why"] = f"{item['why']}; {extra}" if item["why"] else extra
    from thub.ui.output import JSON_SCHEMA_VERSION

    return {"schema_version": JSON_SCHEMA_VERSION, "algorithm": algorithm, "steps": steps, "compare_dir": str(root),
            "tolerances": {"loss": LOSS_TOLERANCE, "grad_norm": GRAD_NORM_TOLERANCE, "learning_rate": LR_TOLERANCE},
            "backends": [{k: v for k, v in r.items() if k != "mask_hashes"} | {"masks_hash_count": len(
                r["mask_hashes"] or ())} for r in records],
            "differences": found, "first_difference": found[0] if found else None,
            "_records": records}


def print_comparison(document: dict[str, Any]) -> None:
    """The side-by-side table, then the first difference and why (and every other one)."""
    from thub.insight.comparison import render, table
    from thub.ui.output import stdout_console

    out = stdout_console()
    out.print(render(table(document["_records"], document["steps"])), markup=False, highlight=False)
    found = document["differences"]
    if not found:
        out.print(f"no difference: same examples, trained-token masks, samples per step and learning rates; "
                  f"first-step loss within {document['tolerances']['loss']:.0%}", markup=False, highlight=False)
        return
    for i, item in enumerate(found):
        label = "first difference" if i == 0 else "also different"
        out.print(f"{label}: {item['text']}", markup=False, highlight=False)
        if item["why"]:
            out.print(f"  why: {item['why']}", markup=False, highlight=False)


@click.command("compare", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("algorithm")
@click.option("--backends", "backend_list", required=True, metavar="A,B[,...]",
              help="Two or more installed backends to run the same config on.")
@click.option("--config", "-c", type=click.Path(dir_okay=False), help="YAML file of parameters.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override any parameter.")
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True,
              help="Optimizer steps on each backend (sets max_steps).")
@click.option("--out", type=click.Path(file_okay=False),
              help="Compare directory: one run directory per backend in it (default: the config's ckpt_output_dir).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (for scripts).")
def compare(algorithm: str, backend_list: str, config: str | None, overrides: tuple[str, ...], steps: int,
            out: str | None, as_json: bool) -> None:
    """Prints per backend: examples, trained tokens (and whether each example's mask agrees), samples
    per optimizer step, learning rate, loss and grad norm at each step, tokens/s and the time to the
    first step; then the first thing that differs and why, where thub knows. Exit 0 whether or not
    they differ (read the differences, or `--json`), 1 if a run failed, 2 on bad input.

    \b
    Example:
      thub compare sft --backends trl,llamafactory --config examples/configs/sft.yaml --out runs/cmp
    """
    from thub.ui.output import emit_json

    backends = [b.strip() for b in backend_list.split(",") if b.strip()]
    document = compare_backends(algorithm, backends, config=config, overrides=list(overrides), steps=steps, out=out,
                                as_json=as_json)
    if as_json:
        emit_json({k: v for k, v in document.items() if k != "_records"})
    else:
        print_comparison(document)
    sys.exit(1 if any(r["status"] != "succeeded" for r in document["backends"]) else 0)
