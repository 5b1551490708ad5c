"""The axolotl run, inside thub's supervised child process.

thub validates, normalises and mixes the data, tokenizes it itself (:func:`thub_examples`: the
model's chat template with thub's masks and ``overlong`` policy, or documents joined with EOS into
``block_size`` blocks) and writes the examples as ``{"input_ids", "attention_mask", "labels"}``
rows, which axolotl's data loading uses as they are (the generated ``datasets:`` entry has no
``type``). It writes ``config.yaml``, then runs axolotl's own entry points in this process:
``axolotl.cli.config.load_cfg`` (its pydantic validation, normalisation and plugin loading) and
``axolotl.cli.train.do_train``. thub's Trainer callback reaches axolotl's trainer through the
``ThubPlugin`` axolotl plugin (``hooks.py``). axolotl (and with it torch) is imported here only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from thub.backend import RunContext, UsageError, write_text_atomic
from thub_plugin_axolotl.translate import translate


def thub_examples(rows: list[dict[str, Any]], locations: list[str], tokenizer: Any,
                  data: dict[str, Any]) -> tuple[list[dict[str, list[int]]], list[str]]:
    """``{"input_ids", "attention_mask", "labels"}`` per example as thub trains ``rows`` under the
    plan's data settings (``data``: mode, max_seq_len, overlong, unmask_messages, block_size), and
    thub's report lines.

    :func:`thub.backend.supervised_examples` (chat under thub's masks and the ``overlong``
    policy, pretraining blocks, or pre-tokenized rows), with the attention mask axolotl needs.
    """
    from thub.backend import supervised_examples

    pretraining = data["mode"] == "pretraining"  # the plan's pretraining entry has block_size only
    examples, lines = supervised_examples(
        rows, locations, tokenizer, max_seq_len=None if pretraining else data["max_seq_len"],
        overlong=data.get("overlong", "truncate"), unmask=bool(data.get("unmask_messages")),
        block_size=data["block_size"] if pretraining else None)
    # axolotl takes a dataset as pre-tokenized only with all three columns
    return [{**e, "attention_mask": [1] * len(e["input_ids"])} for e in examples], lines


def preference_texts(algorithm: str, rows: list[dict[str, Any]], locations: list[str],
                     tokenizer: Any) -> list[dict[str, Any]]:
    """thub's canonical dpo/kto rows as the strings axolotl's RL data path trains as they are
    (:func:`thub_plugin_axolotl.preference.answer_texts`), rendered by ``tokenizer``'s
    ``apply_chat_template`` (the trainer's own rendering; the parent checked the same split with
    thub's renderer, ``check_rows``)."""
    from thub_plugin_axolotl.preference import answer_texts

    return answer_texts(algorithm, rows, locations, lambda messages, generation: tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation, tokenize=False))


def write_files(plan: dict[str, Any], examples: list[dict[str, Any]], resume_from: str | None,
                held_out: list[dict[str, Any]] | None = None) -> str:
    """Write ``examples`` where the plan's dataset entry reads them (``held_out``: the
    ``validation_data_path`` examples, where its ``test_datasets`` entry reads them), and the
    config.yaml axolotl reads; returns the config file's path."""
    import yaml

    text = "".join(json.dumps(e) + "\n" for e in examples)
    held_text = "".join(json.dumps(e) + "\n" for e in held_out or [])
    config = dict(plan["config"])
    # axolotl keys its prepared-dataset cache by the config, not the file's content: a folder per
    # content, so that a run over changed data (a --resume after an edit) never trains the old examples
    digest = hashlib.sha256((text + "\0" + held_text).encode()).hexdigest()[:16]
    config["dataset_prepared_path"] = f"{config['dataset_prepared_path']}/{digest}"
    if resume_from:
        config["resume_from_checkpoint"] = resume_from
    # every rank writes the same content; atomically, so that none reads a half-written file
    write_text_atomic(Path(plan["data"]["file"]), text, parents=True)
    if held_out is not None:
        write_text_atomic(Path(plan["data"]["validation_file"]), held_text, parents=True)
    write_text_atomic(Path(plan["config_file"]), yaml.safe_dump(config, sort_keys=False), parents=True)
    return str(plan["config_file"])


def write_inputs(context: RunContext, plan: dict[str, Any]) -> list[str]:
    """thub's tokenized examples and the config.yaml axolotl reads; returns thub's report lines."""
    from thub.backend import load_tokenizer

    params = context.params
    validated = context.data()  # the rows thub validated before the run (datasets and mixing applied)
    trust = bool(params.get("trust_remote_code"))
    if context.algorithm in ("dpo", "kto"):  # strings: axolotl's RL path (TRL's trainer) tokenizes them
        from transformers import AutoTokenizer  # the template rendered as the trainer's tokenizer renders it

        texts = preference_texts(context.algorithm, validated.rows, validated.locations,
                                 AutoTokenizer.from_pretrained(params["model_path"], trust_remote_code=trust))
        write_files(plan, texts, context.resume_from)
        noun = "pairs" if context.algorithm == "dpo" else "answers"
        return [f"thub: rendered {len(texts)} {noun} with the model's chat template for axolotl "
                f"(rl: {plan['config']['rl']})"]
    tokenizer = load_tokenizer(params["model_path"], trust_remote_code=trust)
    examples, lines = thub_examples(validated.rows, validated.locations, tokenizer, plan["data"])
    if not examples:
        raise UsageError("no example left to train on after tokenizing (see the warnings above)")
    held_out = None
    if plan["data"].get("validation_file"):
        from thub.backend import validation_data

        validation = validation_data(params)
        assert validation is not None  # validation_data_path is set
        held_out, more = thub_examples(validation.rows, validation.locations, tokenizer, plan["data"])
        lines += more
        if not held_out:
            raise UsageError(f"validation_data_path {params['validation_data_path']}: no example left to evaluate on "
                             "after tokenizing")
    write_files(plan, examples, context.resume_from, held_out)
    return lines


def run(context: RunContext) -> dict[str, Any]:
    """Prepare axolotl's inputs, run ``load_cfg`` + ``do_train`` with thub's plugin; return the outcome."""
    params = context.params
    plan = translate(context.algorithm, params)
    os.environ.update(plan["environment"])
    for line in write_inputs(context, plan):
        print(line, flush=True)
    print(f"thub: wrote {plan['data']['file']} and {plan['config_file']} for axolotl (same run by hand: "
          f"{plan['command']})", flush=True)

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
