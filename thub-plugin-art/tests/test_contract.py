"""thub's backend contract; the translation checked against ART 0.5.18's own config types and
signatures; the GRPO loop, metrics and shutdown semantics with a stand-in for ART on CPU."""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from thub_plugin_art import INSTALL

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.runner.context import RunContext
from thub.runner.metrics import read_metrics
from thub.runner.rundir import RunDirectory
from thub.testing import BackendContract

ROOT = Path(__file__).parents[2]
BASE = {"model_path": "Qwen/Qwen2.5-0.5B-Instruct", "data_path": "d.jsonl", "ckpt_output_dir": "out"}
# The openpipe-art 0.5.18 wheel unpacked without dependencies (.ci/run); nothing in it is executed
# except the TypedDict modules art/dev/{engine,model,validate}.py.
ART_SOURCE = ROOT / "build" / "openpipe-art-0.5.18"

# Keys of ART 0.5.18's config TypedDicts that thub writes, read from src/art/dev/{model,engine}.py
# (checked against the wheel itself when it is unpacked, see test_keys_are_fields_of_art_typeddicts).
ART_FIELDS = {
    "init_args": {"load_in_4bit", "load_in_8bit", "trust_remote_code", "random_state", "use_gradient_checkpointing",
                  "max_seq_length"},
    "engine_args": {"gpu_memory_utilization", "trust_remote_code", "seed", "max_lora_rank", "max_model_len",
                    "enforce_eager"},
    "peft_args": {"r", "lora_alpha", "lora_dropout", "use_rslora", "random_state", "use_gradient_checkpointing",
                  "target_modules"},
    "trainer_args": {"seed", "max_grad_norm", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                     "gradient_checkpointing"},
}


class TestArtContract(BackendContract):
    backend = "art"
    plugin_module = "thub_plugin_art"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {"lora_grpo": {**BASE, "group_size": 4, "lora_r": 32, "reward": ["math"]}}
    read_samples = [("lora_grpo", {**BASE, "group_size": 4})]  # rollout mode: no reward beside rollout_function
    checks = frozenset({"art.module-collision", "art.single-gpu", "art.vllm-runtime"})
    # rollout mode: the tasks are the user's own rows, handed to the rollout function as they are
    reads_data_path = frozenset({"load_tasks"})


def _plan(**params: Any) -> dict[str, Any]:
    registry = load_registry()
    resolved = resolve(registry, "lora_grpo", backend="art", flags={**BASE, **params}, environ={})
    return registry.translate("lora_grpo", "art", resolved.values())


def _full_plan() -> dict[str, Any]:
    return _plan(lora_r=40, target_modules=["q_proj", "v_proj"], max_seq_len=4096, trust_remote_code=True,
                 gpu_memory_utilization=0.3, max_grad_norm=0.5, weight_decay=0.1, beta1=0.9, beta2=0.99, eps=1e-8,
                 load_in_4bit=True, use_rslora=True, gradient_checkpointing=False, wandb_project="p",
                 wandb_run_name="r", wandb_entity="e", enforce_eager=True, max_lora_rank=128)


def test_gpu_memory_utilization_reaches_the_vllm_engine_args() -> None:
    plan = _plan(gpu_memory_utilization=0.3)
    assert plan["internal_config"]["engine_args"]["gpu_memory_utilization"] == 0.3
    # the backend default is there too when the user sets nothing (never vLLM's 0.9)
    assert _plan()["internal_config"]["engine_args"]["gpu_memory_utilization"] == 0.45
    assert "gpu_memory_utilization" not in _plan()["internal_config"]["init_args"]


def test_lora_rank_above_vllms_default_sets_max_lora_rank() -> None:
    assert "max_lora_rank" not in _plan(lora_r=16)["internal_config"]["engine_args"]
    assert _plan(lora_r=40)["internal_config"]["engine_args"]["max_lora_rank"] == 64
    with pytest.raises(UsageError, match="largest LoRA rank 512"):
        _plan(lora_r=600)


def test_full_translation() -> None:
    plan = _full_plan()
    config = plan["internal_config"]
    assert plan["model"] == {"name": "r", "project": "p", "entity": "e", "base_model": BASE["model_path"],
                             "base_path": "out/.art"}
    assert plan["backend"] == {"in_process": True, "path": "out/.art"}
    assert config["init_args"]["load_in_4bit"] is True and config["init_args"]["max_seq_length"] == 4096
    assert config["engine_args"]["max_model_len"] == 4096
    assert config["engine_args"]["enforce_eager"] is True and config["engine_args"]["max_lora_rank"] == 128
    assert config["peft_args"]["target_modules"] == ["q_proj", "v_proj"]
    assert config["peft_args"]["use_gradient_checkpointing"] is False
    assert config["trainer_args"]["max_grad_norm"] == 0.5 and config["trainer_args"]["adam_beta2"] == 0.99
    assert plan["train"] == {"learning_rate": 1e-5, "save_checkpoint": True}
    assert plan["loop"]["num_iterations"] == 15 and plan["loop"]["rewards"] == ["math"]
    assert plan["environment"]["WANDB_PROJECT"] == "p" and plan["environment"]["IMPORT_UNSLOTH"] == "1"
    for section, keys in ART_FIELDS.items():
        assert set(config[section]) <= keys, section
    # ART's default would be 4-bit; thub's default is not, and says so explicitly
    assert _plan()["internal_config"]["init_args"]["load_in_4bit"] is False
    assert _plan()["model"]["name"] == "qwen2.5-0.5b-instruct-grpo"


def test_only_lora_grpo_and_unhonoured_parameters_are_errors() -> None:
    spec = load_registry().backends["art"]
    assert set(spec.algorithms) == {"lora_grpo"} and spec.needs_cuda
    from thub_plugin_art.translate import translate

    with pytest.raises(UsageError, match="LoRA adapters only"):
        translate("grpo", {})
    for name, value in (("use_dora", True), ("beta", 0.1), ("tensor_parallel_size", 2), ("max_prompt_length", 64),
                        ("nproc_per_node", 2)):
        with pytest.raises(UsageError, match=rf"does not honour these lora_grpo parameters:\n  {name} "):
            _plan(**{name: value})


def test_single_gpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_plugin_art import visible_gpu_count
    from thub_plugin_art.translate import single_gpu

    assert single_gpu({"CUDA_VISIBLE_DEVICES": "3,1"}) == "3" and single_gpu({}) == "0"
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert _plan()["environment"]["CUDA_VISIBLE_DEVICES"] == "2"


def test_doctor_checks_and_gpu_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    import thub.selection
    from thub.specs import CheckContext

    registry = load_registry()
    ids = {c for c in registry.checks if c.startswith("art.")}
    assert ids == {"art.single-gpu", "art.vllm-runtime", "art.module-collision"}
    # libraries and the GPU: the core check, as `thub train --backend art` runs it, on both sides of
    # the GPU boundary (mocked: whether a driver is visible, and whether ART is installed)
    check = registry.checks["core.backend-requirements"]
    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: False)
    monkeypatch.setattr(thub.selection, "requirement_problem", lambda spec: None)
    assert not registry.checks["art.single-gpu"].applies(CheckContext(backend="art"))  # GPU-only checks
    cuda = check.run(CheckContext(backend="art"))
    assert (cuda.status, cuda.summary) == ("fail", "backend art needs an NVIDIA GPU; none found")
    assert "--backend trl" in cuda.fix and "--backend verl" not in cuda.fix  # verl needs a GPU too
    monkeypatch.setattr(thub.selection, "cuda_visible", lambda: True)
    assert registry.checks["art.single-gpu"].applies(CheckContext(backend="art"))
    monkeypatch.setattr(thub.selection, "requirement_problem",
                        lambda spec: "openpipe-art is not installed" if spec.startswith("openpipe-art") else None)
    libs = check.run(CheckContext(backend="art"))
    assert (libs.status, libs.summary) == ("fail", "backend art is missing openpipe-art>=0.5.18,<0.6")
    assert libs.fix == INSTALL and libs.details == ("openpipe-art is not installed",)
    monkeypatch.setattr(thub.selection, "requirement_problem", lambda spec: None)
    assert check.run(CheckContext(backend="art")).status == "ok"


# --- against ART's own types -------------------------------------------------------------------

def _art_dev() -> types.ModuleType:
    """ART's art.dev config modules, loaded without running art/__init__ (litellm, weave, ...)."""
    if not (ART_SOURCE / "art" / "dev" / "model.py").exists():
        pytest.skip(f"openpipe-art 0.5.18 is not unpacked at {ART_SOURCE} (see .ci/run)")
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name == "art" or name.startswith("art.")}
    try:
        for name, path in (("art", ART_SOURCE / "art"), ("art.dev", ART_SOURCE / "art" / "dev")):
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
        module = types.SimpleNamespace(
            model=importlib.import_module("art.dev.model"),
            engine=importlib.import_module("art.dev.engine"),
            validate=importlib.import_module("art.dev.validate"),
        )
    finally:
        for name in [n for n in sys.modules if n == "art" or n.startswith("art.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    return module  # type: ignore[return-value]


def test_keys_are_fields_of_art_typeddicts() -> None:
    dev = _art_dev()
    classes = {"init_args": dev.model.InitArgs, "engine_args": dev.engine.EngineArgs,
               "peft_args": dev.model.PeftArgs, "trainer_args": dev.model.TrainerArgs}
    assert set(dev.model.InternalModelConfig.__annotations__) >= set(classes)
    config = _full_plan()["internal_config"]
    for section, cls in classes.items():
        fields = set(cls.__annotations__)
        assert ART_FIELDS[section] <= fields, (section, ART_FIELDS[section] - fields)
        assert set(config[section]) <= fields, (section, set(config[section]) - fields)
    dev.validate.validate_dedicated_config(config)  # ART's own validation of the shared-GPU config


def _signature(path: Path, cls: str, method: str) -> set[str]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    args = item.args
                    return {a.arg for a in [*args.args, *args.kwonlyargs]}
    raise AssertionError(f"{cls}.{method} not found in {path}")


def test_calls_match_art_signatures() -> None:
    if not ART_SOURCE.exists():
        pytest.skip(f"openpipe-art 0.5.18 is not unpacked at {ART_SOURCE} (see .ci/run)")
    plan = _full_plan()
    art_dir = ART_SOURCE / "art"
    assert set(plan["model"]) | {"_internal_config"} <= _signature(art_dir / "model.py", "TrainableModel", "__init__")
    assert set(plan["backend"]) <= _signature(art_dir / "local" / "backend.py", "LocalBackend", "__init__")
    assert set(plan["train"]) <= _signature(art_dir / "local" / "backend.py", "LocalBackend", "train")
    # the engine args go where ART's Unsloth service builds vLLM's engine from
    service = (art_dir / "unsloth" / "service.py").read_text()
    assert 'self.config.get("engine_args", {})' in service


# --- the loop, with a stand-in for ART ----------------------------------------------------------

class FakeTrajectory:
    def __init__(self, messages_and_choices: list[Any], reward: float, metrics: dict[str, Any] | None = None) -> None:
        self.messages_and_choices, self.reward, self.metrics = messages_and_choices, reward, metrics or {}


class FakeGroup:
    def __init__(self, coroutines: Any) -> None:
        self.coroutines = list(coroutines)
        self.trajectories: list[FakeTrajectory] = []


class FakeArt:
    Trajectory = FakeTrajectory
    TrajectoryGroup = FakeGroup

    @staticmethod
    async def gather_trajectory_groups(groups: list[FakeGroup], max_exceptions: int = 0) -> list[FakeGroup]:
        for group in groups:
            group.trajectories = list(await asyncio.gather(*group.coroutines))
        return groups


class FakeModel:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        FakeModel.last = self

    async def register(self, backend: Any) -> None:
        self.backend = backend

    async def get_step(self) -> int:
        return 0

    def get_inference_name(self) -> str:
        return "m@0"

    def openai_client(self) -> Any:
        async def create(**kwargs: Any) -> Any:
            answer = kwargs["messages"][-1]["content"].split("+")
            text = str(sum(int(x) for x in answer)) if len(answer) == 2 else "no idea"
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=types.SimpleNamespace(content=text))])

        return types.SimpleNamespace(chat=types.SimpleNamespace(completions=types.SimpleNamespace(create=create)))


FakeArt.TrainableModel = FakeModel  # type: ignore[attr-defined]


class FakeBackend:
    close_error: BaseException | None = None

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs, self.steps = kwargs, 0

    async def train(self, model: Any, groups: list[Any], **kwargs: Any) -> Any:
        self.steps += 1
        assert kwargs == {"learning_rate": 1e-5, "save_checkpoint": True}
        return types.SimpleNamespace(step=self.steps, checkpoint_path=f"/ckpt/{self.steps:04d}",
                                     metrics={"train/loss": 0.5 / self.steps, "train/grad_norm": 1.0})

    async def close(self) -> None:
        if self.close_error:
            raise self.close_error


def _context(tmp_path: Path, data: Path, **params: Any) -> tuple[RunContext, dict[str, Any]]:
    registry = load_registry()
    flags = {**BASE, "data_path": str(data), "ckpt_output_dir": str(tmp_path), "num_iterations": 3,
             "group_size": 2, "prompt_batch_size": 2, **params}
    values = resolve(registry, "lora_grpo", backend="art", flags=flags, environ={}).values()
    run_dir = RunDirectory(tmp_path)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    (run_dir.path / "logs").mkdir(exist_ok=True)
    context = RunContext(algorithm="lora_grpo", backend="art", params=values, run_dir=run_dir)
    return context, registry.translate("lora_grpo", "art", values)


@pytest.fixture
def arithmetic(tmp_path: Path) -> Path:
    path = tmp_path / "grpo.jsonl"
    rows = [{"question": f"{a}+{b}", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (5, 6)]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loop_writes_one_metrics_line_per_iteration(tmp_path: Path, arithmetic: Path) -> None:
    from thub_plugin_art.runner import run_with

    context, plan = _context(tmp_path / "run", arithmetic)
    outcome = run_with(context, plan, FakeArt, FakeBackend)
    assert FakeModel.last.kwargs["_internal_config"]["engine_args"]["gpu_memory_utilization"] == 0.45
    lines = read_metrics(context.run_dir.metrics)
    assert [line["step"] for line in lines] == [1, 2, 3]
    for line in lines:
        assert line["max_steps"] == 3 and line["reward"] == 1.0 and line["total_rollouts"] == 4
        assert {"epoch", "learning_rate", "timestamp", "loss", "grad_norm", "mean_reward"} <= set(line)
    assert lines[-1]["epoch"] == 1.0
    assert outcome == {"final_checkpoint": "/ckpt/0003",
                       "summary": {"global_step": 3, "iterations_run": 3, "final_mean_reward": 1.0}}
    events = [json.loads(line) for line in context.run_dir.events.read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [1, 2, 3]


@pytest.mark.parametrize("error", [ConnectionRefusedError("vLLM health check"), RuntimeError("engine core died")])
def test_cleanup_error_after_training_keeps_the_run_succeeded(tmp_path: Path, arithmetic: Path,
                                                              error: BaseException,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from thub_plugin_art.runner import run_with

    class Failing(FakeBackend):
        close_error = error

    context, plan = _context(tmp_path / "run", arithmetic)
    outcome = run_with(context, plan, FakeArt, Failing)
    assert outcome["final_checkpoint"] == "/ckpt/0003"
    assert "cleanup failed after training finished" in capsys.readouterr().err


def test_cleanup_that_hangs_is_cut(tmp_path: Path, arithmetic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_plugin_art import runner

    class Hanging(FakeBackend):
        async def close(self) -> None:
            await asyncio.sleep(3600)

    monkeypatch.setattr(runner, "CLEANUP_TIMEOUT", 0.2)
    monkeypatch.setattr(runner.close_quietly, "__defaults__", (0.2,))
    context, plan = _context(tmp_path / "run", arithmetic)
    assert runner.run_with(context, plan, FakeArt, Hanging)["summary"]["global_step"] == 3


def test_failure_during_training_fails_the_run(tmp_path: Path, arithmetic: Path) -> None:
    from thub_plugin_art.runner import run_with

    class Broken(FakeBackend):
        async def train(self, model: Any, groups: list[Any], **kwargs: Any) -> Any:
            raise RuntimeError("CUDA out of memory")

    context, plan = _context(tmp_path / "run", arithmetic)
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        run_with(context, plan, FakeArt, Broken)


def test_stop_request_ends_between_iterations(tmp_path: Path, arithmetic: Path) -> None:
    from thub_plugin_art.runner import run_with

    class StopAfterOne(FakeBackend):
        async def train(self, model: Any, groups: list[Any], **kwargs: Any) -> Any:
            context._stop_signal = 15
            return await super().train(model, groups, **kwargs)

    context, plan = _context(tmp_path / "run", arithmetic)
    outcome = run_with(context, plan, FakeArt, StopAfterOne)
    assert outcome == {"interrupted": True, "final_checkpoint": "/ckpt/0001"}


async def rollout_for_test(model: Any, task: dict[str, Any]) -> FakeTrajectory:
    return FakeTrajectory([{"role": "user", "content": task["q"]}], reward=0.25)


def test_rollout_function_mode_by_import_string(tmp_path: Path) -> None:
    """Rollout-function mode chosen with the rollout_function parameter; the rows are the tasks, as they are."""
    from thub_plugin_art.runner import load_rollout_function, load_tasks, train_loop

    data = tmp_path / "tasks.jsonl"
    # rows thub's data check accepts (GRPO rows); the extra keys reach the rollout function
    data.write_text('{"question": "2+2", "answer": "4", "q": "a"}\n{"question": "3+3", "answer": "6", "q": "b"}\n')
    context, plan = _context(tmp_path / "run", data, rollout_function=f"{__name__}:rollout_for_test")
    assert plan["mode"] == "rollout_function" and plan["loop"]["rewards"] == []
    assert plan["loop"]["rollout_function"] == f"{__name__}:rollout_for_test"
    tasks = load_tasks(context, plan)
    assert [t["q"] for t in tasks] == ["a", "b"] and tasks[0]["question"] == "2+2"
    rollout = load_rollout_function(plan["loop"]["rollout_function"])
    state: dict[str, Any] = {}
    asyncio.run(train_loop(context, plan, FakeArt, FakeModel(), FakeBackend(), tasks, rollout, state))
    assert read_metrics(context.run_dir.metrics)[-1]["reward"] == 0.25
    with pytest.raises(TypeError, match="must be an async function"):
        load_rollout_function("thub_builtins.reward_functions:math")


def test_task_sampling_is_seeded_per_iteration() -> None:
    from thub_plugin_art.runner import sample_tasks

    tasks = [{"i": i} for i in range(10)]
    assert sample_tasks(tasks, 3, 42, 1) == sample_tasks(tasks, 3, 42, 1)
    assert sample_tasks(tasks, 3, 42, 1) != sample_tasks(tasks, 3, 42, 2)
    assert len(sample_tasks(tasks, 50, 42, 0)) == 10


def test_rollout_function_excludes_reward_and_system_prompt() -> None:
    with pytest.raises(UsageError, match="reward not used with rollout_function"):
        _plan(rollout_function="m:f", reward=["math"])
    with pytest.raises(UsageError, match="system_prompt not used with rollout_function"):
        _plan(rollout_function="m:f", system_prompt="be brief")
    assert _plan(rollout_function="m:f")["mode"] == "rollout_function"


def test_enforce_eager_reaches_the_engine_args_only_when_set() -> None:
    assert _plan(enforce_eager=True)["internal_config"]["engine_args"]["enforce_eager"] is True
    assert _plan(enforce_eager=False)["internal_config"]["engine_args"]["enforce_eager"] is False
    assert "enforce_eager" not in _plan()["internal_config"]["engine_args"]


def test_max_lora_rank_given_or_derived() -> None:
    assert _plan(lora_r=8, max_lora_rank=64)["internal_config"]["engine_args"]["max_lora_rank"] == 64
    assert _plan(lora_r=40)["internal_config"]["engine_args"]["max_lora_rank"] == 64
    with pytest.raises(UsageError,
                       match=r"max_lora_rank 100 is not a LoRA rank vLLM accepts .*nearest valid values: 64, 128"):
        _plan(lora_r=40, max_lora_rank=100)
    with pytest.raises(UsageError, match="max_lora_rank 16 is smaller than lora_r 32"):
        _plan(lora_r=32, max_lora_rank=16)


def test_num_iterations_and_max_steps_are_the_same_step_count() -> None:
    assert _plan()["loop"]["num_iterations"] == 15 and _plan()["max_steps"] == 15  # neither set: ART's 15
    for flags in ({"num_iterations": 4}, {"max_steps": 4}, {"num_iterations": 4, "max_steps": 4}):
        plan = _plan(**flags)
        assert plan["loop"]["num_iterations"] == plan["max_steps"] == 4, flags
    with pytest.raises(UsageError, match="max_steps 2 and num_iterations 3 disagree"):
        _plan(num_iterations=3, max_steps=2)
    from thub_plugin_art.translate import iterations

    with pytest.raises(UsageError, match="on art both mean iterations"):
        iterations({"num_iterations": 3, "max_steps": 2})
    # no backend default for num_iterations (it would contradict a max_steps the user sets)
    resolved = resolve(load_registry(), "lora_grpo", backend="art", flags={**BASE, "max_steps": 5}, environ={})
    assert resolved.values()["num_iterations"] is None and resolved.sources["num_iterations"] == "default"


def test_max_steps_reaches_the_metrics(tmp_path: Path, arithmetic: Path) -> None:
    from thub_plugin_art.runner import run_with

    context, plan = _context(tmp_path / "run", arithmetic, num_iterations=None, max_steps=2)
    run_with(context, plan, FakeArt, FakeBackend)
    assert [(line["step"], line["max_steps"]) for line in read_metrics(context.run_dir.metrics)] == [(1, 2), (2, 2)]


def test_lora_alpha_default_is_thubs() -> None:
    assert _plan()["internal_config"]["peft_args"]["lora_alpha"] == 32  # ART's own default is 16


# --- unset means the library's default (issue 14.3) -------------------------------------------

def _literal_keywords(call: ast.Call) -> dict[str, Any]:
    """A call's keyword arguments whose values are literals (the others, e.g. ``model=base_model``, are not
    defaults)."""
    found = {}
    for keyword in call.keywords:
        try:
            found[keyword.arg] = ast.literal_eval(keyword.value)
        except ValueError:
            continue
    return found


def _art_config_defaults() -> dict[str, dict[str, Any]]:
    """ART's own internal-config defaults: the literal keywords of ``InitArgs(...)``, ``EngineArgs(...)``,
    ``PeftArgs(...)`` and ``TrainerArgs(...)`` in ``art/dev/get_model_config.py``, which ART then
    ``update``s with the user's ``_internal_config`` (read, not imported: the module imports megatron)."""
    path = ART_SOURCE / "art" / "dev" / "get_model_config.py"
    if not path.exists():
        pytest.skip(f"openpipe-art 0.5.18 is not unpacked at {ART_SOURCE} (see .ci/run)")
    source = path.read_text()
    assert ".update(config.get(" in source  # the user's sections override these defaults key by key
    sections = {"InitArgs": "init_args", "EngineArgs": "engine_args", "PeftArgs": "peft_args",
                "TrainerArgs": "trainer_args"}
    defaults: dict[str, dict[str, Any]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in sections:
            defaults[sections[node.func.id]] = _literal_keywords(node)
    assert set(defaults) == set(sections.values()), defaults
    return defaults


def _signature_defaults(path: Path, cls: str, method: str) -> dict[str, Any]:
    """The literal defaults of ``cls.method``'s parameters (ART's own signature, read from the wheel)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    args = item.args
                    pairs = [*zip(args.args[len(args.args) - len(args.defaults):], args.defaults),
                             *zip(args.kwonlyargs, args.kw_defaults)]
                    return {arg.arg: ast.literal_eval(value) for arg, value in pairs if value is not None}
    raise AssertionError(f"{cls}.{method} not found in {path}")


# Where ART's get_model_config gives no default, the key goes as it is to the library ART hands the
# section to (art/unsloth/train.py: FastLanguageModel.from_pretrained(**init_args),
# get_peft_model(model, **peft_args), GRPOConfig(**trainer_args); vLLM's engine from engine_args).
# Neither Unsloth 2026.3.3 (pinned by ART's [backend] extra) nor vLLM 0.20 (ART's bundled runtime,
# art/_vllm_runtime/uv.lock) is installed here: their signature / EngineArgs defaults.
LIBRARY_DEFAULTS = {
    "init_args": {"load_in_8bit": False, "trust_remote_code": False, "random_state": 3407,
                  "use_gradient_checkpointing": "unsloth"},
    "peft_args": {"lora_dropout": 0.0, "use_rslora": False},
    "engine_args": {"trust_remote_code": False, "gpu_memory_utilization": 0.9, "seed": 0},
}

# Every value a required-only translation writes that differs from ART's own default, and why.
# Anything else differing is a silent change of meaning.
SET_ON_PURPOSE = {
    ("init_args", "load_in_4bit"): "thub's load_in_4bit defaults to false on every backend (ART's own is 4-bit)",
    ("init_args", "random_state"): "thub's declared seed (42): one seed for sampling, Unsloth, vLLM, trainer",
    ("peft_args", "random_state"): "thub's declared seed, as above",
    ("engine_args", "seed"): "thub's declared seed, as above",
    ("engine_args", "gpu_memory_utilization"):
        "backend default 0.45: vLLM's 0.9 runs out of memory next to the trainer",
    ("peft_args", "r"): "thub's shared LoRA default r 16 (ART's 8), shown in --dry-run",
    ("peft_args", "lora_alpha"): "thub's shared LoRA default alpha 32 (ART's 16), shown in --dry-run",
    ("train", "learning_rate"): "backend default 1e-5 (Training Hub's ART value; ART's train() 5e-6)",
    ("model", "base_path"): "thub's run layout: {ckpt_output_dir}/.art",
    ("backend", "path"): "thub's run layout: {ckpt_output_dir}/.art",
    ("backend", "in_process"): "thub's supervised child is the process ART runs in (README: How a run goes)",
}


def test_unset_parameters_leave_arts_defaults() -> None:
    """Translating only the required parameters: every key thub writes equals ART's own default
    (its get_model_config defaults, its signatures' defaults, or the default of the library ART
    hands the key to) unless it is in SET_ON_PURPOSE; a key thub need not write is left out."""
    import dataclasses

    import trl

    plan = _plan(reward=["math"])
    art_dir = ART_SOURCE / "art"
    defaults = _art_config_defaults()
    for section, library in LIBRARY_DEFAULTS.items():
        defaults[section] = {**library, **defaults[section]}
    defaults["trainer_args"] = {**{f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)
                                   if f.default is not dataclasses.MISSING}, **defaults["trainer_args"]}
    defaults["model"] = _signature_defaults(art_dir / "model.py", "TrainableModel", "__init__")
    defaults["backend"] = _signature_defaults(art_dir / "local" / "backend.py", "LocalBackend", "__init__")
    defaults["train"] = _signature_defaults(art_dir / "local" / "backend.py", "LocalBackend", "train")
    written = {**{(s, k): v for s, section in plan["internal_config"].items() for k, v in section.items()},
               **{(s, k): v for s in ("model", "backend", "train") for k, v in plan[s].items()}}
    required = {("model", "name"), ("model", "project"), ("model", "base_model")}  # no default in ART
    unknown = {key for key in written if key[1] not in defaults[key[0]]} - required
    assert not unknown, f"keys thub writes with no known ART default: {sorted(unknown)}"
    differing = {key for key in written if key not in required and written[key] != defaults[key[0]][key[1]]}
    assert differing == set(SET_ON_PURPOSE), {key: (written.get(key), defaults[key[0]].get(key[1]))
                                              for key in differing ^ set(SET_ON_PURPOSE)}
    # unset optimiser / length / module / engine switches: not written at all, ART's own values apply
    for section, key in (("trainer_args", "weight_decay"), ("trainer_args", "adam_beta1"),
                         ("trainer_args", "adam_beta2"), ("trainer_args", "adam_epsilon"),
                         ("init_args", "max_seq_length"), ("engine_args", "max_model_len"),
                         ("peft_args", "target_modules"), ("engine_args", "enforce_eager"),
                         ("engine_args", "max_lora_rank")):
        assert key not in plan["internal_config"][section], (section, key)


def test_gradient_checkpointing_false_reaches_arts_trainer_too() -> None:
    """ART's trainer_args default ``gradient_checkpointing=True`` (get_model_config) makes TRL's
    Trainer enable checkpointing on the model whatever Unsloth was told: a user's false must reach
    it as well; unset leaves ART's own values everywhere."""
    assert _art_config_defaults()["trainer_args"]["gradient_checkpointing"] is True
    config = _plan(gradient_checkpointing=False)["internal_config"]
    assert config["init_args"]["use_gradient_checkpointing"] is False
    assert config["peft_args"]["use_gradient_checkpointing"] is False
    assert config["trainer_args"]["gradient_checkpointing"] is False
    for flags in ({}, {"gradient_checkpointing": True}):
        assert "gradient_checkpointing" not in _plan(**flags)["internal_config"]["trainer_args"]


def test_art_resumes_from_the_checkpoint_thub_decides(tmp_path: Path) -> None:
    """ART resumes by itself from the largest checkpoints/NNNN of the model's directory (get_step_from_dir),
    complete or not; thub's resume_point moves newer half-written adapters aside first, so ART's own step
    is the newest complete checkpoint's."""
    import os

    from thub_plugin_art.runner import checkpoints_dir, resume_point

    module = ART_SOURCE / "art" / "utils" / "get_model_step.py"
    if not module.exists():
        pytest.skip(f"openpipe-art 0.5.18 is not unpacked at {ART_SOURCE}")
    # ART's own function, from the wheel (its module imports the rest of art, which is not installed here)
    tree = ast.parse(module.read_text())
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_step_from_dir")
    namespace: dict[str, Any] = {"os": os}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(module), "exec"), namespace)
    art_step = types.SimpleNamespace(get_step_from_dir=namespace["get_step_from_dir"])

    plan = _plan(ckpt_output_dir=str(tmp_path / "run"))
    folder = checkpoints_dir(plan)
    assert folder == tmp_path / "run" / ".art" / plan["model"]["project"] / "models" / plan["model"]["name"] / \
        "checkpoints"
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    for step, whole in ((3, True), (4, False)):
        adapter = folder / f"{step:04d}"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text("{}")
        tensors = len(header).to_bytes(8, "little") + header + (b"\0" * 4 if whole else b"")  # cut: no tensor bytes
        (adapter / "adapter_model.safetensors").write_bytes(tensors)
    assert art_step.get_step_from_dir(str(folder.parent)) == 4  # left to itself: the half-written one
    assert resume_point(plan) == (folder / "0003", 3)
    assert art_step.get_step_from_dir(str(folder.parent)) == 3
    assert (folder.with_name("checkpoints.incomplete") / "0004" / "adapter_config.json").exists()
