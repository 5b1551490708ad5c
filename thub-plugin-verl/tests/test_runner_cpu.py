"""The runner on a CPU machine: data, reward module, launch, metrics and checkpoints against a
stand-in ``verl`` package (the real GPU run: scripts/gpu_smoke.sh)."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.manager import load_registry
from thub.runner.context import RunContext
from thub.runner.metrics import read_metrics
from thub.runner.rundir import RunDirectory
from thub.selection import cuda_visible

ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(10)]

FAKE_MAIN = '''
import importlib.util, json, os, sys
o = dict(a.split("=", 1) for a in sys.argv[1:])
json.dump(sys.argv[1:], open("argv.json", "w"))
json.dump({k: os.environ.get(k) for k in ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "WANDB_SWEEP_PARAM_PATH")},
          open("tracker_env.json", "w"))
# load the reward module the way verl does (a file path + a function name) and score two answers
spec = importlib.util.spec_from_file_location("custom_module", o["reward.custom_reward_function.path"])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
score = getattr(module, o["reward.custom_reward_function.name"])
import pyarrow.parquet as pq
row = pq.read_table(o["data.train_files"]).to_pylist()[1]
truth = row["reward_model"]["ground_truth"]
scores = [score(row["data_source"], "so \\\\boxed{%s}" % truth, truth, row["extra_info"]),
          score("thub", "no idea", truth, row["extra_info"])]
json.dump(scores, open("scores.json", "w"))
log = open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0)
ckpt = o["trainer.default_local_dir"]
for step in (1, 2):
    log.write((json.dumps({"step": step, "data": {"critic/score/mean": 0.25 * step, "actor/pg_loss": -0.1,
              "actor/lr": 1e-5, "training/epoch": 0, "timing_s/step": 3.0, "actor/other": 1}}) + "\\n").encode())
    os.makedirs(os.path.join(ckpt, f"global_step_{step}", "actor"), exist_ok=True)
    open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w").write(str(step))
'''

FAKE_MERGER = '''
import json, os, sys
target = sys.argv[sys.argv.index("--target_dir") + 1]
os.makedirs(os.path.join(target, "lora_adapter"), exist_ok=True)
json.dump({"r": 8}, open(os.path.join(target, "lora_adapter", "adapter_config.json"), "w"))
'''


@pytest.fixture
def fake_verl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "fake"
    for name, text in {"verl/__init__.py": "", "verl/trainer/__init__.py": "", "verl/trainer/main_ppo.py": FAKE_MAIN,
                       "verl/model_merger/__init__.py": "", "verl/model_merger/__main__.py": FAKE_MERGER}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setattr("thub_plugin_verl.runner.preflight", lambda: None)
    return root


def context_for(tmp_path: Path, algorithm: str = "lora_grpo", **params) -> RunContext:
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    flags = {"model_path": "m", "data_path": str(data), "ckpt_output_dir": str(run_dir), "group_size": 2,
             "prompt_batch_size": 4, "num_epochs": 1, "system_prompt": "Answer in \\boxed{}.", **params}
    values = resolve(load_registry(), algorithm, backend="verl", flags=flags, environ={}).values()
    return RunContext(algorithm, "verl", values, RunDirectory(run_dir))


def test_run_against_stand_in_verl(fake_verl: Path, tmp_path: Path) -> None:
    from thub_plugin_verl.runner import run

    context = context_for(tmp_path, reward=["math", "thub_builtins.reward_functions:binary"])
    outcome = run(context)
    root = tmp_path / "run" / "verl"
    argv = json.loads((root / "argv.json").read_text())
    assert "trainer.save_freq=2" in argv  # 10 prompts // 4 = 2 steps: saved at the last one
    # math gives 1 for the boxed answer; binary 0.5 because the answer is contained: both summed
    assert json.loads((root / "scores.json").read_text()) == [1.5, 0.0]
    lines = read_metrics(context.run_dir.metrics)
    assert [(m["step"], m["max_steps"], m["mean_reward"], m["loss"], m["learning_rate"]) for m in lines] == [
        (1, 2, 0.25, -0.1, 1e-5), (2, 2, 0.5, -0.1, 1e-5)]
    assert "actor/other" not in lines[0] and lines[0]["step_time_s"] == 3.0
    events = [json.loads(x) for x in context.run_dir.events.read_text().splitlines()]
    assert [(e["step"], Path(e["path"]).parts[-2:]) for e in events] == [(1, ("global_step_1", "actor")),
                                                                         (2, ("global_step_2", "actor"))]
    adapter = tmp_path / "run" / "checkpoints" / "global_step_2" / "hf" / "lora_adapter"
    assert outcome["final_checkpoint"] == str(adapter)
    assert len(outcome["summary"]["adapter_checkpoints"]) == 2
    assert outcome["summary"]["mean_reward"] == 0.5 and not outcome["interrupted"]


def test_verls_own_tracker_runs_get_thubs_parameters(fake_verl: Path, tmp_path: Path, mlflow_store: str) -> None:
    """verl starts with MLFLOW_RUN_ID naming the run thub created (in verl's experiment, its project)
    and WANDB_SWEEP_PARAM_PATH naming thub's W&B config; verl's own Tracking attaching to them is
    tests/test_trackers_library.py."""
    pytest.importorskip("mlflow")
    import yaml
    from mlflow import MlflowClient
    from thub_plugin_verl.runner import run

    store = mlflow_store
    context = context_for(tmp_path, mlflow_tracking_uri=store, wandb_project="thub-tests")
    context.record = {"algorithm": "lora_grpo", "backend": "verl",
                      "parameters": {k: {"value": v, "source": "test"} for k, v in context.params.items()}}
    run(context)
    env = json.loads((tmp_path / "run" / "verl" / "tracker_env.json").read_text())
    assert env["MLFLOW_TRACKING_URI"] == store
    mlflow_run = MlflowClient(tracking_uri=store).get_run(env["MLFLOW_RUN_ID"])
    assert MlflowClient(tracking_uri=store).get_experiment(mlflow_run.info.experiment_id).name == "thub-tests"
    assert mlflow_run.data.params["thub.algorithm"] == "lora_grpo"
    config = yaml.safe_load(Path(env["WANDB_SWEEP_PARAM_PATH"]).read_text())
    assert config["thub"]["value"]["backend"] == "verl"


def test_parquet_rows_carry_verls_columns(fake_verl: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from thub_plugin_verl.runner import run

    run(context_for(tmp_path, algorithm="grpo"))
    rows = pq.read_table(tmp_path / "run" / "verl" / "data" / "train.parquet").to_pylist()
    assert len(rows) == 10
    first = rows[0]
    assert first["data_source"] == "thub" and first["reward_model"] == {"style": "rule", "ground_truth": "0"}
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["prompt"][1]["content"] == "What is 0 + 0?"
    assert json.loads(first["extra_info"]["prompt_json"]) == first["prompt"]


def test_a_failing_verl_and_a_bad_reward_fail_before_or_with_the_cause(fake_verl: Path, tmp_path: Path) -> None:
    from thub_plugin_verl.runner import run

    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        run(context_for(tmp_path / "a", reward=["no_such_module:f"]))
    (fake_verl / "verl" / "trainer" / "main_ppo.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(RuntimeError, match="verl exited with code 3"):
        run(context_for(tmp_path / "b"))
    with pytest.raises(ValueError, match="10 prompts are fewer than prompt_batch_size 16"):
        run(context_for(tmp_path / "c", prompt_batch_size=16))


def test_generated_reward_module_holds_import_strings_only(tmp_path: Path) -> None:
    from thub_plugin_verl.rewards import resolve_targets, write_module

    targets = resolve_targets(["tool_call", "pkg.mod:fn"], dict(load_registry().rewards))
    assert targets == ["thub_builtins.reward_functions:tool_call", "pkg.mod:fn"]
    path = write_module(tmp_path / "r.py", ["thub_builtins.reward_functions:binary"])
    assert "def binary" not in path.read_text()  # no copied source
    spec = importlib.util.spec_from_file_location("r", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("thub", "Paris", "paris") == 1.0
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        resolve_targets(["nope"], {})


@pytest.mark.skipif(cuda_visible(), reason="checks the stop on a machine without an NVIDIA GPU")
def test_preflight_stops_a_cpu_run_with_the_fix(tmp_path: Path) -> None:
    from thub_plugin_verl.runner import run

    with pytest.raises(RuntimeError, match="needs NVIDIA GPUs .* use `--backend trl`"):
        run(context_for(tmp_path))
    assert not (tmp_path / "run" / "verl").exists()  # nothing written before the stop
