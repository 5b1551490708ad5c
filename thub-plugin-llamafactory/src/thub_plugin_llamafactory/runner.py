"""The LLaMA-Factory run, inside thub's supervised child process.

thub validates, normalises and mixes the data, tokenizes it itself (the model's chat template,
thub's masks: ``dataset.py``) into the saved dataset LLaMA-Factory loads from ``tokenized_path``,
writes the generated ``train.yaml``, then calls ``llamafactory.train.tuner.run_exp`` in this
process with thub's Trainer callback: metrics go to ``training_metrics.jsonl`` (with
``max_steps``), every ``checkpoint-N`` is reported, and SIGTERM/SIGINT saves a checkpoint and
stops (``--resume`` continues from it: thub's resume decision is passed explicitly).
llamafactory (and with it torch) is imported here only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from thub.backend import RunContext, write_text_atomic
from thub_plugin_llamafactory.translate import translate


def write_inputs(context: RunContext, plan: dict[str, Any]) -> list[str]:
    """thub's tokenized examples (at ``tokenized_path``) and the train.yaml LLaMA-Factory reads;
    returns thub's report lines."""
    import yaml

    from thub_plugin_llamafactory.dataset import write_dataset, write_preference_dataset
    from thub_plugin_llamafactory.translate import PREFERENCE_STAGES

    data = context.data()  # the rows thub validated before the run
    if context.algorithm in PREFERENCE_STAGES:  # LLaMA-Factory tokenizes the pairs itself
        lines = write_preference_dataset(context.algorithm, data, context.params, plan)
    else:
        lines = write_dataset(data, context.params, plan)
    # every rank writes the same content; atomically, so that none reads a half-written file
    write_text_atomic(Path(plan["config_file"]), yaml.safe_dump(plan["args"], sort_keys=False), parents=True)
    return lines


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
    args = dict(plan["args"])
    if context.resume_from:  # thub's decision, never LLaMA-Factory's own checkpoint detection
        args.update({"resume_from_checkpoint": context.resume_from, "overwrite_output_dir": False})
    plan = {**plan, "args": args}
    lines = write_inputs(context, plan)
    if context.is_main:
        for line in lines:
            print(line, flush=True)
        written = plan["data"].get("tokenized_path") or plan["data"]["file"]
        print(f"thub: wrote {written} and {plan['config_file']} for LLaMA-Factory "
              f"(same run by hand: {plan['command']})", flush=True)

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
