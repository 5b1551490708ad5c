"""``thub checkpoint consolidate SRC --out DIR``: a sharded checkpoint into one HF safetensors model."""

from __future__ import annotations

from typing import Any

import click

from thub.checkpoint.consolidate import DEFAULT_MAX_SHARD_SIZE, DTYPE_CHOICES
from thub.cli.checkpoint import dry_run_option, json_option

SUMMARY = ("Sharded checkpoint (torch DCP, accelerate FSDP, DeepSpeed ZeRO) -> HF safetensors, streaming, "
           "with the base model's tokenizer and configs.")


@click.command("consolidate", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="The model folder to write (new or empty).")
@click.option("--base", default=None, type=click.Path(),
              help="The base model folder to copy config, tokenizer and templates from where the checkpoint "
                   "lacks them (default: the model_path in the run's thub_run.json).")
@click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True,
              help="Dtype of the weights written; auto: the model config's dtype (the training dtype), "
                   "else the stored one.")
@click.option("--max-shard-size", default=DEFAULT_MAX_SHARD_SIZE, show_default=True,
              help="Largest safetensors file; past it the weights are split with model.safetensors.index.json.")
@json_option
@dry_run_option
def consolidate(src: str, out: str, base: str | None, dtype: str, max_shard_size: str, as_json: bool,
                dry_run: bool) -> None:
    """SRC is a torch DCP folder (FSDP2), an HF Trainer/accelerate checkpoint with
    pytorch_model_fsdp_0/, or a DeepSpeed ZeRO checkpoint (the folder with `latest`, or a
    global_stepN/ tag). Reads one tensor group at a time: peak memory stays near the largest
    tensor. Writes into a temporary folder beside --out and renames it at the end."""
    from thub.checkpoint import consolidate as engine

    plan = engine.plan(src, out, base=base, dtype=dtype, max_shard_size=max_shard_size)
    summary = plan.summary(dry_run=True) if dry_run else engine.write(plan)
    if as_json:
        from thub.ui.output import emit_json

        emit_json({"schema_version": 1, **summary})
        return
    _print(summary)


def _print(summary: dict[str, Any]) -> None:
    from thub.ui.output import stdout_console

    console = stdout_console()
    verb = "would write" if summary["dry_run"] else "wrote"
    console.print(f"{summary['source']} ({summary['layout']}): {verb} {summary['out']}: {summary['tensors']} "
                  f"tensors, {summary['parameters']:,} parameters, {summary['total_size'] / 2**20:.1f} MiB "
                  f"{summary['dtype']} in {len(summary['shards'])} file(s)"
                  + (" + model.safetensors.index.json" if summary["index"] else ""), markup=False, highlight=False)
    for item in summary["copied"]:
        console.print(f"  {item['file']} from {item['from']}", markup=False, highlight=False)
    if summary["skipped"]:
        console.print(f"  left out {summary['skipped']} entries that are not model weights (optimizer state, ...)",
                      markup=False, highlight=False)
