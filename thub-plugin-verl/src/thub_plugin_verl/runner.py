"""verl GRPO run inside thub's supervised child process.

1. thub reads and validates the GRPO rows, writes verl's parquet files and the reward module;
2. ``python -m verl.trainer.main_ppo`` runs with the Hydra overrides from :mod:`translate`
   (an argv list; verl starts Ray, FSDP workers and vLLM itself);
3. meanwhile a thread turns verl's ``file`` logger into thub's ``training_metrics.jsonl`` and
   reports each complete ``global_step_N`` checkpoint;
4. afterwards each LoRA checkpoint is exported with verl's own model merger.

Nothing heavy is imported here: verl, torch and Ray live in the verl process.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from thub.backend import RunContext
from thub_plugin_verl.data import prepare
from thub_plugin_verl.outputs import MetricsConverter, OutputFollower, checkpoint_dirs
from thub_plugin_verl.rewards import resolve_targets, write_module
from thub_plugin_verl.translate import translate

STOP_GRACE_S = 120


def say(message: str) -> None:
    print(f"thub: {message}", flush=True)


def preflight() -> None:
    """Stop early, with the fix, where verl cannot train."""
    from thub.backend import cuda_visible

    if not cuda_visible():
        raise RuntimeError(
            "backend verl needs NVIDIA GPUs (FSDP + vLLM rollouts under Ray) and none is visible; "
            "train on a GPU machine, or use `--backend trl`, which runs grpo/lora_grpo on CPU"
        )
    missing = [name for name in ("verl", "vllm", "ray") if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"backend verl needs {', '.join(missing)} in this environment: "
                           "pip install 'thub-plugin-verl[gpu]'  # see thub doctor")


def resume_dir(resume_from: str | None) -> str | None:
    """verl resumes from ``global_step_N``; thub reports ``global_step_N/actor``."""
    if not resume_from:
        return None
    path = Path(resume_from)
    return str(path.parent if path.name == "actor" else path)


def step_of(path: str | None) -> int:
    match = re.search(r"global_step_(\d+)", path or "")
    return int(match.group(1)) if match else 0


def build_command(plan: dict[str, Any], python: str | None = None) -> list[str]:
    """The argv the runner executes: this interpreter instead of the plan's ``python``."""
    return [python or sys.executable, *plan["argv"][1:]]


def export_adapters(checkpoints: list[tuple[int, Path]], python: str | None = None) -> list[str]:
    """``verl.model_merger`` per checkpoint: ``global_step_N/hf/`` (LoRA: ``hf/lora_adapter/``)."""
    exported = []
    for step, path in checkpoints:
        target = path / "hf"
        if (target / "lora_adapter" / "adapter_config.json").exists():
            exported.append(str(target / "lora_adapter"))
            continue
        command = [python or sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                   "--local_dir", str(path / "actor"), "--target_dir", str(target)]
        say(f"exporting checkpoint {step}: {' '.join(command)}")
        done = subprocess.run(command, check=False)
        adapter = target / "lora_adapter"
        if done.returncode == 0 and (adapter / "adapter_config.json").exists():
            exported.append(str(adapter))
        else:
            say(f"WARNING: LoRA export of {path} failed (exit {done.returncode}); the FSDP checkpoint is kept")
    return exported


def run(context: RunContext) -> dict[str, Any]:
    """Train with verl according to ``translate(algorithm, params)``."""
    from thub.backend import get_registry, load_object

    params = context.params
    plan = translate(context.algorithm, params)  # parameter errors before anything else
    preflight()

    files = plan["files"]
    num_prompts = prepare(context.rows(), files, params.get("system_prompt"))
    if num_prompts < params["prompt_batch_size"]:
        raise ValueError(f"{num_prompts} prompts are fewer than prompt_batch_size {params['prompt_batch_size']}: "
                         "verl drops the incomplete batch, so no step would run")
    targets = resolve_targets(list(params["reward"]), dict(get_registry().rewards))
    for target in targets:
        load_object(target)  # an import error here, not in a Ray worker an hour later
    write_module(files["reward_module"], targets)

    resume = resume_dir(context.resume_from)
    plan = translate(context.algorithm, params, num_prompts=num_prompts, resume_from=resume)
    say(f"data: {num_prompts} prompts in {files['train']}; {plan['max_steps']} steps; "
        f"rewards {', '.join(targets)}")
    env = dict(os.environ)
    env.update(plan["environment"])
    from thub.backend import library_tracker_environment

    # thub's parameters (with their sources) into the tracker runs verl opens itself
    env.update(library_tracker_environment(context, ("tensorboard", "mlflow", "wandb"), via="verl",
                                           mlflow_experiment=plan["mlflow_experiment"]))
    command = build_command(plan)

    converter = MetricsConverter(plan["max_steps"])
    converter.last_step = step_of(resume)
    follower = OutputFollower(files["file_logger"], files["checkpoints"], converter,
                              emit=lambda line: context.metrics.log(line.pop("step"), **line),
                              on_checkpoint=lambda path, step: context.checkpoint(path, step))
    say("launching: " + " ".join(command))
    Path(files["root"]).mkdir(parents=True, exist_ok=True)
    follower.start()
    process = subprocess.Popen(command, env=env, cwd=files["root"])
    stopping_since: float | None = None
    while process.poll() is None:
        if context.stop_requested and stopping_since is None:
            # verl has no save-on-signal: stop it; --resume continues at the last saved step
            say("stop requested: stopping verl (it keeps the checkpoints saved so far)")
            process.terminate()
            stopping_since = time.monotonic()
        elif stopping_since is not None and time.monotonic() - stopping_since > STOP_GRACE_S:
            process.kill()
        time.sleep(0.5)
    follower.stop()
    code = process.returncode
    if code != 0 and not context.stop_requested:
        raise RuntimeError(f"verl exited with code {code} (its traceback is above in this log; for vLLM "
                           "engine failures look for 'EngineCore' lines)")

    checkpoints = checkpoint_dirs(files["checkpoints"])
    adapters = export_adapters(checkpoints) if plan["lora"] and checkpoints else []
    summary: dict[str, Any] = {k: v for k, v in (converter.last or {}).items()
                               if isinstance(v, (int, float)) and k not in ("timestamp", "max_steps")}
    summary["num_prompts"] = num_prompts
    if adapters:
        summary["adapter_checkpoints"] = adapters
    final = adapters[-1] if adapters else (str(checkpoints[-1][1] / "actor") if checkpoints else None)
    return {"interrupted": context.stop_requested, "final_checkpoint": final, "summary": summary}
