"""The ART (openpipe-art) GRPO loop, run inside thub's supervised child process.

No spawned sub-process, no pickling: thub's child *is* the process ART runs in
(``LocalBackend(in_process=True)``), rewards and rollout functions are loaded by import string
here, and metrics go straight into thub's stream. ART and torch are imported in :func:`run` only.

Shutdown: once the last iteration has trained, the outcome is kept before ART/vLLM are closed.
A cleanup error is then logged as a warning and the run stays ``succeeded``; a cleanup that
hangs is cut after ``CLEANUP_TIMEOUT`` seconds; and vLLM's non-daemon threads that keep the
interpreter alive after ``result.json`` is written are stopped by thub's supervisor
(``THUB_EXIT_GRACE``). No ``os._exit``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thub.backend import RunContext, library_resume_point, saved_file_problem
from thub_plugin_art.translate import translate

CLEANUP_TIMEOUT = float(os.environ.get("THUB_ART_CLEANUP_TIMEOUT", "60"))


def load_rewards(names: list[str]) -> list[Callable[..., list[float]]]:
    """Reward callables from registered names or ``module:function`` import strings."""
    from thub.backend import get_registry, load_object

    registry = get_registry()
    return [registry.rewards[name].load() if name in registry.rewards else load_object(name) for name in names]


def load_rollout_function(import_string: str) -> Callable[..., Any]:
    """``module:function``: an async ``f(model, task) -> art.Trajectory``."""
    from thub.backend import load_object

    function = load_object(import_string)
    if not asyncio.iscoroutinefunction(function):
        raise TypeError(f"rollout_function {import_string} must be an async function f(model, task) -> art.Trajectory")
    return function


def load_tasks(context: RunContext, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Data+reward mode: thub's GRPO rows with the system prompt; rollout mode: the rows as they are."""
    params = context.params
    if plan["mode"] == "rollout_function":
        path = Path(params["data_path"])
        text = path.read_text()
        rows = json.loads(text) if path.suffix == ".json" else [json.loads(line) for line in text.splitlines()
                                                                if line.strip()]
        return [row if isinstance(row, dict) else {"task": row} for row in rows]
    system = plan["loop"]["system_prompt"]
    tasks = []
    for row in context.rows():  # the GRPO rows thub validated before the run
        prompt = list(row["prompt"])
        if system and not (prompt and prompt[0]["role"] == "system"):
            prompt.insert(0, {"role": "system", "content": system})
        tasks.append({"prompt": prompt, "ground_truth": str(row["ground_truth"])})
    if not tasks:
        raise ValueError(f"{params['data_path']}: no prompts")
    return tasks


def sample_tasks(tasks: list[dict[str, Any]], count: int, seed: int, iteration: int) -> list[dict[str, Any]]:
    """``min(count, len(tasks))`` tasks, the same for the same seed and iteration (resume-safe)."""
    return random.Random(seed + iteration).sample(tasks, min(count, len(tasks)))


def make_rollout(art: Any, plan: dict[str, Any]) -> Callable[..., Any]:
    """Data+reward mode: sample one completion with ART's OpenAI client and score it."""
    loop = plan["loop"]
    rewards = load_rewards(loop["rewards"])

    async def rollout(model: Any, task: dict[str, Any]) -> Any:
        client = model.openai_client()
        completion = await client.chat.completions.create(
            model=model.get_inference_name(), messages=task["prompt"], max_tokens=loop["max_tokens"],
            temperature=loop["temperature"],
        )
        choice = completion.choices[0]
        text = choice.message.content or ""
        scores = [float(f([task["prompt"]], [text], ground_truth=[task["ground_truth"]])[0] or 0.0) for f in rewards]
        return art.Trajectory(messages_and_choices=[*task["prompt"], choice], reward=sum(scores),
                              metrics={"full_match": float(sum(scores) >= len(scores))})

    return rollout


def group_rewards(groups: list[Any]) -> list[float]:
    return [float(t.reward) for group in groups for t in group.trajectories]


def iteration_line(step: int, max_steps: int, learning_rate: float, rewards: list[float],
                   train_metrics: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One metrics line per iteration: rollout statistics plus ART's training metrics."""
    mean = sum(rewards) / len(rewards) if rewards else None
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if mean is not None else None
    line: dict[str, Any] = {
        "max_steps": max_steps, "epoch": step / max_steps, "learning_rate": learning_rate,
        "reward": mean, "mean_reward": mean, "reward_std": std, "total_rollouts": len(rewards),
        "full_match_rate": sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else None,
        "iteration_seconds": seconds,
    }
    for key, value in (train_metrics or {}).items():
        name = key.split("/", 1)[-1] if key.startswith("train/") else key
        if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in line:
            line[name] = value
    return line


async def train_loop(context: RunContext, plan: dict[str, Any], art: Any, model: Any, backend: Any,
                     tasks: list[dict[str, Any]], rollout: Callable[..., Any], state: dict[str, Any]) -> None:
    """Iterations ``model.get_step() .. num_iterations``; fills ``state["outcome"]`` when done."""
    loop = plan["loop"]
    total = loop["num_iterations"]
    semaphore = asyncio.Semaphore(loop["concurrency"])

    async def limited(task: dict[str, Any]) -> Any:
        async with semaphore:
            return await rollout(model, task)

    start = await model.get_step()
    checkpoint = None
    for iteration in range(start, total):
        if context.stop_requested:
            state["outcome"] = {"interrupted": True, "final_checkpoint": checkpoint}
            return
        began = time.time()
        batch = sample_tasks(tasks, loop["prompt_batch_size"], loop["seed"], iteration)
        groups = await art.gather_trajectory_groups(
            [art.TrajectoryGroup(limited(task) for _ in range(loop["group_size"])) for task in batch],
            max_exceptions=0,
        )
        result = await backend.train(model, groups, **plan["train"])
        step = iteration + 1
        checkpoint = getattr(result, "checkpoint_path", None) or checkpoint
        context.metrics.log(step, **iteration_line(step, total, plan["train"]["learning_rate"], group_rewards(groups),
                                                     dict(getattr(result, "metrics", {}) or {}), time.time() - began))
        if checkpoint:
            context.checkpoint(checkpoint, step)
    rewards = [line.get("reward") for line in _read_lines(context)]
    state["outcome"] = {"final_checkpoint": checkpoint, "summary": {
        "global_step": total, "iterations_run": total - start,
        "final_mean_reward": rewards[-1] if rewards else None,
    }}


def _read_lines(context: RunContext) -> list[dict[str, Any]]:
    from thub.backend import read_metrics

    return read_metrics(context.run_dir.metrics)


async def close_quietly(backend: Any, timeout: float = CLEANUP_TIMEOUT) -> str | None:
    """Close ART's backend (vLLM, trainer); return the problem instead of raising it."""
    try:
        await asyncio.wait_for(backend.close(), timeout)
    except TimeoutError:
        return f"ART's backend did not close within {timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - any cleanup failure after training is only a warning
        return f"{type(exc).__name__}: {exc}"
    return None


async def _main(context: RunContext, plan: dict[str, Any], art: Any, backend_class: Any,
                state: dict[str, Any]) -> None:
    model = art.TrainableModel(**plan["model"], _internal_config=plan["internal_config"])
    backend = backend_class(**plan["backend"])
    try:
        await model.register(backend)
        tasks = load_tasks(context, plan)
        if plan["mode"] == "rollout_function":
            rollout = load_rollout_function(plan["loop"]["rollout_function"])
        else:
            rollout = make_rollout(art, plan)
        await train_loop(context, plan, art, model, backend, tasks, rollout, state)
    finally:
        problem = await close_quietly(backend)
        if problem:
            if "outcome" not in state:
                print(f"thub: ART cleanup after a failure also failed: {problem}", file=sys.stderr, flush=True)
            else:
                print(f"thub: WARNING: ART cleanup failed after training finished (the run still succeeded): "
                      f"{problem}", file=sys.stderr, flush=True)


def checkpoints_dir(plan: dict[str, Any]) -> Path:
    """Where ART keeps the model's LoRA checkpoints (``{art_path}/{project}/models/{name}/checkpoints/NNNN``)."""
    model = plan["model"]
    return Path(model["base_path"]) / model["project"] / "models" / model["name"] / "checkpoints"


def _adapter_problem(path: Path) -> str | None:
    try:
        json.loads((path / "adapter_config.json").read_text())
    except FileNotFoundError:
        return "no adapter_config.json"
    except (OSError, ValueError):
        return "adapter_config.json is unreadable"
    weights = path / "adapter_model.safetensors"
    return saved_file_problem(weights if weights.exists() or not (path / "adapter_model.bin").exists()
                              else path / "adapter_model.bin")


def resume_point(plan: dict[str, Any]) -> tuple[Path, int] | None:
    """thub's decision for ART, which resumes by itself from its largest checkpoints/NNNN (complete or
    not): the newest complete adapter, newer half-written ones moved aside before ART looks."""
    return library_resume_point(checkpoints_dir(plan), lambda name: int(name) if name.isdigit() else None,
                                _adapter_problem, "ART")


def run_with(context: RunContext, plan: dict[str, Any], art: Any, backend_class: Any) -> dict[str, Any]:
    """Run the loop; once the outcome is kept, errors from ART's/vLLM's shutdown do not fail the run."""
    state: dict[str, Any] = {}
    # only a --resume finds one (an unfinished run is refused without it; --overwrite clears it)
    resumed = resume_point(plan)
    if resumed:
        print(f"thub: ART resumes from {resumed[0]} (step {resumed[1]}), the newest complete checkpoint", flush=True)
    try:
        asyncio.run(_main(context, plan, art, backend_class, state))
    except Exception as exc:
        if "outcome" not in state:
            raise
        print(f"thub: WARNING: error after training finished (the run still succeeded): {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
    return state["outcome"]


def run(context: RunContext) -> dict[str, Any]:
    """Train LoRA GRPO with ART according to ``translate(algorithm, params)``."""
    plan = translate(context.algorithm, context.params)
    os.environ.update(plan["environment"])  # before ART's import: IMPORT_UNSLOTH, CUDA_VISIBLE_DEVICES
    from thub.backend import library_tracker_environment, wandb_key_environment

    # ART leaves W&B out without WANDB_API_KEY (offline too): an empty key offline, an error online
    os.environ.update(wandb_key_environment(context.params, "ART"))
    # thub's parameters (with their sources) into the W&B run ART opens itself
    os.environ.update(library_tracker_environment(context, ("wandb",), via="ART"))
    import art
    from art.local import LocalBackend  # art.LocalBackend is in __all__ but not imported in 0.5.18

    return run_with(context, plan, art, LocalBackend)
