"""thub's backend contract, and the translation checked against instructlab-training's own types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from thub_plugin_instructlab.translate import HONOURED, translate

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BACKEND = "instructlab-training"
BASE = {"model_path": "org/model", "data_path": "d.jsonl", "ckpt_output_dir": "out"}

# A matrix that sets every honoured parameter at least once (checked below).
MATRIX = {
    "minimal": {},
    "optimizer": {"learning_rate": 1e-5, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1,
                  "warmup_steps": 10, "seed": 7, "num_epochs": 3, "effective_batch_size": 64},
    "one_beta": {"beta2": 0.98},
    "batching": {"max_seq_len": 2048, "max_tokens_per_gpu": 8192, "data_output_dir": "/tmp/processed"},
    "saving": {"save_samples": 1000, "checkpoint_at_epoch": False, "accelerate_full_state_at_epoch": False,
               "save_total_limit": 2},
    "features": {"use_liger": True, "trust_remote_code": True, "unmask_messages": True,
                 "validation_split": 0.1, "validation_frequency": 5},
    "loggers": {"wandb_project": "p", "wandb_entity": "e", "wandb_run_name": "r", "tensorboard_log_dir": "tb",
                "mlflow_tracking_uri": "file:///ml", "mlflow_experiment_name": "x", "mlflow_run_name": "m"},
    "pretraining": {"is_pretraining": True, "block_size": 1024, "document_column_name": "text"},
    "torchrun_static": {"nproc_per_node": 8, "nnodes": 2, "node_rank": 1, "rdzv_id": "job7",
                        "master_addr": "10.0.0.1", "master_port": 29500},
    "torchrun_c10d": {"nproc_per_node": "gpu", "rdzv_endpoint": "head:29400"},
    "fsdp": {"fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_cpu_offload": True},
}


class TestInstructlabContract(BackendContract):
    backend = BACKEND
    plugin_module = "thub_plugin_instructlab"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {"sft": {**BASE, "learning_rate": 1e-5, "is_pretraining": True, "block_size": 128}}
    read_samples = [("sft", BASE)]  # chat: where unmask_messages applies
    checks = frozenset({"instructlab.flash-attn", "instructlab.short-samples"})


def _plan(**params):
    registry = load_registry()
    resolved = resolve(registry, "sft", backend=BACKEND, flags={**BASE, **params}, environ={})
    return translate("sft", resolved.values(), environ={}, flash_attn=False)


def test_matrix_covers_every_honoured_parameter() -> None:
    covered = set().union(*MATRIX.values())
    assert HONOURED["sft"] - covered == set()


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_translation_builds_real_instructlab_args(name: str) -> None:
    """Every key is a real field (the models ignore extras) and the models accept the values."""
    ilab = pytest.importorskip("instructlab.training")
    from thub_plugin_instructlab.runner import build_args

    plan = _plan(**MATRIX[name])
    json.dumps(plan)
    assert set(plan["training_args"]) <= set(ilab.TrainingArgs.model_fields), \
        set(plan["training_args"]) - set(ilab.TrainingArgs.model_fields)
    assert set(plan["torchrun_args"]) <= set(ilab.TorchrunArgs.model_fields)
    torch_args, train_args = build_args(plan)
    # every translated value survives into the real model unchanged
    for key, value in plan["training_args"].items():
        got = getattr(train_args, key)
        if key == "adamw_betas":
            assert got == tuple(value)
        elif key == "pretraining_config":
            assert got.model_dump() == value
        elif key == "fsdp_options":  # FSDPOptions, its strategy an enum
            assert got.model_dump(mode="json") == value
        else:
            assert got == value, key
    for key, value in plan["torchrun_args"].items():
        assert getattr(torch_args, key) == value


def test_values_land_in_the_right_fields() -> None:
    pytest.importorskip("instructlab.training")
    from thub_plugin_instructlab.runner import build_args

    _, args = build_args(_plan(**MATRIX["optimizer"], **MATRIX["batching"], **MATRIX["saving"]))
    assert (args.adamw_betas, args.adamw_eps, args.adamw_weight_decay) == ((0.8, 0.99), 1e-6, 0.1)
    assert (args.random_seed, args.warmup_steps, args.num_epochs, args.effective_batch_size) == (7, 10, 3, 64)
    assert (args.max_seq_len, args.max_batch_len, args.data_output_dir) == (2048, 8192, "/tmp/processed")
    assert (args.save_samples, args.checkpoint_at_epoch, args.accelerate_full_state_at_epoch) == (1000, False, False)
    assert args.disable_flash_attn is True and args.process_data is False
    _, pre = build_args(_plan(**MATRIX["pretraining"]))
    assert (pre.pretraining_config.block_size, pre.pretraining_config.document_column_name) == (1024, "text")
    assert pre.max_batch_len >= 1024


def test_defaults_and_fallbacks() -> None:
    plan = _plan()
    args = plan["training_args"]
    assert args["data_output_dir"] == "out/data"
    assert args["max_batch_len"] == args["max_seq_len"] == 4096
    assert (args["num_epochs"], args["effective_batch_size"], args["learning_rate"]) == (1, 32, 2e-5)
    assert "adamw_betas" not in args  # instructlab's own default applies
    assert plan["torchrun_args"] == {"nproc_per_node": 1, "nnodes": 1, "node_rank": 0, "rdzv_id": 0}


def test_missing_beta_is_filled_from_the_library_default_and_said() -> None:
    plan = _plan(beta2=0.98)
    assert plan["training_args"]["adamw_betas"] == [0.9, 0.98]
    assert any("beta1 not set" in note for note in plan["notes"])


def test_flash_attn_decides_disable_flash_attn() -> None:
    registry = load_registry()
    values = resolve(registry, "sft", backend=BACKEND, flags=BASE, environ={}).values()
    assert translate("sft", values, environ={}, flash_attn=False)["training_args"]["disable_flash_attn"] is True
    assert "disable_flash_attn" not in translate("sft", values, environ={}, flash_attn=True)["training_args"]


def test_max_tokens_per_gpu_below_max_seq_len_is_an_error() -> None:
    with pytest.raises(UsageError, match="max_tokens_per_gpu .1000. must be at least max_seq_len .2048."):
        _plan(max_seq_len=2048, max_tokens_per_gpu=1000)


def test_torchrun_precedence_parameter_over_pet_environment() -> None:
    registry = load_registry()
    values = resolve(registry, "sft", backend=BACKEND, flags={**BASE, "nnodes": 4}, environ={}).values()
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "auto", "MASTER_ADDR": "h",
           "MASTER_PORT": "1234"}
    plan = translate("sft", values, environ=env, flash_attn=False)
    assert plan["torchrun_args"] == {"nproc_per_node": "gpu", "nnodes": 4, "node_rank": 1, "rdzv_id": 0,
                                     "master_addr": "h", "master_port": 1234}
    assert plan["torchrun_sources"]["nnodes"] == "parameter"
    assert plan["torchrun_sources"]["node_rank"] == "PET_NODE_RANK"


def test_master_addr_and_rdzv_endpoint() -> None:
    with pytest.raises(UsageError, match="exclusive"):
        _plan(master_addr="a", rdzv_endpoint="b:1")
    registry = load_registry()
    values = resolve(registry, "sft", backend=BACKEND, flags={**BASE, "rdzv_endpoint": "b:1"}, environ={}).values()
    plan = translate("sft", values, environ={"PET_MASTER_ADDR": "a", "PET_MASTER_PORT": "5"}, flash_attn=False)
    assert plan["torchrun_args"]["rdzv_endpoint"] == "b:1"
    assert "master_addr" not in plan["torchrun_args"] and "master_port" not in plan["torchrun_args"]


def test_a_master_port_without_master_addr_is_refused_not_dropped() -> None:
    """torchrun uses master_port only with a static rendezvous (master_addr): a master_port parameter
    beside none, or beside an rdzv_endpoint, changed nothing (dropped); one from the environment
    (a launcher sets MASTER_PORT everywhere) is still left out quietly."""
    with pytest.raises(UsageError, match="master_port 29501 .*only with master_addr"):
        _plan(master_port=29501)
    with pytest.raises(UsageError, match="master_port 29501 .*only with master_addr"):
        _plan(master_port=29501, rdzv_endpoint="b:1")
    registry = load_registry()
    values = resolve(registry, "sft", backend=BACKEND, flags={**BASE, "rdzv_endpoint": "b:1"}, environ={}).values()
    assert "master_port" not in translate("sft", values, environ={"MASTER_PORT": "5"}, flash_attn=False)[
        "torchrun_args"]


def test_unhonoured_parameters_are_rejected() -> None:
    registry = load_registry()
    for name, value in (("max_steps", 5), ("packing", True), ("lr_scheduler", "linear"), ("save_steps", 10)):
        with pytest.raises(UsageError, match=name):
            resolve(registry, "sft", backend=BACKEND, flags={**BASE, name: value}, environ={})


def test_registers_and_translates_without_the_library() -> None:
    """With instructlab hidden from imports, the plugin still registers and translates."""
    code = (
        "import sys; sys.modules['instructlab'] = None\n"
        "from thub.manager import load_registry\n"
        "r = load_registry(); spec = r.backends['instructlab-training']\n"
        "assert spec.needs_cuda and 'sft' in spec.algorithms\n"
        "from thub_plugin_instructlab.translate import translate\n"
        "p = translate('sft', {'model_path': 'm', 'data_path': 'd', 'ckpt_output_dir': 'o', 'num_epochs': 1,"
        " 'effective_batch_size': 8, 'learning_rate': 1e-5, 'max_seq_len': 64, 'seed': 1}, environ={})\n"
        "print(p['training_args']['max_batch_len'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "64"


def test_doctor_checks_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import thub_plugin_instructlab as plugin

    from thub.specs import CheckContext

    # libraries and the GPU: the core check, as `thub train --backend instructlab-training` runs it
    core = load_registry().checks["core.backend-requirements"]
    context = CheckContext(backend="instructlab-training")
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: True)
    monkeypatch.setattr("thub.selection.requirement_problem",
                        lambda spec: "instructlab-training is not installed" if spec.startswith("instructlab")
                        else None)
    result = core.run(context)
    assert result.status == "fail" and result.fix.startswith("thub install instructlab --into current")
    assert result.summary == "backend instructlab-training is missing instructlab-training>=0.16.2,<0.17"
    assert result.details == ("instructlab-training is not installed",)
    monkeypatch.setattr("thub.selection.requirement_problem", lambda spec: None)
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: False)
    cuda = core.run(context)
    assert cuda.status == "fail" and cuda.summary == "backend instructlab-training needs an NVIDIA GPU; none found"
    assert "--backend trl" in cuda.fix
    assert {c for c in load_registry().checks if c.startswith("instructlab.")} == {
        "instructlab.flash-attn", "instructlab.short-samples"}
    monkeypatch.setattr(plugin, "flash_attn_installed", lambda: False)
    assert "disable_flash_attn=True" in plugin._flash_attn_check(CheckContext()).summary
    assert "20 tokens" in plugin._short_samples_check(CheckContext()).summary


def test_unset_parameters_leave_instructlabs_defaults() -> None:
    """Translating only the required parameters: every ``TrainingArgs`` field with a default keeps
    instructlab-training's own, except those thub sets on purpose."""
    from instructlab.training import TrainingArgs
    from thub_plugin_instructlab.runner import build_args

    registry = load_registry()
    values = resolve(registry, "sft", backend=BACKEND, flags=BASE, environ={}).values()
    training = build_args(translate("sft", values, environ={}, flash_attn=False))[1]
    differing = {name for name, field in TrainingArgs.model_fields.items()
                 if not field.is_required() and getattr(training, name) != field.get_default(call_default_factory=True)}
    # flash-attn absent here; thub prepares the data itself, with up to instructlab's 16 processes
    assert differing - {"data_process_num_cpu_procs"} == {"disable_flash_attn", "process_data"}, differing
    assert training.data_process_num_cpu_procs == max(1, min(16, os.cpu_count() or 1))
