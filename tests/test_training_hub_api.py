"""thub's Python API as a Training Hub drop-in: positional arguments, default backend, data
paths, callbacks called in the parent from run events, and Training Hub's result keys."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import thub
from thub.errors import UsageError
from thub.manager import get_registry
from thub.specs import RunEvent
from thub_builtins.training_hub import names as th
from thub_builtins.training_hub import rules
from thub_builtins.training_hub.api import _Dispatcher, observe, result_with_training_hub_keys

ROOT = Path(__file__).parents[1]
DATA = str(ROOT / "examples" / "data" / "chat.jsonl")


def test_positional_arguments_bind_in_training_hubs_order() -> None:
    bound = th.bind("osft", ("m", "d.jsonl", 0.25, 16, 4096, 1024, 5e-6, "out"), {"seed": 1})
    assert bound == {"model_path": "m", "data_path": "d.jsonl", "unfreeze_rank_ratio": 0.25,
                     "effective_batch_size": 16, "max_tokens_per_gpu": 4096, "max_seq_len": 1024,
                     "learning_rate": 5e-6, "ckpt_output_dir": "out", "seed": 1}
    assert th.bind("lora_grpo", ("m", "out", "d.jsonl"), {})["data_path"] == "d.jsonl"
    with pytest.raises(TypeError, match="multiple values for argument 'data_path'"):
        th.bind("sft", ("m", "d.jsonl"), {"data_path": "x"})
    with pytest.raises(TypeError, match="takes 35 positional arguments"):
        th.bind("sft", tuple(range(36)), {})


def test_api_function_refuses_training_hub_name_before_launch(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="per_device_eval_batch_size is not supported by thub"):
        thub.lora_sft("m", DATA, str(tmp_path / "o"), "trl", per_device_eval_batch_size=4)
    assert not (tmp_path / "o").exists()  # nothing written


def test_hub_dataset_id_is_refused_before_launch_for_grpo(tmp_path: Path) -> None:
    """Training Hub's GRPO streams a Hub tool-call dataset and converts its rows into tasks (n_train,
    n_val, data_config); thub reads GRPO rows as they are: refused with the export."""
    with pytest.raises(UsageError, match="looks like a Hugging Face dataset id.*export it once"):
        thub.lora_grpo("m", str(tmp_path / "o"), "Agent-Ark/Toucan-1.5M", backend="trl")
    th.check_data_path("grpo", DATA)  # a local file passes


def test_csv_and_hub_ids_go_to_thubs_readers_for_sft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training Hub's sft/osft read CSV (messages as JSON text) and Hugging Face dataset names, as thub's
    readers do now (docs/data.md): the Python API passes them on, it does not refuse them."""
    from thub_builtins.training_hub import functions as api

    csv = tmp_path / "train.csv"
    csv.write_text('messages\n"[{""role"": ""user"", ""content"": ""hello there""}, {""role"": ""assistant"", '
                   '""content"": ""hi back""}]"\n')
    th.check_data_path("sft", str(csv))
    plan = api._training_hub_run("sft", ("m", str(csv), str(tmp_path / "o"), "trl"), {}, api._Caller(dry_run=True))
    assert plan["parameters"]["data_path"]["value"] == str(csv)
    th.check_data_path("sft", "someorg/somedata")  # thub's reader: the local cache, or its clear error
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="not in the local datasets cache"):
        api._training_hub_run("sft", ("m", "someorg/somedata", str(tmp_path / "o"), "trl"), {},
                              api._Caller(dry_run=True))


@pytest.mark.needs_backend("instructlab-training", "mini-trainer")
@pytest.mark.needs_module("instructlab")  # "can run": its library is installed
def test_default_backend_is_training_hubs_when_it_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = get_registry()
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: False)
    assert th.default_backend(registry, "sft") is None  # instructlab-training needs a GPU: thub's choice
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: True)
    assert th.default_backend(registry, "sft") == "instructlab-training"  # installed here (CI installs it)
    assert th.default_backend(registry, "osft") == "mini-trainer"


class Recorder:
    """A Training Hub callback with instance state (kept: it is never pickled)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, Any]] = []

    def __getattr__(self, hook: str) -> Any:
        if hook not in rules.CALLBACK_HOOKS:
            raise AttributeError(hook)
        return lambda context: self.calls.append((hook, context.step, context.loss))


def _event(kind: str, data: dict[str, Any]) -> RunEvent:
    return RunEvent(kind, "/runs/x", "sft", "trl", data)  # type: ignore[arg-type]


def test_events_become_training_hub_hooks_in_order() -> None:
    recorder = Recorder()
    seen: list[tuple[int, dict[str, Any]]] = []
    dispatcher = _Dispatcher([recorder], lambda step, line: seen.append((step, line)))
    for event in (_event("started", {}),
                  _event("metrics", {"step": 1, "epoch": 0.5, "loss": 2.0, "learning_rate": 1e-4}),
                  _event("checkpoint", {"step": 1, "path": "/runs/x/checkpoints/step-1"}),
                  _event("metrics", {"step": 2, "epoch": 1.0, "loss": 1.5, "eval_loss": 1.7}),
                  _event("succeeded", {"status": "succeeded"})):
        dispatcher.thub_on_event(event)
    assert [c[0] for c in recorder.calls] == [
        "on_train_begin",
        "on_epoch_begin", "on_step_begin", "on_log", "on_step_end",
        "on_save",
        "on_epoch_end", "on_epoch_begin", "on_step_begin", "on_log", "on_evaluate", "on_step_end",
        "on_epoch_end", "on_train_end"]
    assert recorder.calls[2] == ("on_step_begin", 1, 2.0)
    assert recorder.calls[-1] == ("on_train_end", 2, 1.5)
    assert [step for step, _ in seen] == [1, 2]


def test_failing_hook_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(thub.TrainingHubCallback):
        def on_log(self, context: Any) -> None:
            raise RuntimeError("boom")

    recorder = Recorder()
    dispatcher = _Dispatcher([Broken(), recorder], None)
    with caplog.at_level(logging.ERROR, logger="thub.training_hub"):
        dispatcher.thub_on_event(_event("metrics", {"step": 1, "loss": 1.0}))
    assert "Broken.on_log failed" in caplog.text
    assert ("on_log", 1, 1.0) in recorder.calls


def test_observe_registers_a_thub_on_event_plugin_for_one_run() -> None:
    registry = get_registry()
    recorder = Recorder()
    before = len(registry.pm.get_plugins())
    with observe(recorder):  # a single callback, as Training Hub accepts
        registry.fire(_event("started", {}))
        assert len(registry.pm.get_plugins()) == before + 1
    registry.fire(_event("started", {}))
    assert recorder.calls == [("on_train_begin", 0, None)]
    assert len(registry.pm.get_plugins()) == before


def test_grpo_result_has_training_hubs_keys(tmp_path: Path) -> None:
    (tmp_path / "training_metrics.jsonl").write_text('{"step": 1, "reward": 0.25}\n{"step": 2, "reward": 0.5}\n')
    resolved = SimpleNamespace(
        algorithm=SimpleNamespace(name="lora_grpo"),
        values=lambda: {"ckpt_output_dir": str(tmp_path), "model_path": "m", "prompt_batch_size": 4,
                        "group_size": 8, "lora_r": 16, "nproc_per_node": None, "num_iterations": None,
                        "max_steps": 2})
    result = result_with_training_hub_keys(resolved, {"status": "succeeded", "final_checkpoint": "f",
                                                      "run_dir": str(tmp_path), "wall_seconds": 3.0,
                                                      "checkpoints": [{"path": "c1", "step": 1}]})
    assert result["status"] == "succeeded"  # thub's own keys win
    assert result["reward_history"] == [0.25, 0.5] and result["final_mean_reward"] == 0.5
    assert result["total_rollouts"] == 2 * 4 * 8
    assert result["checkpoint_path"] == "f" and result["adapter_checkpoints"] == ["c1"]
    for key in ("full_match_history", "timing_history", "total_time_seconds", "n_gpus", "num_iterations"):
        assert key in result


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The resolved config each API call would run (the child is not started)."""
    runs: list[Any] = []

    def fake_run(resolved: Any, **_kwargs: Any) -> dict[str, Any]:
        runs.append(resolved)
        return {"status": "succeeded", "final_checkpoint": None, "run_dir": resolved.values()["ckpt_output_dir"]}

    monkeypatch.setattr("thub.runner.run_training", fake_run)
    return runs


@pytest.mark.needs_backend("instructlab-training")
@pytest.mark.needs_module("instructlab")
def test_training_hubs_default_backend_is_used_and_said(captured: list[Any], monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: True)
    thub.sft("m", DATA, str(tmp_path), num_epochs=1, effective_batch_size=8, learning_rate=1e-5, max_seq_len=512)
    assert captured[-1].backend.name == "instructlab-training"
    assert captured[-1].backend_reason == "Training Hub's default backend for sft"
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: False)
    thub.sft("m", DATA, str(tmp_path))
    assert captured[-1].backend.name == "trl"  # Training Hub's cannot run here: thub's choice
    assert "highest-priority" in captured[-1].backend_reason


@pytest.mark.needs_backend("verl", "art")
def test_num_iterations_on_verl_are_epochs_as_in_training_hub(captured: list[Any], tmp_path: Path) -> None:
    prompts = str(ROOT / "examples" / "data" / "grpo.jsonl")
    thub.grpo("m", str(tmp_path), prompts, backend="verl", num_iterations=3, allow_ignored=True)
    resolved = captured[-1]
    assert resolved.values()["num_epochs"] == 3 and resolved.values()["num_iterations"] is None
    assert "training-hub name num_iterations (verl: epochs) → num_epochs" in resolved.sources["num_epochs"]
    thub.lora_grpo("m", str(tmp_path), prompts, backend="art", num_iterations=3)
    assert captured[-1].values()["num_iterations"] == 3  # on ART: iterations = GRPO steps, thub's meaning


@pytest.mark.slow
def test_control_should_training_stop_checkpoints_and_stops(tiny_model: Path, tmp_path: Path) -> None:
    """Training Hub's TrainingHubControl.should_training_stop, set by a callback in the parent, stops a
    real trl run on CPU like Ctrl-C: a checkpoint, then status interrupted."""

    class StopAtTwo(thub.TrainingHubCallback):
        def on_step_end(self, context: Any) -> None:
            if context.step >= 2:
                context.control.should_training_stop = True

    # the callback runs in the parent, which reads the child's metrics as they come: the stop lands some
    # steps later on a loaded machine (16 on CI once), so the run is long enough that only a stop ends it early
    result = thub.lora_sft(str(tiny_model), DATA, str(tmp_path / "run"), "trl", micro_batch_size=2,
                           max_seq_len=128, learning_rate=1e-3, num_epochs=10, callbacks=[StopAtTwo()])
    assert result["status"] == "interrupted"
    assert 2 <= result["last_metrics"]["step"] < 160  # 320 steps without the stop
    assert result["final_checkpoint"] and Path(result["final_checkpoint"]).exists()


@pytest.mark.needs_backend("verl", "art")
def test_training_hubs_grpo_defaults_apply_on_its_backends(captured: list[Any], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """What Training Hub's lora_grpo passed to verl/ART when the caller left a value out."""
    prompts = str(ROOT / "examples" / "data" / "grpo.jsonl")
    thub.lora_grpo("m", str(tmp_path), prompts, backend="verl", lora_r=32)
    values, sources = captured[-1].values(), captured[-1].sources
    assert (values["prompt_batch_size"], values["lora_alpha"], values["max_prompt_length"]) == (100, 8, 16384)
    assert values["gpu_memory_utilization"] == 0.45 and values["use_dr_grpo"] is True
    assert values["num_epochs"] == 15 and values["num_iterations"] is None  # verl: epochs
    assert values["lora_r"] == 32 and sources["lora_r"] == "api lora_r"
    assert sources["prompt_batch_size"] == "training-hub default prompt_batch_size=100 (lora_grpo on verl)"
    assert sources["nproc_per_node"] == "training-hub default n_gpus=1 (lora_grpo on verl)"
    assert "max_grad_norm" not in {k for k, s in sources.items() if s.startswith("training-hub")}  # verl ignores it
    thub.lora_grpo("m", str(tmp_path), prompts, backend="art")
    values = captured[-1].values()
    assert (values["num_iterations"], values["concurrency"], values["max_grad_norm"]) == (15, 32, 0.1)
    assert values["max_prompt_length"] is None  # ART does not read it
    monkeypatch.setenv("THUB_PROMPT_BATCH_SIZE", "4")
    thub.lora_grpo("m", str(tmp_path), prompts, backend="art")
    assert captured[-1].values()["prompt_batch_size"] == 4  # never over a THUB_* variable
    thub.lora_grpo("m", str(tmp_path), prompts, backend="trl", max_steps=2)
    assert not any(s.startswith("training-hub default") for s in captured[-1].sources.values())  # not its backend


def _verl_overrides(values: dict[str, Any]) -> dict[str, str]:
    plan = get_registry().translate("grpo", "verl", values)
    return dict(item.split("=", 1) for item in plan["overrides"])


@pytest.mark.needs_backend("verl")
def test_use_dr_grpo_false_is_grpo_with_kl_as_on_training_hubs_verl(captured: list[Any], tmp_path: Path) -> None:
    """Training Hub's verl backend: use_dr_grpo=False adds use_kl_loss, kl_loss_coef 0.01, low_var_kl
    (lora_grpo_verl.py); thub's default GRPO has no KL term, so the call gets beta 0.01, said in its source."""
    prompts = str(ROOT / "examples" / "data" / "grpo.jsonl")
    thub.grpo("m", str(tmp_path), prompts, backend="verl", use_dr_grpo=False)
    values, sources = captured[-1].values(), captured[-1].sources
    assert values["beta"] == rules.DR_GRPO_OFF_KL == 0.01 and "use_dr_grpo=False" in sources["beta"]
    o = _verl_overrides(values)
    assert (o["actor_rollout_ref.actor.use_kl_loss"], o["actor_rollout_ref.actor.kl_loss_coef"],
            o["actor_rollout_ref.actor.kl_loss_type"]) == ("true", "0.01", "low_var_kl")
    assert "algorithm.norm_adv_by_std_in_grpo" not in o  # standard GRPO: verl's std normalisation
    thub.grpo("m", str(tmp_path), prompts, backend="verl", use_dr_grpo=False, beta=0.05)
    assert captured[-1].values()["beta"] == 0.05  # the caller's own coefficient wins
    thub.grpo("m", str(tmp_path), prompts, backend="verl")  # Training Hub's default: Dr. GRPO, no KL
    assert captured[-1].values()["beta"] is None
    assert _verl_overrides(captured[-1].values())["actor_rollout_ref.actor.use_kl_loss"] == "false"


@pytest.mark.needs_backend("verl")
def test_training_hubs_grpo_reward_default_is_tool_call_on_verl(captured: list[Any], tmp_path: Path) -> None:
    """lora_grpo_verl.py: reward_type defaults to 'tool_call'; thub's own default is math."""
    prompts = str(ROOT / "examples" / "data" / "grpo.jsonl")
    thub.grpo("m", str(tmp_path), prompts, backend="verl")
    assert captured[-1].values()["reward"] == ["tool_call"]
    assert captured[-1].sources["reward"] == "training-hub default reward_type='tool_call' (grpo on verl)"
    thub.grpo("m", str(tmp_path), prompts, backend="verl", reward_type="math")
    assert captured[-1].values()["reward"] == ["math"]
    thub.grpo("m", str(tmp_path), prompts, backend="trl", max_steps=2)
    assert captured[-1].values()["reward"] == ["math"]  # not Training Hub's backend: thub's default


@pytest.mark.needs_backend("mini-trainer")
def test_osft_max_steps_means_what_training_hub_does(captured: list[Any], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Training Hub's osft passes max_steps to mini-trainer, which ignores it unless training_mode='step'
    (it trains full epochs): thub refuses max_steps without training_mode='step', and takes the mode."""
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: True)
    args = ("m", DATA, 0.25, 16, 4096, 1024, 5e-6, str(tmp_path))
    with pytest.raises(UsageError, match="max_steps.*training_mode='step'.*full epochs"):
        thub.osft(*args, max_steps=5)
    with pytest.raises(UsageError, match="max_steps.*training_mode='step'.*full epochs"):
        thub.osft(*args, max_steps=5, training_mode="epoch")
    with pytest.raises(UsageError, match="training_mode='token'"):
        thub.osft(*args, training_mode="token")
    thub.osft(*args, max_steps=5, training_mode="step")
    values = captured[-1].values()
    assert values["max_steps"] == 5
    plan = get_registry().translate("osft", "mini-trainer", values)
    assert (plan["training_args"]["training_mode"], plan["training_args"]["max_steps"]) == ("step", 5)
    thub.osft(*args, training_mode="epoch", num_epochs=2)
    assert captured[-1].values()["max_steps"] is None and captured[-1].values()["num_epochs"] == 2


# --- Training Hub's per-completion reward_fn (thub_builtins.training_hub.reward) -------------------

_SCORERS = '''\
def exact(data_source, solution_str, ground_truth, extra_info=None):
    """Training Hub's verl signature: 1 when the answer is in the completion."""
    return float(ground_truth.strip() in solution_str)


def seen(data_source, solution_str, ground_truth):
    """Training Hub's ART call (no extra_info): records what it was given."""
    CALLS.append((data_source, solution_str, ground_truth))
    return len(solution_str) / 10


def with_info(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    INFOS.append(extra_info)
    return None if not solution_str else 1.0


CALLS = []
INFOS = []
'''


@pytest.fixture
def scorers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import importlib
    import sys

    (tmp_path / "th_scorers.py").write_text(_SCORERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("th_scorers", None)
    return importlib.import_module("th_scorers")


def test_reward_fn_scores_each_completion_of_a_batch(scorers: Any) -> None:
    """The adapter, by import string as a training process loads it, on a few real completions."""
    from thub.specs import load_object
    from thub_builtins.training_hub.reward import PREFIX

    reward = load_object(f"{PREFIX}.th_scorers.exact")
    prompts = [[{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "3+3?"}]]
    completions = [[{"role": "assistant", "content": "It is 4."}], [{"role": "assistant", "content": "7"}]]
    assert reward(prompts, completions, ground_truth=["4", "6"], completion_ids=[[1], [2]]) == [1.0, 0.0]
    assert reward.__name__ == "th_scorers.exact"
    import copy
    import pickle

    for clone in (pickle.loads(pickle.dumps(reward)), copy.deepcopy(reward)):  # TRL's picklable reward forms
        assert clone(prompts, completions, ground_truth=["4", "6"]) == [1.0, 0.0]
    seen = load_object(f"{PREFIX}.th_scorers.seen")
    assert seen(["p", "q"], ["abcde", "ab"], ground_truth=["x", "y"], data_source=["gsm8k", "math"]) == [0.5, 0.2]
    assert scorers.CALLS == [("gsm8k", "abcde", "x"), ("math", "ab", "y")]  # the row's data_source, no extra_info
    info = load_object(f"{PREFIX}.th_scorers.with_info")
    assert info(["p", "q"], ["yes", ""], ground_truth=["1", "2"], level=[3, 4], trainer_state=object()) == [1.0, None]
    assert scorers.INFOS == [{"index": 0, "prompt": "p", "level": 3}, {"index": 1, "prompt": "q", "level": 4}]


def test_reward_fn_maps_to_the_adapter(tmp_path: Path, scorers: Any) -> None:
    """thub.grpo(reward_fn=function) on trl: the dry run's reward is the adapter over the function."""
    import json

    prompts = str(ROOT / "examples" / "data" / "grpo.jsonl")
    plan = thub.dry_run("grpo", backend="trl", model_path="m", data_path=prompts, ckpt_output_dir=str(tmp_path),
                        max_steps=2, reward_fn=scorers.exact)
    reward = plan["parameters"]["reward"]
    assert reward["value"] == ["thub_builtins.training_hub.reward:per_completion.th_scorers.exact"]
    assert "training-hub name reward_fn → reward" in reward["source"]
    assert reward["value"][0] in json.dumps(plan["translation"])  # what trl's training process loads
    for bad, message in [(len, "Training Hub calls reward_fn as reward_fn\\(data_source, solution_str"),
                         ("th_scorers.missing", "th_scorers"),
                         (str(tmp_path / "th_scorers.py"), "is a file")]:
        with pytest.raises(UsageError, match=message):
            thub.dry_run("grpo", backend="trl", model_path="m", data_path=prompts, ckpt_output_dir=str(tmp_path),
                         max_steps=2, reward_fn=bad)


@pytest.mark.needs_backend("verl")
def test_reward_fn_replaces_training_hubs_tool_call_default_on_verl(captured: list[Any], tmp_path: Path,
                                                                    scorers: Any) -> None:
    """lora_grpo_verl.py: a reward_fn turns its default reward_type 'tool_call' into 'custom'."""
    thub.grpo("m", str(tmp_path), str(ROOT / "examples" / "data" / "grpo.jsonl"), backend="verl",
              reward_fn="th_scorers.exact")
    assert captured[-1].values()["reward"] == ["thub_builtins.training_hub.reward:per_completion.th_scorers.exact"]


@pytest.mark.needs_backend("verl")
def test_reward_fn_through_verls_compute_score(scorers: Any, tmp_path: Path) -> None:
    """verl calls the generated compute_score once per completion; it calls the adapter, which calls the
    Training Hub scorer: the same score Training Hub's verl backend computes from the function itself."""
    import importlib.util

    from thub_plugin_verl.rewards import write_module

    target = "thub_builtins.training_hub.reward:per_completion.th_scorers.exact"
    path = write_module(tmp_path / "verl_reward.py", [target])
    spec = importlib.util.spec_from_file_location("verl_reward_generated", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for solution, truth in [("the answer is 42", "42"), ("no idea", "42")]:
        expected = scorers.exact(data_source="custom", solution_str=solution, ground_truth=truth)
        assert module.compute_score("custom", solution, truth, extra_info={"index": 0}) == expected
