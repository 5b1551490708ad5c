"""The unsloth training loop, run inside thub's supervised child process.

``import unsloth`` must come before trl/transformers/peft (it patches them), so it is the first
heavy import of :func:`run`; this module imports nothing heavy at module level.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from thub.backend import RunContext, metrics_callback, with_legacy_logging_dir
from thub_plugin_unsloth.translate import translate

_PATCHED_LATE = ("trl", "transformers", "peft")


def import_unsloth() -> Any:
    """``import unsloth`` first; say so when something imported trl/transformers/peft before it."""
    early = [name for name in _PATCHED_LATE if name in sys.modules and "unsloth" not in sys.modules]
    if early:
        print(f"thub: WARNING: {', '.join(early)} imported before unsloth; unsloth's patches may not apply",
              file=sys.stderr, flush=True)
    import unsloth

    return unsloth


class LabelPadCollator:
    """Pads thub's ``input_ids``/``labels`` rows (labels with -100) and builds the attention mask.

    Ours rather than TRL's, so thub's assistant-only labels reach the loss whatever TRL version
    or unsloth patch is installed.
    """

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(row["input_ids"]) for row in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[i, :n] = torch.tensor(row["input_ids"])
            labels[i, :n] = torch.tensor(row.get("labels", row["input_ids"]))
            mask[i, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def prepare_rows(context: RunContext, plan: dict[str, Any], tokenizer: Any, data: Any = None) -> list[dict[str, Any]]:
    """thub's data: chat with assistant-only labels (or all tokens), documents, or processed rows
    (``data``: other validated rows prepared the same way, the held-out ones of validation_data_path)."""
    from thub.backend import pretraining_blocks, tokenize_chat

    params = context.params
    if data is None:
        data = context.data()  # the rows thub validated before the run
    rows = data.rows
    if plan["data"]["mode"] == "pretraining":
        return pretraining_blocks(rows, tokenizer, params["block_size"])
    if rows and "input_ids" in rows[0]:
        return [{"input_ids": r["input_ids"], "labels": r.get("labels", r["input_ids"])} for r in rows]
    prepared, stats = tokenize_chat(rows, tokenizer, params["max_seq_len"], unmask=params.get("unmask_messages", False),
                                    locations=data.locations)
    print(f"thub: prepared {len(prepared)} samples: {stats}", flush=True)
    for warning in stats.warnings():
        print(f"thub: WARNING: {warning}", flush=True)
    return prepared


def _datasets(context: RunContext, plan: dict[str, Any], tokenizer: Any) -> tuple[Any, Any]:
    from datasets import Dataset

    params = context.params
    dataset = Dataset.from_list(prepare_rows(context, plan, tokenizer))
    if plan["data"]["validation_split"]:
        split = dataset.train_test_split(test_size=plan["data"]["validation_split"], seed=params["seed"])
        return split["train"], split["test"]
    if plan["data"].get("validation_data_path"):
        from thub.backend import validation_data

        held_out = prepare_rows(context, plan, tokenizer, validation_data(params))
        if not held_out:
            from thub.backend import UsageError

            raise UsageError(f"validation_data_path {params['validation_data_path']}: no example left to evaluate on")
        return dataset, Dataset.from_list(held_out)
    return dataset, None


def run(context: RunContext) -> dict[str, Any]:
    """Train a LoRA adapter with unsloth according to ``translate("lora_sft", params)``."""
    unsloth = import_unsloth()
    import trl

    params = context.params
    plan = translate(context.algorithm, params)
    os.environ.update(plan["environment"])
    config_kwargs = dict(plan["config"])
    if config_kwargs["bf16"] and not unsloth.is_bfloat16_supported():
        print("thub: this GPU has no bf16: training in fp16", flush=True)
        config_kwargs.update(bf16=False, fp16=True)

    model, tokenizer = unsloth.FastLanguageModel.from_pretrained(**plan["load"])
    if getattr(tokenizer, "pad_token", None) is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = unsloth.FastLanguageModel.get_peft_model(model, **plan["lora"])
    train_dataset, eval_dataset = _datasets(context, plan, tokenizer)
    config = trl.SFTConfig(**with_legacy_logging_dir(trl.SFTConfig, config_kwargs, plan["environment"]))
    trainer = trl.SFTTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=train_dataset,
                             eval_dataset=eval_dataset, data_collator=LabelPadCollator(tokenizer.pad_token_id),
                             callbacks=[metrics_callback(context)])
    output = trainer.train(resume_from_checkpoint=context.resume_from)
    if context.stop_requested:
        latest = context.run_dir.latest_checkpoint()
        return {"interrupted": True, "final_checkpoint": str(latest[0]) if latest else None}
    final = None
    if plan["save_final_checkpoint"]:
        final = str(context.run_dir.path / "final")
        model.save_pretrained(final)  # the LoRA adapter (adapter_config.json + adapter_model.safetensors)
        tokenizer.save_pretrained(final)
        context.checkpoint(final, trainer.state.global_step)
        if plan["merged"]:
            # the base weights with the adapter merged in, in 16 bits (unsloth dequantises a 4-bit base)
            model.save_pretrained_merged(plan["merged"]["dir"], tokenizer, save_method=plan["merged"]["save_method"])
            print(f"thub: merged 16-bit model saved to {plan['merged']['dir']}", flush=True)
    summary = {k: v for k, v in output.metrics.items() if isinstance(v, (int, float))}
    summary["global_step"] = trainer.state.global_step
    if final and plan["merged"]:
        summary["merged_model"] = plan["merged"]["dir"]
    return {"final_checkpoint": final, "summary": summary}
