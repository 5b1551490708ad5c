"""thub's backend contract for gepa, the parameters' own rules, and the plan against gepa.optimize's signature."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"data_path": "d.jsonl", "ckpt_output_dir": "out", "seed_candidate": {"system_prompt": "Answer."},
        "task_lm": "openai/m", "max_metric_calls": 10}


class TestGepaContract(BackendContract):
    backend = "gepa"
    plugin_module = "thub_plugin_gepa"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {"gepa": {**BASE, "api_base": "http://127.0.0.1:8000/v1", "reflection_lm": "openai/big"}}
    read_samples = [("gepa", {**BASE, "evaluator": "m:f", "candidate_selection_strategy": "current_best",
                              "frontier_type": "hybrid", "skip_perfect_score": False, "perfect_score": 2.0,
                              "reflection_minibatch_size": 2, "seed": 3, "run_dir": "state", "use_wandb": True,
                              "wandb_api_key": "k", "wandb_init_kwargs": {"project": "p"}, "use_mlflow": True,
                              "batch_sampler": "m:s", "reflection_prompt_template": "t",
                              "custom_candidate_proposer": "m:p", "module_selector": "all", "use_merge": True,
                              "stop_callbacks": "m:stop", "callbacks": ["m:C"], "display_progress_bar": True,
                              "cache_evaluation": True, "raise_on_exception": False,
                              "valset": [{"input": "q", "answer": "a"}]}),
                    ("gepa", {**{k: v for k, v in BASE.items() if k not in ("task_lm", "ckpt_output_dir")},
                              "adapter": "m:A", "output_dir": "o"})]
    checks = frozenset()
    differential_values = {"api_base": ("http://a/v1", "https://b/v1"),
                           "seed_candidate": ({"p": "one"}, {"p": "two"}),
                           "valset": ([{"input": "q", "answer": "a"}], [{"input": "q", "answer": "b"}]),
                           "wandb_init_kwargs": ({"project": "a"}, {"project": "b"})}


class TestMlflowContract(BackendContract):
    backend = "mlflow"
    plugin_module = "thub_plugin_gepa"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {"gepa": {**BASE, "predict_fn": "m:predict", "prompt_uris": ["prompts:/qa/1"],
                        "api_base": "http://127.0.0.1:8000/v1"}}
    read_samples = [("gepa", {**{k: v for k, v in BASE.items() if k != "ckpt_output_dir"},
                              "predict_fn": "m:predict", "prompt_uris": ["prompts:/qa/1"], "scorers": ["m:s"],
                              "aggregation": "m:agg", "enable_tracking": False,
                              "gepa_kwargs": {"use_merge": True}, "reflection_lm": "openai/big",
                              "display_progress_bar": True, "output_dir": "o",
                              "candidate_selection_strategy": "current_best", "frontier_type": "hybrid",
                              "skip_perfect_score": False, "perfect_score": 2.0, "reflection_minibatch_size": 2,
                              "seed": 3, "batch_sampler": "m:s", "reflection_prompt_template": "t",
                              "custom_candidate_proposer": "m:p", "module_selector": "all", "use_merge": True,
                              "stop_callbacks": "m:stop", "callbacks": ["m:C"], "cache_evaluation": True,
                              "raise_on_exception": False})]
    checks = frozenset()
    differential_values = {"api_base": ("http://a/v1", "https://b/v1"),
                           "seed_candidate": ({"p": "one"}, {"p": "two"}),
                           "gepa_kwargs": ({"use_merge": True}, {"use_merge": False}),
                           "prompt_uris": (["prompts:/a/1"], ["prompts:/b/1"])}


def test_mlflow_plan_is_training_hubs() -> None:
    plan = load_registry().translate("gepa", "mlflow", resolve(
        load_registry(), "gepa", backend="mlflow", environ={},
        flags={**{k: v for k, v in BASE.items() if k != "max_metric_calls"}, "predict_fn": "m:p",
               "prompt_uris": ["prompts:/qa/1"], "seed": 5}).values())
    # litellm's provider/model as MLflow's provider:/model; Training Hub's budget of 100; forwarded keywords
    assert plan["optimizer"]["reflection_model"] == "openai:/m" and plan["optimizer"]["max_metric_calls"] == 100
    assert plan["optimizer"]["gepa_kwargs"] == {"seed": 5} and plan["optimize_prompts"]["enable_tracking"] is True
    with pytest.raises(UsageError, match="the mlflow backend needs predict_fn"):
        load_registry().translate("gepa", "mlflow", resolve(load_registry(), "gepa", backend="mlflow",
                                                            flags=BASE, environ={}).values())
    with pytest.raises(UsageError, match="valset"):  # Training Hub's mlflow backend ignores it: refused
        resolve(load_registry(), "gepa", backend="mlflow", environ={},
                flags={**BASE, "predict_fn": "m:p", "prompt_uris": ["p"], "valset": [{"input": "q", "answer": "a"}]})


def _resolve(**params):
    registry = load_registry()
    return resolve(registry, "gepa", backend="gepa", flags={**BASE, **params}, environ={})


def _plan(**params):
    return load_registry().translate("gepa", "gepa", _resolve(**params).values())


def test_plan_is_gepa_optimizes_keywords() -> None:
    pytest.importorskip("gepa")
    import gepa

    plan = _plan(api_base="http://h/v1")
    keywords = set(inspect.signature(gepa.optimize).parameters)
    assert set(plan["optimize"]) <= keywords - {"trainset", "valset"}
    # Training Hub's defaults: the reflection model is the task model, gepa's seed 0
    assert plan["optimize"]["reflection_lm"] == "openai/m" and plan["optimize"]["seed"] == 0
    assert plan["optimize"]["run_dir"] == "out/gepa/state" and plan["outputs"] == "out/gepa"
    # unset: gepa's own default (not passed), as Training Hub does
    assert "candidate_selection_strategy" not in plan["optimize"]


def test_training_hubs_output_dir_is_the_run_directory() -> None:
    values = _resolve(ckpt_output_dir=None, output_dir="th-out").values()
    assert values["ckpt_output_dir"] == "th-out"
    with pytest.raises(UsageError, match="name two run directories"):
        _resolve(output_dir="a", ckpt_output_dir="b")


@pytest.mark.parametrize(("params", "message"), [
    ({"trainset": [{"input": "q", "answer": "a"}]}, "thub reads the examples from data_path"),
    ({"valset": [{"input": "q"}]}, r"valset\[0\]: expected an object with string 'input' and 'answer'"),
    ({"adapter": "m:A"}, "an adapter runs and scores the task itself"),
    ({"task_lm": None}, "task_lm is required"),
    ({"max_metric_calls": None}, "max_metric_calls .or stop_callbacks. is required"),
    ({"api_base": "localhost:8000"}, "expected an http:// or https:// URL"),
    ({"model_path": "some/model"}, "model_path"),  # no weights: not honoured
    ({"learning_rate": 1e-5}, "learning_rate"),
    ({"predict_fn": "m:f"}, "predict_fn"),  # Training Hub's mlflow backend: not run here
])
def test_bad_or_unhonoured_parameters_are_refused(params, message) -> None:
    with pytest.raises(UsageError, match=message):
        _plan(**params)


def test_a_function_object_becomes_its_import_string() -> None:
    values = _resolve(evaluator=inspect.signature, callbacks=[inspect.Signature]).values()
    assert values["evaluator"] == "inspect:signature" and values["callbacks"] == ["inspect:Signature"]


def test_import_strings_load_both_spellings() -> None:
    from thub_plugin_gepa.translate import load

    assert load("inspect:signature") is inspect.signature and load("inspect.signature") is inspect.signature


def test_training_hubs_callbacks_are_gepas_callbacks(tmp_path: Path) -> None:
    """Training Hub's gepa passes ``callbacks`` to gepa.optimize (GEPACallbacks in the optimisation), not
    as the TrainingHubCallbacks of its trainers: on ``thub gepa`` and ``thub.train`` they reach the plan."""
    import json
    import os
    import subprocess
    import sys

    import thub

    data = tmp_path / "qa.jsonl"
    data.write_text('{"input": "q", "answer": "a"}\n')
    common = ["--seed-candidate", '{"p": "x"}', "--task-lm", "openai/t", "--data-path", str(data), "--output-dir",
              str(tmp_path / "o"), "--max-metric-calls", "5", "--dry-run", "--json"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    done = subprocess.run([sys.executable, "-m", "thub", "gepa", *common, "--callbacks", '["inspect.Signature"]'],
                          capture_output=True, text=True, env=environ, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["translation"]["optimize"]["callbacks"] == ["inspect.Signature"]
    plan = thub.dry_run("gepa", backend="gepa", data_path=str(data), ckpt_output_dir=str(tmp_path / "p"),
                     seed_candidate={"p": "x"}, task_lm="openai/t", max_metric_calls=5,
                     callbacks=[inspect.Signature])
    assert plan["translation"]["optimize"]["callbacks"] == ["inspect:Signature"]
