"""``thub checkpoint merge ADAPTER --out DIR [--base MODEL]``: adapter + base -> one full HF model."""

from __future__ import annotations

import click

from thub.cli.checkpoint import dry_run_option, emit, json_option

SUMMARY = "Merge a LoRA/DoRA/rsLoRA adapter into its base (PEFT's merge_and_unload): a full safetensors model."


@click.command("merge", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("adapter", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Folder for the merged model (new or empty).")
@click.option("--base", default=None, help="Base model folder (default: the adapter's base_model_name_or_path).")
@click.option("--force", is_flag=True, help="Merge into a --base other than the one the adapter records.")
@json_option
@dry_run_option
def merge(adapter: str, out: str, base: str | None, force: bool, as_json: bool, dry_run: bool) -> None:
    """The base is loaded unquantised on the CPU in its own dtype, a QLoRA adapter too (with a
    warning); the merged model is saved with the tokenizer, chat template and thub_merge.json
    (what `thub checkpoint verify OUT` compares the logits with). Nothing is written on failure.

    Refused (exit 2): a --base other than the one the adapter records (its base_model_name_or_path,
    the thub run's model_path) unless --force; adapter tensors PEFT did not apply (target_modules
    unlike the weights); a number in adapter_config.json that is not finite; a merged weight that
    is NaN or inf."""
    from thub.checkpoint.merge import merge_adapter, plan_merge

    if dry_run:
        plan = plan_merge(adapter, out, base, force=force)
        for message in plan["warnings"]:
            click.echo(f"warning: {message}", err=True)
        kind = f"{plan['peft_type']}{', DoRA' if plan['use_dora'] else ''}{', rsLoRA' if plan['use_rslora'] else ''}"
        emit(plan, f"would merge {plan['adapter']} ({kind}) into {plan['base']} in {plan['dtype']}, tokenizer from "
                   f"{plan['tokenizer_from']}, and save it to {plan['out']}; nothing written (--dry-run)",
             as_json=as_json, dry_run=True)
        return
    done = merge_adapter(adapter, out, base, force=force)
    emit(done, f"merged {done['adapter']} into {done['base']} ({done['dtype']}): {done['out']}\n"
               f"check it: thub checkpoint verify {done['out']}", as_json=as_json, dry_run=False)
