"""``evaluate(request)``: one model through lm-evaluation-harness's own Python API.

Everything that can be wrong with the request (options, local task rows, task names, a named task's
data while the Hub is unreachable, vLLM without a GPU) is a UsageError (exit 2) before the model
loads. The harness then runs as its CLI would (``lm_eval.simple_evaluate`` with the ``hf`` or
``vllm`` model and the same arguments), and each task's scores become one :class:`TaskScore`
recording the exact arguments, so ``arguments["command"]`` reruns it with ``lm_eval`` by hand.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from thub.errors import UsageError, did_you_mean
from thub.evaluate import EvalRequest, EvalTask, TaskScore
from thub_plugin_lmeval import hub
from thub_plugin_lmeval.context import ContextCut
from thub_plugin_lmeval.local_tasks import write_task
from thub_plugin_lmeval.options import LmevalOptions, parse_options

HARNESS = "lm-eval"
#: ``datasets`` builders that read local files: a task on them needs no Hub.
_LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow", "pandas")


@dataclass
class _Planned:
    """One EvalTask as lm-eval sees it: the spec given to ``TaskManager.load`` (a task name or a
    YAML path) and, once loaded, the leaf tasks and groups it expanded to."""

    task: EvalTask
    spec: str
    leaves: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)


def _check_generation_config(request: EvalRequest) -> None:
    """transformers loads ``generation_config.json`` from the model folder with the model; any
    other file would not be read, so it is refused rather than ignored."""
    if request.generation_config is None:
        return
    given = Path(request.generation_config).expanduser().resolve()
    if given != (Path(request.model_path).expanduser().resolve() / "generation_config.json"):
        raise UsageError(f"generation config {request.generation_config}: lm-eval reads only the model folder's own "
                         f"generation_config.json ({request.model_path}); copy it there")


def _device(request: EvalRequest, options: LmevalOptions) -> str:
    import torch

    cuda = torch.cuda.is_available()
    if options.backend == "vllm":
        if find_spec("vllm") is None:
            raise UsageError("--option backend=vllm: vllm is not installed; on a machine with an NVIDIA GPU: "
                             "python -m pip install -e 'thub-plugin-lmeval[vllm]' (or drop backend=vllm: "
                             "the HF model runs on CPU or GPU)")
        if not cuda:
            raise UsageError("--option backend=vllm: vLLM needs an NVIDIA GPU and none is visible "
                             "(torch.cuda.is_available() is False); drop backend=vllm to use the HF model")
        if request.device and not request.device.startswith("cuda"):
            raise UsageError(f"--device {request.device}: vLLM runs on CUDA devices only")
        return request.device or "cuda"
    if request.device and request.device.startswith("cuda") and not cuda:
        raise UsageError(f"--device {request.device}: no CUDA GPU is visible; use --device cpu")
    return request.device or ("cuda" if cuda else "cpu")


def _model_args(request: EvalRequest, options: LmevalOptions) -> dict[str, Any]:
    args: dict[str, Any] = {"pretrained": request.model_path}
    if options.backend == "vllm":
        if request.max_seq_len is not None:
            args["max_model_len"] = request.max_seq_len
        if options.gpu_memory_utilization is not None:
            args["gpu_memory_utilization"] = options.gpu_memory_utilization
        if options.tensor_parallel_size is not None:
            args["tensor_parallel_size"] = options.tensor_parallel_size
        args["seed"] = request.seed
    elif request.max_seq_len is not None:
        args["max_length"] = request.max_seq_len
    return args


def _check_yaml(path: Path) -> None:
    """A harness YAML lm-eval can load by path: a task config (it builds a group's file as a task)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        config = load_yaml(path, resolve_func=False)
    except Exception as exc:  # noqa: BLE001 - YAML syntax, a missing include: the user's file
        raise UsageError(f"{path}: not a harness task YAML lm-eval can read ({exc})") from None
    if not isinstance(config, dict) or "task" not in config:
        found = ", ".join(config) if isinstance(config, dict) else type(config).__name__
        raise UsageError(f"{path}: expected a harness task config (a 'task' key), found {found or 'nothing'}")
    if "group" in config and not isinstance(config["task"], str):
        raise UsageError(f"{path}: a group config; lm-eval {_version()} loads a task YAML by path, not a group: "
                         "give its tasks' YAML files")


def _version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def _plan(request: EvalRequest, options: LmevalOptions, tasks_dir: Path) -> list[_Planned]:
    """Local JSONL files checked and written as harness tasks; YAML files and names as given."""
    planned = []
    jsonl = False
    cut = ContextCut(request.model_path, request.max_seq_len)
    for task in request.tasks:
        if task.path is None:
            planned.append(_Planned(task, task.name))
            continue
        path = Path(task.path)
        if path.suffix == ".jsonl":
            jsonl = True
            before = cut.cut
            name, _ = write_task(task.name, path, tasks_dir, mode=options.mode,
                                 apply_chat_template=request.apply_chat_template, max_gen_toks=options.max_gen_toks,
                                 cut=cut)
            if cut.cut > before:
                # lm-eval reads only the context's last tokens anyway; said so the scores are not a surprise
                print(f"thub: {path}: {cut.cut - before} prompt or system text(s) longer than the model's context "
                      f"({cut.tokens} tokens) cut to their end before tokenising", file=sys.stderr, flush=True)
            planned.append(_Planned(task, name))
        elif path.suffix in (".yaml", ".yml"):
            _check_yaml(path)
            planned.append(_Planned(task, str(path)))  # lm-eval loads a YAML path as it is (its CLI does too)
        else:
            raise UsageError(f"--tasks {task.path}: lmeval reads .jsonl and .yaml task files, not {path.suffix}")
    if "mode" in options.model_fields_set and not jsonl:
        raise UsageError("--option mode applies to local .jsonl tasks only; none was given")
    return planned


def _dataset_of(task_manager: Any, name: str) -> str:
    entry = task_manager.task_index.get(name)
    cfg = getattr(entry, "cfg", None) or {}
    path, sub = cfg.get("dataset_path"), cfg.get("dataset_name")
    return f"{path} ({sub})" if path and sub else str(path or "its dataset")


def _needs_hub(task_manager: Any, name: str) -> bool:
    entry = task_manager.task_index.get(name)
    cfg = getattr(entry, "cfg", None) or {}
    path = cfg.get("dataset_path")
    # a group or tag carries no dataset of its own: its members may need the Hub
    return path is None or (path not in _LOCAL_BUILDERS and not Path(str(path)).expanduser().exists())


def _load(task_manager: Any, planned: _Planned, offline_reason: str | None) -> list[Any]:
    """Build one task (reading its dataset); a named task whose data is neither reachable nor
    cached is a UsageError naming both."""
    try:
        loaded = task_manager.load([planned.spec])
    except (ConnectionError, FileNotFoundError, OSError) as exc:
        if offline_reason is None or planned.task.path is not None:
            raise
        text = str(exc)
        dataset = _dataset_of(task_manager, planned.spec)
        if dataset == "its dataset" and "'" in text:
            dataset = text.split("'")[1]  # datasets: "Couldn't reach 'org/name' on the Hub (...)"
        raise hub.missing_dataset(planned.task.name, dataset, offline_reason) from None
    planned.leaves = list(loaded["tasks"])
    planned.groups = list(loaded["groups"])
    return [*loaded["groups"].values()] if loaded["groups"] else list(loaded["tasks"].values())


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _metrics(block: dict[str, Any], higher: dict[str, Any], prefix: str = "") -> tuple[dict[str, float],
                                                                                      dict[str, float],
                                                                                      dict[str, bool]]:
    """lm-eval's ``"acc,none"`` / ``"acc_stderr,none"`` keys as thub's ``acc`` (filter ``none``)
    or ``exact_match:strict-match`` (any other filter), with stderr and direction."""
    metrics: dict[str, float] = {}
    stderr: dict[str, float] = {}
    better: dict[str, bool] = {}
    for key, value in block.items():
        if "," not in key:
            continue  # alias, name, sample_len
        metric, _, filt = key.partition(",")
        is_stderr = metric.endswith("_stderr")
        base = metric[: -len("_stderr")] if is_stderr else metric
        name = prefix + (base if filt == "none" else f"{base}:{filt}")
        number = _number(value)
        if number is None:
            continue  # "N/A": no stderr for this metric
        if is_stderr:
            stderr[name] = number
        else:
            metrics[name] = number
            if isinstance(higher.get(base), bool):
                better[name] = higher[base]
    return metrics, stderr, better


def _score(planned: _Planned, out: dict[str, Any], arguments: dict[str, Any], version: str) -> TaskScore:
    results, higher_all, counts = out["results"], out.get("higher_is_better", {}), out.get("n-samples", {})
    samples = sum(int(counts.get(leaf, {}).get("effective", 0)) for leaf in planned.leaves)
    head = planned.groups[0] if planned.groups else planned.leaves[0]
    metrics, stderr, better = _metrics(results.get(head, {}), higher_all.get(head, {}))
    if not metrics:
        # a group without aggregate metrics (or a tag): each member's, prefixed with its name
        for leaf in planned.leaves:
            m, s, b = _metrics(results.get(leaf, {}), higher_all.get(leaf, {}), prefix=f"{leaf}/")
            metrics.update(m)
            stderr.update(s)
            better.update(b)
    return TaskScore(task=planned.task.name, metrics=metrics, stderr=stderr, higher_is_better=better,
                     samples=samples, harness={"name": HARNESS, "version": version},
                     arguments={**arguments, "task": planned.spec})


def _command(arguments: dict[str, Any]) -> str:
    """The ``lm_eval`` command line that reruns the call."""
    model_args = ",".join(f"{k}={v}" for k, v in arguments["model_args"].items())
    parts = ["lm_eval", "run", "--model", arguments["model"], "--model_args", model_args,
             "--tasks", ",".join(arguments["tasks"]), "--batch_size", str(arguments["batch_size"]),
             "--device", arguments["device"], "--seed", ",".join(str(s) for s in arguments["seed"])]
    if arguments["include_path"]:
        parts += ["--include_path", arguments["include_path"]]
    if arguments["limit"] is not None:
        parts += ["--limit", str(arguments["limit"])]
    if arguments["num_fewshot"] is not None:
        parts += ["--num_fewshot", str(arguments["num_fewshot"])]
    if arguments["apply_chat_template"]:
        parts += ["--apply_chat_template", "--fewshot_as_multiturn"]
    return shlex.join(parts)


def _write_samples(out: dict[str, Any], planned: list[_Planned], folder: Path) -> None:
    """Per-sample logs (the exact request text, the model's answer, the metric) as JSONL."""
    from lm_eval.utils import handle_non_serializable

    samples = out.get("samples") or {}
    folder.mkdir(parents=True, exist_ok=True)
    for item in planned:
        rows = [row for leaf in item.leaves for row in samples.get(leaf, [])]
        with (folder / f"{item.task.name}.jsonl").open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, default=handle_non_serializable, ensure_ascii=False) + "\n")


@contextmanager
def _quiet_pool_workers() -> Iterator[None]:
    """lm-eval bootstraps stderrs in a forked ``multiprocessing.Pool`` and terminates it with
    SIGTERM; the workers inherit the caller's SIGTERM handler (``thub``'s raises Interrupted) and
    each would print a traceback. In a forked child the signal just ends it; in this process the
    caller's handler still runs."""
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield
        return
    parent = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != parent:
            os._exit(128 + signum)
        previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def evaluate(request: EvalRequest) -> list[TaskScore]:
    """Score ``request.model_path`` on ``request.tasks`` with lm-evaluation-harness; one
    :class:`TaskScore` per task, in order. Per-sample logs go to ``work_dir/samples/<task>.jsonl``."""
    if not request.tasks:
        raise UsageError("no tasks to evaluate")
    options = parse_options(dict(request.options))
    _check_generation_config(request)
    work = Path(request.work_dir) if request.work_dir else Path(tempfile.mkdtemp(prefix="thub-lmeval-"))
    tasks_dir = work / "tasks"
    planned = _plan(request, options, tasks_dir)
    device = _device(request, options)

    import lm_eval
    from lm_eval.tasks import TaskManager

    include_path = str(tasks_dir) if tasks_dir.is_dir() else None
    model_args = _model_args(request, options)
    task_manager = TaskManager(include_path=include_path, metadata=dict(model_args))
    known = task_manager.all_tasks
    for item in planned:
        if item.task.path is None and item.spec not in task_manager.task_index:
            raise UsageError(f"--tasks {item.spec}: lm-eval {lm_eval.__version__} has no such task, group or tag"
                             f"{did_you_mean(item.spec, known)} (lm-eval ls tasks lists them)")
    named = [p for p in planned if p.task.path is None and _needs_hub(task_manager, p.spec)]
    offline = hub.offline_by_choice()
    if named and offline is None:
        offline = hub.probe()
    with hub.offline_mode(offline if named else None), _quiet_pool_workers():
        objects = [obj for item in planned for obj in _load(task_manager, item, offline)]
        seed = [request.seed] * 4  # python, numpy, torch, few-shot: lm-eval's --seed slots
        arguments: dict[str, Any] = {
            "model": options.backend, "model_args": model_args, "tasks": [p.spec for p in planned],
            "include_path": include_path, "batch_size": request.batch_size, "device": device,
            "limit": request.limit, "num_fewshot": options.num_fewshot,
            "apply_chat_template": request.apply_chat_template,
            "fewshot_as_multiturn": request.apply_chat_template, "seed": seed,
        }
        out = lm_eval.simple_evaluate(
            model=options.backend, model_args=model_args, tasks=objects, num_fewshot=options.num_fewshot,
            batch_size=request.batch_size, device=device, limit=request.limit, log_samples=True,
            apply_chat_template=request.apply_chat_template, fewshot_as_multiturn=request.apply_chat_template,
            task_manager=task_manager, random_seed=seed[0], numpy_random_seed=seed[1],
            torch_random_seed=seed[2], fewshot_random_seed=seed[3])
    if out is None:  # a non-zero rank of a distributed run: rank 0 reports
        return []
    arguments["command"] = _command(arguments)
    _write_samples(out, planned, work / "samples")
    return [_score(item, out, arguments, lm_eval.__version__) for item in planned]
