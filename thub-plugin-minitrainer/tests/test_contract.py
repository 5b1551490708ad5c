"""thub's backend contract, and the translation checked against mini-trainer's own types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from thub_plugin_minitrainer.translate import HONOURED, translate

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}
OSFT = {**BASE, "unfreeze_rank_ratio": 0.25}


class TestMiniTrainerContract(BackendContract):
    backend = "mini-trainer"
    plugin_module = "thub_plugin_minitrainer"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {
        "sft": {**BASE, "learning_rate": 1e-4, "max_steps": 5},
        "osft": {**OSFT, "target_patterns": ["self_attn.q_proj", "mlp.gate_proj"]},
    }
    read_samples = [("sft", {**BASE, "is_pretraining": True, "block_size": 128}),
                    ("osft", {**OSFT, "is_pretraining": True, "block_size": 128})]
    checks = frozenset({"minitrainer.attention", "minitrainer.torchrun"})


def _resolved(algorithm: str, **params: Any) -> dict[str, Any]:
    registry = load_registry()
    base = OSFT if algorithm == "osft" else BASE
    return resolve(registry, algorithm, backend="mini-trainer", flags={**base, **params}, environ={}).values()


def _plan(algorithm: str, environ: dict[str, str] | None = None, **params: Any) -> dict[str, Any]:
    return translate(algorithm, _resolved(algorithm, **params), environ={} if environ is None else environ)


# A matrix of configurations that together set every honoured parameter at least once.
MATRIX: list[tuple[str, dict[str, Any]]] = [
    ("sft", {"num_epochs": 3, "effective_batch_size": 16, "learning_rate": 2e-5, "max_seq_len": 512,
             "max_tokens_per_gpu": 2048, "seed": 7, "data_output_dir": "prep", "save_samples": 100,
             "checkpoint_at_epoch": True, "save_final_checkpoint": False, "trust_remote_code": True,
             "lr_scheduler": "linear", "lr_scheduler_kwargs": {"power": 1.0}, "warmup_steps": 5,
             "logging_steps": 2, "unmask_messages": True, "use_liger": True,
             "validation_split": 0.1, "validation_frequency": 10,
             "wandb_project": "p", "wandb_entity": "e", "wandb_run_name": "r",
             "mlflow_tracking_uri": "file:///tmp/ml", "mlflow_experiment_name": "x", "mlflow_run_name": "mr",
             "nproc_per_node": 8, "nnodes": 2, "node_rank": 1, "rdzv_id": "job7",
             "rdzv_endpoint": "host:29500"}),
    ("sft", {"max_steps": 20, "save_steps": 5, "save_total_limit": 3, "is_pretraining": True, "block_size": 1024,
             "document_column_name": "text", "nproc_per_node": "auto", "master_addr": "10.0.0.1",
             "master_port": 29501}),
    ("osft", {"target_patterns": ["q_proj", "v_proj"], "unfreeze_rank_ratio": 0.5, "num_epochs": 2}),
    ("osft", {"is_pretraining": True, "block_size": 256, "nproc_per_node": "gpu"}),
    ("sft", {"validation_data_path": "held_out.jsonl", "validation_frequency": 4}),
]


def test_matrix_covers_every_honoured_parameter() -> None:
    covered = set().union(*(params for _, params in MATRIX)) | {"unfreeze_rank_ratio"}
    honoured = set().union(*HONOURED.values())
    assert honoured - covered == set()


@pytest.mark.parametrize("algorithm, params", MATRIX, ids=[f"{a}-{i}" for i, (a, _) in enumerate(MATRIX)])
def test_translation_builds_real_mini_trainer_args(algorithm: str, params: dict[str, Any]) -> None:
    pytest.importorskip("mini_trainer")
    from mini_trainer import PretrainingConfig, TrainingMode
    from thub_plugin_minitrainer.native import build

    resolved = _resolved(algorithm, **params)
    plan = translate(algorithm, resolved, environ={})
    json.dumps(plan)
    torch_args, train_args = build(plan)
    assert train_args.model_name_or_path == "m"
    assert train_args.output_dir == "out/checkpoints"
    assert train_args.batch_size == resolved["effective_batch_size"]
    assert train_args.max_tokens_per_gpu == resolved["max_tokens_per_gpu"]
    assert train_args.learning_rate == resolved["learning_rate"]
    assert train_args.seed == resolved["seed"]
    assert train_args.num_warmup_steps == resolved["warmup_steps"]
    assert train_args.lr_scheduler == resolved["lr_scheduler"]
    assert train_args.osft is (algorithm == "osft")
    assert train_args.on_demand_checkpointing is True
    if algorithm == "osft":
        assert train_args.osft_unfreeze_rank_ratio == resolved["unfreeze_rank_ratio"]
        assert train_args.osft_target_patterns == resolved["target_patterns"]
    if resolved.get("max_steps"):
        assert (train_args.training_mode, train_args.max_steps) == (TrainingMode.STEP, resolved["max_steps"])
    else:
        assert (train_args.training_mode, train_args.max_epochs) == (TrainingMode.EPOCH, resolved["num_epochs"])
    if resolved["is_pretraining"]:
        assert train_args.pretraining_config == PretrainingConfig(block_size=resolved["block_size"])
    else:
        assert train_args.pretraining_config is None
    for name in ("nnodes", "node_rank", "rdzv_endpoint", "master_addr", "master_port"):
        if resolved.get(name) is not None:
            assert getattr(torch_args, name) == resolved[name]
    if resolved.get("nproc_per_node") is not None:
        expected = resolved["nproc_per_node"]
        assert torch_args.nproc_per_node == ("gpu" if expected in ("auto", "gpu") else expected)


def test_first_matrix_row_in_detail() -> None:
    pytest.importorskip("mini_trainer")
    from thub_plugin_minitrainer.native import build

    torch_args, t = build(_plan(MATRIX[0][0], **MATRIX[0][1]))
    assert (t.max_epochs, t.data_path, t.min_samples_per_checkpoint) == (3, "prep/data.jsonl", 100)
    assert (t.checkpoint_at_epoch, t.save_final_checkpoint, t.trust_remote_code, t.use_liger_kernels) == (
        True, False, True, True)
    assert t.lr_scheduler_kwargs == {"power": 1.0}
    assert (t.validation_split, t.validation_frequency) == (0.1, 10)
    assert (t.wandb_project, t.wandb_entity, t.wandb_run_name) == ("p", "e", "r")
    assert (t.mlflow_tracking_uri, t.mlflow_experiment_name, t.mlflow_run_name) == ("file:///tmp/ml", "x", "mr")
    assert (torch_args.nproc_per_node, torch_args.nnodes, torch_args.node_rank, torch_args.rdzv_id) == (8, 2, 1, "job7")
    second = build(_plan(MATRIX[1][0], **MATRIX[1][1]))[1]
    assert second.min_samples_per_checkpoint == 5 * 32  # save_steps x effective_batch_size (backend default)


def test_defaults_and_data_output_dir() -> None:
    plan = _plan("osft")
    t = plan["training_args"]
    assert (t["batch_size"], t["max_tokens_per_gpu"], t["learning_rate"],
            t["lr_scheduler"]) == (32, 16384, 1e-5, "cosine")
    assert t["data_path"] == "out/_internal_data_processing/data.jsonl"
    assert plan["data"] == {"mode": "chat", "output": t["data_path"], "max_seq_len": 4096, "overlong": "drop",
                            "loss_on": "assistant tokens"}
    assert plan["environment"]["CHECKPOINT_TRIGGER_FILENAME"].startswith("thub-checkpoint-requested-")


@pytest.mark.parametrize("index", range(len(MATRIX)))
def test_displayed_command_is_what_run_training_starts(index: int, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """mini_trainer.run_training with a recording Popen wrapper: the command must equal the dry run's."""
    pytest.importorskip("mini_trainer")
    import mini_trainer.api_train as api
    from thub_plugin_minitrainer.native import build

    started: list[list[str]] = []

    class Recorder:
        def __init__(self, log_file: str, command: list[str]) -> None:
            started.append(command)

        def listen(self) -> None:
            pass

        def wait(self, timeout: float | None = None) -> int:
            return 0

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(api, "StreamablePopen", Recorder)
    algorithm, params = MATRIX[index]
    plan = _plan(algorithm, **{**params, "ckpt_output_dir": str(tmp_path)})
    api.run_training(*build(plan))
    assert started == [plan["command"]]


def test_unhonoured_parameters_are_rejected_with_reason() -> None:
    with pytest.raises(UsageError, match="beta1.*backends that do: trl"):
        _plan("sft", beta1=0.8)
    with pytest.raises(UsageError, match="weight_decay"):
        _plan("osft", weight_decay=0.1)


def test_lengths_that_mini_trainer_would_drop_are_refused() -> None:
    with pytest.raises(UsageError, match="max_seq_len 8192 > max_tokens_per_gpu 4096"):
        _plan("sft", max_seq_len=8192, max_tokens_per_gpu=4096)
    with pytest.raises(UsageError, match="block_size 2048 > max_tokens_per_gpu 1024"):
        _plan("sft", is_pretraining=True, block_size=2048, max_tokens_per_gpu=1024)
    with pytest.raises(UsageError, match="save_samples and save_steps"):
        _plan("sft", save_samples=10, save_steps=2)


def test_torchrun_precedence_explicit_over_pet_environment() -> None:
    env = {"PET_NNODES": "4", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "gpu", "PET_MASTER_ADDR": "head",
           "PET_MASTER_PORT": "29400"}
    torch = _plan("sft", environ=env, nnodes=3)["torchrun_args"]
    assert torch == {"nnodes": 3, "node_rank": 2, "nproc_per_node": "gpu", "rdzv_id": 123,
                     "master_addr": "head", "master_port": 29400}
    plan = _plan("sft", environ=env, nnodes=3)
    assert "--master-addr=head" in plan["command"] and "--rdzv-backend=static" in plan["command"]
    with pytest.raises(UsageError, match="rdzv_endpoint and master_addr"):
        _plan("sft", environ={"PET_MASTER_ADDR": "a"}, rdzv_endpoint="b:1")


def test_registers_and_translates_without_mini_trainer(tmp_path: Path) -> None:
    """mini_trainer hidden (import blocked, metadata gone): registration, dry run and doctor still work."""
    probe = textwrap.dedent("""
        import importlib.abc, importlib.metadata as md, json, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "mini_trainer" or name.startswith("mini_trainer."):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, Block())
        real = md.version
        def version(name):
            if name.lower().replace("_", "-") == "rhai-innovation-mini-trainer":
                raise md.PackageNotFoundError(name)
            return real(name)
        md.version = version
        # thub reads metadata once per process (thub.installed): hide the distribution there too
        from thub import installed
        hidden = lambda name: name.lower().replace("_", "-") == "rhai-innovation-mini-trainer"
        for attr in ("version", "distribution"):
            real_attr = getattr(installed, attr)
            setattr(installed, attr, lambda name, real_attr=real_attr: None if hidden(name) else real_attr(name))

        from thub.manager import load_registry
        from thub.config.resolve import resolve
        from thub.specs import CheckContext
        registry = load_registry()
        spec = registry.backends["mini-trainer"]
        flags = {"model_path": "m", "data_path": "d", "ckpt_output_dir": "o", "unfreeze_rank_ratio": 0.3}
        plan = registry.translate("osft", "mini-trainer", resolve(registry, "osft", backend="mini-trainer",
                                  flags=flags, environ={}).values())
        check = registry.checks["core.backend-requirements"].run(CheckContext(backend="mini-trainer"))
        from thub.selection import backend_status
        print(json.dumps({"algorithms": sorted(spec.algorithms), "script": plan["command"][6],
                          "check": [check.status, list(check.details), check.fix, check.summary],
                          "status": backend_status(spec), "loaded": "mini_trainer" in sys.modules}))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["algorithms"] == ["osft", "sft"]
    assert out["script"] == "<site-packages>/mini_trainer/train.py"
    assert out["check"][0] == "fail"
    assert "rhai-innovation-mini-trainer is not installed" in out["check"][1][0]
    assert "backend mini-trainer" in out["check"][3] and "rhai-innovation-mini-trainer>=0.9,<0.10" in out["check"][3]
    assert "thub install mini-trainer" in out["check"][2]  # from a clone: thub installs it, not the index
    assert out["status"][0] is False and "rhai-innovation-mini-trainer" in out["status"][1]
    assert out["loaded"] is False


def test_gpu_check_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_plugin_minitrainer import _attention_check

    from thub.specs import CheckContext

    monkeypatch.setattr("thub.selection.cuda_visible", lambda: False)
    monkeypatch.setattr("thub.selection.requirement_problem", lambda spec: None)
    result = load_registry().checks["core.backend-requirements"].run(CheckContext(backend="mini-trainer"))
    assert (result.status, result.summary) == ("fail", "backend mini-trainer needs an NVIDIA GPU; none found")
    assert "--backend trl" in result.fix
    assert _attention_check(CheckContext(env={"TESTING": "true"})).status in ("ok", "warn")


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="this machine has an NVIDIA driver")
def test_train_stops_before_launch_without_gpu(tmp_path: Path) -> None:
    data = Path(__file__).parents[2] / "examples" / "data" / "chat.jsonl"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    done = subprocess.run([sys.executable, "-m", "thub", "train", "osft", "--backend", "mini-trainer",
                           "--model-path", "m", "--data-path", str(data), "--ckpt-output-dir", str(tmp_path / "run"),
                           "--unfreeze-rank-ratio", "0.25"], capture_output=True, text=True, env=environ, timeout=120)
    assert done.returncode != 0
    assert "backend mini-trainer needs an NVIDIA GPU; none found" in done.stdout + done.stderr
    assert not (tmp_path / "run" / "thub_run.json").exists()  # nothing launched, nothing written


@pytest.mark.slow
def test_force_launch_reports_the_library_root_cause(tiny_model, demo_data, tmp_path) -> None:
    """On a CPU machine, --force-launch runs mini-trainer for real and its own CUDA failure is the
    root cause reported, not torchrun's ChildFailedError wrapper."""
    out = tmp_path / "run"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    done = subprocess.run(
        [sys.executable, "-m", "thub", "train", "osft", "--backend", "mini-trainer", "--model-path", str(tiny_model),
         "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--unfreeze-rank-ratio", "0.5",
         "--max-tokens-per-gpu", "1024", "--max-seq-len", "128", "--learning-rate", "1e-4", "--force-launch"],
        capture_output=True, text=True, env=environ, timeout=300)
    assert done.returncode == 1
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed"
    assert "ChildFailedError" not in result["error"]
    assert "cuda" in result["error"].lower() or "accelerator" in result["error"].lower(), result["error"]


@pytest.mark.parametrize("algorithm", ["sft", "osft"])
def test_unset_parameters_leave_mini_trainers_defaults(algorithm: str) -> None:
    """Translating only the required parameters: every ``TrainingArgs`` field mini-trainer gives a
    default keeps it, except the ones thub sets on purpose."""
    import dataclasses

    from mini_trainer import TrainingArgs
    from thub_plugin_minitrainer.native import build

    training = build(_plan(algorithm))[1]
    differing = {f.name for f in dataclasses.fields(TrainingArgs)
                 if f.default is not dataclasses.MISSING and getattr(training, f.name) != f.default}
    # on_demand_checkpointing: thub's interrupt saves a full-state checkpoint; osft: the algorithm
    assert differing == {"on_demand_checkpointing"} | ({"osft", "osft_unfreeze_rank_ratio"} if algorithm == "osft"
                                                       else set())
