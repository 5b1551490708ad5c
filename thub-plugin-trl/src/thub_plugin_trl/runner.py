"""The TRL training loop, run inside thub's supervised child process.

Heavy imports (torch, transformers, trl, peft, datasets) happen here only.
"""

from __future__ import annotations

import os
from typing import Any

from thub.backend import RunContext, metrics_callback, with_legacy_logging_dir
from thub_plugin_trl.translate import translate


def _load_tokenizer(plan: dict[str, Any]) -> Any:
    from transformers import AutoTokenizer

    model = plan["model"]
    tokenizer = AutoTokenizer.from_pretrained(model["path"], trust_remote_code=model["trust_remote_code"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _sft_examples(data: Any, params: dict[str, Any], plan: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    """``data``'s rows as thub's masked examples (the same path for the train and held-out rows)."""
    from thub.backend import supervised_examples

    # thub's own masking: correct for any chat template, overlong samples counted, not hidden
    prepared, lines = supervised_examples(
        data.rows, data.locations, tokenizer, max_seq_len=params["max_seq_len"], overlong=plan["data"]["overlong"],
        unmask=params["unmask_messages"],
        block_size=params["block_size"] if plan["data"]["mode"] == "pretraining" else None)
    for line in lines:
        print(line, flush=True)
    return prepared


def _sft_dataset(context: RunContext, plan: dict[str, Any], tokenizer: Any) -> tuple[Any, Any]:
    """The train dataset and the held-out one (``validation_split`` of the rows, or the rows of
    ``validation_data_path``; None without validation)."""
    from datasets import Dataset

    from thub.backend import validation_data

    params = context.params
    data = context.data()  # the rows thub validated before the run (datasets and mixing applied)
    dataset = Dataset.from_list(_sft_examples(data, params, plan, tokenizer))
    if plan["data"]["validation_split"]:
        split = dataset.train_test_split(test_size=plan["data"]["validation_split"], seed=params["seed"])
        return split["train"], split["test"]
    held_out = validation_data(params) if plan["data"].get("validation_data_path") else None
    if held_out is not None:
        examples = _sft_examples(held_out, params, plan, tokenizer)
        if not examples:
            from thub.backend import UsageError

            raise UsageError(f"validation_data_path {params['validation_data_path']}: no example left to evaluate "
                             "on after tokenizing (see the lines above)")
        return dataset, Dataset.from_list(examples)
    return dataset, None


def _grpo_dataset(context: RunContext, plan: dict[str, Any]) -> Any:
    from datasets import Dataset

    rows = context.rows()
    system = plan.get("system_prompt")
    prepared = []
    for row in rows:
        prompt = list(row["prompt"])
        if system and not (prompt and prompt[0]["role"] == "system"):
            prompt.insert(0, {"role": "system", "content": system})
        prepared.append({"prompt": prompt, "ground_truth": str(row["ground_truth"])})
    return Dataset.from_list(prepared)


def load_rewards(names: list[str]) -> list[Any]:
    """Reward callables from registered names or ``module:function`` import strings."""
    from thub.backend import get_registry, load_object

    registry = get_registry()
    functions = []
    for name in names:
        function = registry.rewards[name].load() if name in registry.rewards else load_object(name)
        if not getattr(function, "__name__", None):
            function.__name__ = name.replace(":", ".")
        functions.append(function)
    return functions


def _model_kwargs(plan: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"trust_remote_code": plan["model"]["trust_remote_code"]}
    if plan.get("quantization"):
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(**plan["quantization"])
    return kwargs


def save_merged(model: dict[str, Any], adapter_dir: str, merged_dir: str, tokenizer: Any) -> None:
    """The base model (``model``: the plan's path and trust_remote_code) in 16 bits with the adapter
    in ``adapter_dir`` merged in, saved to ``merged_dir`` by thub's one merge
    (``thub.backend.merge_adapter``: peft's ``merge_and_unload``, the tokenizer saved with the
    adapter, as ``thub checkpoint merge``).

    The base is loaded afresh, unquantised, on the CPU: a QLoRA adapter is merged into the
    16-bit weights (merge_adapter warns), and the trained model on the GPU is left as it is.
    ``tokenizer`` was saved into ``adapter_dir`` before; the merge takes it from there.
    """
    from transformers import AutoConfig

    from thub.backend import merge_adapter

    config = AutoConfig.from_pretrained(model["path"], trust_remote_code=model["trust_remote_code"])
    stored = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "")
    dtype = "float16" if stored.endswith("float16") and "bfloat16" not in stored else "bfloat16"
    merge_adapter(adapter_dir, merged_dir, base=model["path"], dtype=dtype,
                  trust_remote_code=model["trust_remote_code"],
                  warn=lambda message: print(f"thub: warning: {message}", flush=True))
    print(f"thub: merged {dtype} model saved to {merged_dir}", flush=True)


def mixed_precision(config: dict[str, Any]) -> dict[str, Any]:
    """bf16 on a GPU that has it; fp16 (said so) on one that does not (T4, V100), as unsloth does."""
    if config.get("bf16"):
        import torch

        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            print("thub: this GPU has no bf16: training in fp16", flush=True)
            config.update(bf16=False, fp16=True)
    return config


def run(context: RunContext) -> dict[str, Any]:
    """Train with TRL according to ``translate(algorithm, params)``; return the outcome."""
    import trl
    from transformers import AutoModelForCausalLM

    params = context.params
    plan = translate(context.algorithm, params)
    os.environ.update(plan["environment"])
    tokenizer = _load_tokenizer(plan)
    preference = plan["trainer"] in ("DPOTrainer", "KTOTrainer")
    if preference:
        from thub_plugin_trl.preference import preference_dataset

        pairs = preference_dataset(context, plan, tokenizer)  # overlong=error refuses before a model loads
    model = AutoModelForCausalLM.from_pretrained(plan["model"]["path"], **_model_kwargs(plan))
    peft_config = None
    if plan["peft"]:
        from peft import LoraConfig

        peft_config = LoraConfig(**plan["peft"])
    config_class = getattr(trl, plan["config_class"])
    config = config_class(**with_legacy_logging_dir(config_class, plan["config"], plan["environment"]))
    callbacks = [metrics_callback(context)]
    if plan["trainer"] == "SFTTrainer":
        train_dataset, eval_dataset = _sft_dataset(context, plan, tokenizer)
        trainer = trl.SFTTrainer(model=model, args=config, train_dataset=train_dataset, eval_dataset=eval_dataset,
                                 processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
    elif preference:
        from thub_plugin_trl.preference import pretokenized

        reference = plan["reference_model"]
        # in the policy's dtype, as TRL loads its own frozen copy of model_path when there is none
        ref_model = (AutoModelForCausalLM.from_pretrained(reference["path"], dtype=model.dtype,
                                                          trust_remote_code=reference["trust_remote_code"])
                     if reference else None)
        trainer = pretokenized(getattr(trl, plan["trainer"]))(
            model=model, ref_model=ref_model, args=config, train_dataset=pairs, processing_class=tokenizer,
            callbacks=callbacks)
    else:
        trainer = trl.GRPOTrainer(model=model, reward_funcs=load_rewards(plan["rewards"]), args=config,
                                  train_dataset=_grpo_dataset(context, plan), processing_class=tokenizer,
                                  peft_config=peft_config, callbacks=callbacks)
    output = trainer.train(resume_from_checkpoint=context.resume_from)
    if context.stop_requested:
        latest = context.run_dir.latest_checkpoint()
        return {"interrupted": True, "final_checkpoint": str(latest[0]) if latest else None}
    final = None
    if plan["save_final_checkpoint"] and trainer.is_world_process_zero():
        final = str(context.run_dir.path / "final")
        trainer.save_model(final)  # a PEFT model saves its adapter only
        tokenizer.save_pretrained(final)
        context.checkpoint(final, trainer.state.global_step)
        if plan["merged"]:
            save_merged(plan["model"], final, plan["merged"]["dir"], tokenizer)
    summary = {k: v for k, v in output.metrics.items() if isinstance(v, (int, float))}
    summary["global_step"] = trainer.state.global_step
    if final and plan["merged"]:
        summary["merged_model"] = plan["merged"]["dir"]
    return {"final_checkpoint": final, "summary": summary}
