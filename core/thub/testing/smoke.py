"""What every GPU smoke script asserts about a finished run directory.

    python -m thub.testing.smoke RUN_DIR --status succeeded --steps 18 [--metric loss] [--reload model|adapter|none]

* ``result.json`` has the expected ``status``;
* ``training_metrics.jsonl`` holds steps ``1..N`` each once, in order (``--steps N``; with
  ``--steps 0`` at least one line and no gap or repeat), every line with ``max_steps`` and the
  metric (``loss`` or ``reward``...) finite;
* the final (or, for an interrupted run, the newest) checkpoint loads: a model with
  ``AutoModelForCausalLM.from_pretrained``, an adapter with ``peft.PeftConfig`` and its weights
  file, or ``--reload none``.

Exit status 0 and one ``OK`` line, or 1 and what failed. Imports transformers/peft only for
``--reload``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any


def check_metrics(lines: list[dict[str, Any]], steps: int, metric: str) -> list[str]:
    """Problems with the metrics stream: continuity (each step once, 1..steps) and finite values."""
    problems = []
    numbers: list[Any] = [line.get("step") for line in lines]  # JSON values, checked below
    if not lines:
        return ["training_metrics.jsonl is empty"]
    if steps and numbers != list(range(1, steps + 1)):
        problems.append(f"steps {numbers}, expected 1..{steps} each once")
    elif not steps and numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        problems.append(f"steps {numbers} have a gap or a repeat")
    for line in lines:
        value = line.get(metric)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"step {line.get('step')}: {metric} is {value!r}, not a finite number")
        if line.get("max_steps") is None:
            problems.append(f"step {line.get('step')}: no max_steps")
    return problems


def reload_problem(path: Path, kind: str) -> str | None:
    """None when the checkpoint at ``path`` loads as ``kind`` (model | adapter), else why not."""
    try:
        if kind == "adapter":
            from peft import PeftConfig

            PeftConfig.from_pretrained(str(path))
            if not any((path / name).exists() for name in ("adapter_model.safetensors", "adapter_model.bin")):
                return f"{path}: adapter_config.json but no adapter weights"
        else:
            from transformers import AutoModelForCausalLM

            AutoModelForCausalLM.from_pretrained(str(path))
    except Exception as error:  # what the loader raised is the answer
        return f"{path} does not load as a {kind}: {type(error).__name__}: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--status", default="succeeded")
    parser.add_argument("--steps", type=int, default=0, help="expected last step (0: any, but contiguous)")
    parser.add_argument("--metric", default="loss")
    parser.add_argument("--reload", choices=("model", "adapter", "none"), default="model")
    args = parser.parse_args(argv)

    result = json.loads((args.run_dir / "result.json").read_text())
    lines = [json.loads(line) for line in (args.run_dir / "training_metrics.jsonl").read_text().splitlines()
             if line.strip()]
    problems = []
    if result.get("status") != args.status:
        problems.append(f"status {result.get('status')!r}, expected {args.status!r} ({result.get('error') or ''})")
    problems += check_metrics(lines, args.steps, args.metric)
    checkpoint = result.get("final_checkpoint") or (result.get("checkpoints") or [{}])[-1].get("path")
    if args.reload != "none":
        if not checkpoint:
            problems.append("result.json names no checkpoint")
        else:
            problem = reload_problem(Path(checkpoint), args.reload)
            if problem:
                problems.append(problem)
    if problems:
        print(f"FAIL {args.run_dir}:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    values = [line[args.metric] for line in lines]
    print(f"OK {args.run_dir.name}: {result['status']}, steps 1..{lines[-1]['step']}, {args.metric} "
          f"{values[0]:.4g} -> {values[-1]:.4g}, checkpoint {checkpoint or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
