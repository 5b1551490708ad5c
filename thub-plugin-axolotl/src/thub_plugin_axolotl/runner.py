"""The axolotl run, inside thub's supervised child process.

thub validates, normalises and mixes the data and writes it as ``{"messages": [...]}`` rows (or
``{"text"}`` documents) that the generated ``datasets:`` entry describes, writes ``config.yaml``,
then runs axolotl's own entry points in this process: ``axolotl.cli.config.load_cfg`` (its pydantic
validation, normalisation and plugin loading) and ``axolotl.cli.train.do_train``. thub's Trainer
callback reaches axolotl's trainer through the ``ThubPlugin`` axolotl plugin (``hooks.py``).
axolotl (and with it torch) is imported here only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from thub.backend import RunContext, UsageError, write_text_atomic
from thub_plugin_axolotl.translate import translate


def axolotl_rows(rows: list[dict[str, Any]], locations: list[str], pretraining: bool,
                 unmask_all: bool) -> list[dict[str, Any]]:
    """thub's canonical rows as the JSONL rows the generated ``datasets:`` entry describes.

    Messages keep ``tool_calls``, ``name`` and ``reasoning_content``: axolotl's chat_template
    strategy passes every message field the chat template uses on to it.
    """
    if pretraining:
        return [{"text": row["document"]} for row in rows]
    out = []
    for i, row in enumerate(rows):
        where = locations[i] if i < len(locations) else f"row {i + 1}"
        if "input_ids" in row:
            raise UsageError(f"{where}: pre-tokenized rows (input_ids/labels): thub gives axolotl conversations "
                             "to tokenize with the chat template; give chat or document data")
        if row.get("unmask") and not unmask_all:
            raise UsageError(f"{where}: unmask: thub sets axolotl's roles_to_train for the whole dataset; "
                             "set unmask_messages instead")
        out.append({"messages": row["messages"]})
    return out


def write_inputs(context: RunContext, plan: dict[str, Any]) -> int:
    """The data file and config.yaml axolotl reads; returns the row count."""
    import yaml

    params, resume_from = context.params, context.resume_from
    validated = context.data()  # the rows thub validated before the run (datasets and mixing applied)
    data = axolotl_rows(validated.rows, validated.locations, plan["data"]["mode"] == "pretraining",
                        bool(params.get("unmask_messages")))
    config = dict(plan["config"])
    if resume_from:
        config["resume_from_checkpoint"] = resume_from
    # every rank writes the same content; atomically, so that none reads a half-written file
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data)
    write_text_atomic(Path(plan["data"]["file"]), lines, parents=True)
    write_text_atomic(Path(plan["config_file"]), yaml.safe_dump(config, sort_keys=False), parents=True)
    return len(data)


def run(context: RunContext) -> dict[str, Any]:
    """Prepare axolotl's inputs, run ``load_cfg`` + ``do_train`` with thub's plugin; return the outcome."""
    params = context.params
    plan = translate(context.algorithm, params)
    os.environ.update(plan["environment"])
    count = write_inputs(context, plan)
    print(f"thub: wrote {count} rows and {plan['config_file']} for axolotl (same run by hand: {plan['command']})",
          flush=True)

    from axolotl.cli.args import TrainerCliArgs
    from axolotl.cli.config import load_cfg
    from axolotl.cli.train import do_train

    import thub_plugin_axolotl.hooks as hooks

    hooks.CONTEXT = context
    cfg = load_cfg(plan["config_file"])
    do_train(cfg, TrainerCliArgs())
    output_dir = Path(plan["config"]["output_dir"])
    if context.stop_requested:
        latest = context.run_dir.latest_checkpoint()
        return {"interrupted": True, "final_checkpoint": str(latest[0]) if latest else None,
                "summary": {"global_step": latest[1] if latest else 0}}
    step = 0
    state = output_dir / "trainer_state.json"
    latest = context.run_dir.latest_checkpoint()
    if state.exists():
        step = int(json.loads(state.read_text()).get("global_step", 0))
    elif latest:
        step = latest[1]
    # axolotl saves the final model (or adapter) and tokenizer into output_dir
    context.checkpoint(output_dir, step)
    return {"final_checkpoint": str(output_dir), "summary": {"global_step": step}}
