"""The LLaMA-Factory run, inside thub's supervised child process.

thub validates, normalises and mixes the data, writes it with a ``dataset_info.json`` entry that
LLaMA-Factory reads (sharegpt formatting, role/content tags), writes the generated ``train.yaml``,
then calls ``llamafactory.train.tuner.run_exp`` in this process with thub's Trainer callback:
metrics go to ``training_metrics.jsonl`` (with ``max_steps``), every ``checkpoint-N`` is reported,
and SIGTERM/SIGINT saves a checkpoint and stops (``--resume`` continues from it).
llamafactory (and with it torch) is imported here only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from thub.backend import RunContext, UsageError, write_text_atomic
from thub_plugin_llamafactory.translate import translate


def _lf_message(message: dict[str, Any], where: str) -> list[dict[str, str]]:
    """One canonical message as LLaMA-Factory sharegpt turns (tool calls -> a function_call turn)."""
    if message.get("reasoning_content"):
        raise UsageError(f"{where}: reasoning_content: LLaMA-Factory's sharegpt format has no field for it; "
                         "put the reasoning into the assistant content (between <think> tags) or use another backend")
    calls = message.get("tool_calls")
    if not calls:
        return [{"role": message["role"], "content": message.get("content") or ""}]
    if (message.get("content") or "").strip():
        raise UsageError(f"{where}: an assistant turn with both text and tool_calls: LLaMA-Factory's sharegpt "
                         "format has a function_call turn without text; split it or use another backend")
    functions = []
    for call in calls:
        fn = call["function"]
        arguments = fn.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        functions.append({"name": fn["name"], "arguments": arguments})
    return [{"role": "function_call", "content": json.dumps(functions, ensure_ascii=False)}]


def lf_rows(rows: list[dict[str, Any]], locations: list[str], pretraining: bool,
            unmask_all: bool) -> list[dict[str, Any]]:
    """thub's canonical rows as the JSONL rows the generated dataset_info entry describes."""
    if pretraining:
        return [{"text": row["document"]} for row in rows]
    out = []
    for i, row in enumerate(rows):
        where = locations[i] if i < len(locations) else f"row {i + 1}"
        if "input_ids" in row:
            raise UsageError(f"{where}: pre-tokenized rows (input_ids/labels): LLaMA-Factory tokenizes "
                             "conversations itself; give chat or document data")
        if row.get("unmask") and not unmask_all:
            raise UsageError(f"{where}: unmask: LLaMA-Factory unmasks prompts for the whole run only "
                             "(train_on_prompt); set unmask_messages instead")
        messages = [turn for j, m in enumerate(row["messages"]) for turn in _lf_message(m, f"{where}: messages[{j}]")]
        out.append({"messages": messages})
    return out


def write_inputs(context: RunContext, plan: dict[str, Any]) -> int:
    """The data file, dataset_info.json and train.yaml LLaMA-Factory reads; returns the row count."""
    import yaml

    params = context.params
    validated = context.data()  # the rows thub validated before the run (datasets and mixing applied)
    data = lf_rows(validated.rows, validated.locations, plan["data"]["mode"] == "pretraining",
                   bool(params.get("unmask_messages")))
    work = Path(plan["args"]["dataset_dir"])
    # every rank writes the same content; atomically, so that none reads a half-written file
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data)
    write_text_atomic(Path(plan["data"]["file"]), lines, parents=True)
    write_text_atomic(work / "dataset_info.json", json.dumps(plan["dataset_info"], indent=2), parents=True)
    write_text_atomic(Path(plan["config_file"]), yaml.safe_dump(plan["args"], sort_keys=False), parents=True)
    return len(data)


def _global_step(output_dir: Path) -> int:
    state = output_dir / "trainer_state.json"
    if state.exists():
        return int(json.loads(state.read_text()).get("global_step", 0))
    return 0


def _import_run_exp() -> Any:
    """``llamafactory.train.tuner.run_exp``, or an error that says how to repair the environment.

    ``llamafactory.data`` imports torchaudio at module level, and transformers imports torchvision
    when it is installed: the PyPI wheels of both are CUDA builds, which do not load next to a
    ``+cpu`` torch.
    """
    try:
        from llamafactory.train.tuner import run_exp
    except (ImportError, OSError, RuntimeError) as exc:
        import sys

        text = f"{type(exc).__name__}: {exc}"
        if "torchvision" in text or "torchaudio" in text or "libc10_cuda" in text or "PreTrainedModel" in text:
            raise RuntimeError(
                f"LLaMA-Factory cannot be imported ({text}): torchvision/torchaudio are CUDA builds next to a CPU "
                f"torch. Install their CPU builds: {sys.executable} -m pip install torchvision torchaudio "
                "--index-url https://download.pytorch.org/whl/cpu (or uninstall torchvision: LLaMA-Factory's "
                "text training does not use it)") from exc
        raise
    return run_exp


def run(context: RunContext) -> dict[str, Any]:
    """Prepare LLaMA-Factory's inputs, run ``run_exp`` with thub's callback; return the outcome."""
    from thub.backend import metrics_callback

    params = context.params
    plan = translate(context.algorithm, params)
    os.environ.update(plan["environment"])
    count = write_inputs(context, plan)
    print(f"thub: wrote {count} rows and {plan['config_file']} for LLaMA-Factory "
          f"(same run by hand: {plan['command']})", flush=True)
    args = dict(plan["args"])
    if context.resume_from:
        args["resume_from_checkpoint"] = context.resume_from

    run_exp = _import_run_exp()
    run_exp(args, callbacks=[metrics_callback(context)])
    output_dir = Path(args["output_dir"])
    step = _global_step(output_dir)
    if context.stop_requested:
        latest = context.run_dir.latest_checkpoint()
        return {"interrupted": True, "final_checkpoint": str(latest[0]) if latest else None,
                "summary": {"global_step": latest[1] if latest else step}}
    # run_sft/run_pt save the final model (or adapter) and tokenizer into output_dir itself
    context.checkpoint(output_dir, step)
    summary: dict[str, Any] = {"global_step": step}
    results = output_dir / "train_results.json"
    if results.exists():
        summary.update({k: v for k, v in json.loads(results.read_text()).items() if isinstance(v, (int, float))})
    return {"final_checkpoint": str(output_dir), "summary": summary}
