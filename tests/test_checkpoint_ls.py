"""``thub checkpoint ls``: every layout, written by the library that writes it where it runs on this CPU machine
(transformers' Trainer, PEFT, torch.distributed.checkpoint), and named from the library's source where it does
not (DeepSpeed's ZeRO files, verl's FSDP shards: DeepSpeed and verl's workers do not run here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from thub.checkpoint.layouts import Checkpoint, detect, find
from thub.testing.contract import imported_heavy_modules

pytestmark = pytest.mark.needs_module("peft", "safetensors")


def thub(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    # a cache of this test process's own: ~/.cache/thub is shared with every checkout using this venv
    environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"thub-checkpoint-tests-{os.getpid()}")
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=environ,
                          timeout=600)


def _model(tiny_model: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model)


def _by_path(found: list[Checkpoint]) -> dict[str, Checkpoint]:
    return {Path(c.path).name: c for c in found}


@pytest.fixture(scope="module")
def trainer_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers.Trainer, 2 steps, a checkpoint every step: checkpoints/checkpoint-1, checkpoint-2."""
    import torch
    from transformers import Trainer, TrainingArguments

    out = tmp_path_factory.mktemp("trainer") / "run"
    rows = [{"input_ids": torch.tensor([1, 5, 9, 12, 2]), "labels": torch.tensor([1, 5, 9, 12, 2])}] * 4
    args = TrainingArguments(output_dir=str(out / "checkpoints"), max_steps=2, save_steps=1,
                             per_device_train_batch_size=2, report_to=[], use_cpu=True, logging_steps=1)
    Trainer(model=_model(tiny_model), args=args, train_dataset=rows).train()
    return out


def test_hf_trainer_checkpoints_and_a_cut_short_optimizer(trainer_run: Path) -> None:
    found = _by_path(find(trainer_run))
    assert sorted(found) == ["checkpoint-1", "checkpoint-2"]
    two = found["checkpoint-2"]
    assert (two.layout, two.step, two.complete, two.loadable, two.dtype) == ("hf-model", 2, True, True, "F32")
    assert two.writer == "HF Trainer checkpoint-N" and two.details["trainer_state"] is True
    assert two.size_bytes > (trainer_run / "checkpoints" / "checkpoint-2" / "model.safetensors").stat().st_size
    optimizer = trainer_run / "checkpoints" / "checkpoint-1" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])  # a save killed half-way
    one = detect(trainer_run / "checkpoints" / "checkpoint-1")
    assert one is not None and not one.complete and one.problem == "optimizer.pt is unreadable or cut short"


def test_sharded_hf_model_names_the_missing_shard(tiny_model: Path, tmp_path: Path) -> None:
    import torch

    model = _model(tiny_model).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    whole = detect(tmp_path / "sharded")
    assert whole is not None and whole.complete and whole.dtype == "BF16" and whole.loadable
    (tmp_path / "sharded" / shards[1]).unlink()
    cut = detect(tmp_path / "sharded")
    assert cut is not None and not cut.complete and not cut.loadable
    assert cut.problem == f"weight shard {shards[1]} named in model.safetensors.index.json is missing"


def test_peft_adapters_lora_and_dora(tiny_model: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    for name, dora in (("lora", False), ("dora", True)):
        peft_model = get_peft_model(_model(tiny_model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                   use_dora=dora))
        peft_model.save_pretrained(tmp_path / name)
    found = _by_path(find(tmp_path))
    lora, dora_found = found["lora"], found["dora"]
    assert (lora.layout, lora.complete, lora.loadable, lora.dtype) == ("peft-adapter", True, False, "F32")
    assert lora.details["base_model"] == str(tiny_model) and lora.details["r"] == 4
    assert lora.details["use_dora"] is False and dora_found.details["use_dora"] is True
    assert lora.details["qlora"] is False


def test_an_output_folder_with_the_final_model_at_its_root_and_checkpoints_inside(tiny_model: Path,
                                                                                  tmp_path: Path) -> None:
    # LLaMA-Factory and axolotl save the final model (or adapter) into output_dir itself, next to checkpoint-N
    from peft import LoraConfig, get_peft_model

    out = tmp_path / "checkpoints"
    for folder in (out, out / "checkpoint-3"):
        get_peft_model(_model(tiny_model), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(folder)
    (out / "checkpoint-3" / "trainer_state.json").write_text("{}")
    found = find(tmp_path)
    assert [(Path(c.path).name, c.layout, c.step) for c in found] == [
        ("checkpoints", "peft-adapter", None), ("checkpoint-3", "peft-adapter", 3)]


def test_instructlab_and_mini_trainer_hf_format(tiny_model: Path, tmp_path: Path) -> None:
    _model(tiny_model).save_pretrained(tmp_path / "out" / "hf_format" / "samples_128")
    (found,) = find(tmp_path / "out")
    assert found.layout == "hf-model" and found.details["samples"] == 128 and found.step is None
    assert found.writer == "instructlab/mini-trainer hf_format/samples_N" and found.loadable
    assert found.details["missing_for_serving"] == ["tokenizer_config.json"]  # mini-trainer saves the tokenizer apart


def test_torch_dcp_and_accelerate_fsdp_sharded_state(tiny_model: Path, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    state = _model(tiny_model).state_dict()
    dcp.save(state, checkpoint_id=str(tmp_path / "dcp"))  # one process, no process group
    # accelerate's SHARDED_STATE_DICT save: dcp.save({"model": state}) into checkpoint-N/pytorch_model_fsdp_0
    dcp.save({"model": state}, checkpoint_id=str(tmp_path / "checkpoint-7" / "pytorch_model_fsdp_0"))
    (tmp_path / "checkpoint-7" / "trainer_state.json").write_text("{}")
    found = _by_path(find(tmp_path))
    plain, fsdp = found["dcp"], found["checkpoint-7"]
    assert (plain.layout, plain.complete, plain.dtype, plain.loadable) == ("torch-dcp", True, "float32", False)
    assert plain.details["entries"] == len(state)
    assert (fsdp.layout, fsdp.step, fsdp.complete) == ("accelerate-fsdp", 7, True)
    assert fsdp.details["state_dict_type"] == "SHARDED_STATE_DICT"
    distcp = sorted((tmp_path / "dcp").glob("*.distcp"))[0]
    distcp.unlink()
    gone = detect(tmp_path / "dcp")
    assert gone is not None and not gone.complete and gone.problem == f"{distcp.name} named in .metadata is missing"


def _torch_save(path: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"module": {"w": torch.zeros(2)}}, path)


def test_deepspeed_zero3_in_a_trainer_checkpoint(tmp_path: Path) -> None:
    # names from DeepSpeed's runtime/engine.py (_get_zero_ckpt_name, _get_ckpt_name, `latest`, _copy_recovery_script)
    root = tmp_path / "checkpoint-4"
    for rank in (0, 1):
        _torch_save(root / "global_step4" / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        _torch_save(root / "global_step4" / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    (root / "latest").write_text("global_step4")
    (root / "zero_to_fp32.py").write_text("# DeepSpeed's recovery script\n")
    (root / "trainer_state.json").write_text("{}")
    (root / "config.json").write_text("{}")  # the Trainer saves the config, but ZeRO-3 no root weights
    found = detect(root)
    assert found is not None and (found.layout, found.step, found.complete, found.loadable) == \
        ("deepspeed-zero", 4, True, False)
    assert found.details == {"zero_to_fp32": True, "tag": "global_step4", "stage": "3", "world_size": 2,
                             "trainer_state": True}
    (root / "global_step4" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    cut = detect(root)
    assert cut is not None and not cut.complete
    assert cut.problem == "model states of ranks [0, 1] but optimizer states of ranks [0]"
    (root / "latest").write_text("global_step9")
    assert detect(root).problem == "`latest` names 'global_step9', which is not a folder here"  # type: ignore[union-attr]


def test_deepspeed_zero2_tag_folder(tmp_path: Path) -> None:
    tag = tmp_path / "global_step12"
    _torch_save(tag / "mp_rank_00_model_states.pt")
    for rank in (0, 2):
        _torch_save(tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    found = detect(tag)
    assert found is not None and found.details["stage"] == "1 or 2" and found.step == 12
    assert not found.complete and found.problem == "optimizer states of rank 1 missing"


def test_deepspeed_saved_by_accelerate_save_state(tmp_path: Path) -> None:
    # accelerate's save_state under DeepSpeed (instructlab-training's full_state/epoch_E): the tag is
    # MODEL_NAME, "pytorch_model" (accelerator.py: model.save_checkpoint(output_dir, ckpt_id))
    root = tmp_path / "full_state" / "epoch_1"
    _torch_save(root / "pytorch_model" / "mp_rank_00_model_states.pt")
    _torch_save(root / "pytorch_model" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (root / "latest").write_text("pytorch_model")
    (found,) = find(tmp_path)
    assert (found.path, found.layout, found.complete, found.details["tag"]) == \
        (str(root), "deepspeed-zero", True, "pytorch_model")
    assert found.details["epoch"] == 1


def test_mini_trainer_full_state_checkpoint(tiny_model: Path, tmp_path: Path) -> None:
    # mini_trainer/full_state_checkpoint.py: step_N/distributed (DCP of {"model": ...}), optimizer_rank_R.pt,
    # training_state.pt (what mini-trainer's find_latest_full_state_checkpoint requires)
    import torch
    import torch.distributed.checkpoint as dcp

    step = tmp_path / "checkpoints" / "full_state_checkpoints" / "step_6"
    dcp.save({"model": _model(tiny_model).state_dict()}, checkpoint_id=str(step / "distributed"))
    torch.save({"state": {}}, step / "optimizer_rank_0.pt")
    (found,) = find(tmp_path)
    assert (found.path, found.layout, found.step) == (str(step), "torch-dcp", 6)
    assert found.writer == "mini-trainer full_state_checkpoints/step_N"
    assert not found.complete
    assert found.problem == "no training_state.pt (mini-trainer resumes only from a step with one)"
    torch.save({"step": 6}, step / "training_state.pt")
    assert detect(step).complete  # type: ignore[union-attr]


def test_verl_actor_shards(tmp_path: Path) -> None:
    # names from verl's utils/checkpoint/fsdp_checkpoint_manager.py
    actor = tmp_path / "checkpoints" / "global_step_5" / "actor"
    for rank in (0, 1):
        _torch_save(actor / f"model_world_size_2_rank_{rank}.pt")
    (actor / "huggingface").mkdir()
    (actor / "huggingface" / "config.json").write_text("{}")
    (found,) = find(tmp_path)
    assert (found.layout, found.step, found.complete, found.details["world_size"]) == ("verl-fsdp", 5, True, 2)
    (actor / "model_world_size_2_rank_1.pt").unlink()
    assert detect(actor).problem == "model_world_size_2_rank_1.pt is missing"  # type: ignore[union-attr]


def test_cli_json_text_and_bad_input(tiny_model: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "thub_run.json").write_text("{}")
    _model(tiny_model).save_pretrained(run / "final")
    get_peft_model(_model(tiny_model), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(
        run / "checkpoints" / "checkpoint-3")
    done = thub("checkpoint", "ls", str(run), "--json")
    assert done.returncode == 0, done.stderr
    listed = {Path(c["path"]).name: c for c in json.loads(done.stdout)["checkpoints"]}
    assert listed["final"]["layout"] == "hf-model" and listed["final"]["loadable"] is True
    three = listed["checkpoint-3"]
    assert three["layout"] == "peft-adapter" and three["step"] == 3
    assert three["complete"] is False and three["problem"] == "no trainer_state.json"
    text = thub("checkpoint", "ls", str(run), "--dry-run")
    assert text.returncode == 0 and "no: no trainer_state.json" in text.stdout and "F32" in text.stdout
    missing = thub("checkpoint", "ls", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and f"{tmp_path / 'nowhere'}: no such folder" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_help_lists_checkpoint_and_imports_no_torch() -> None:
    probe = ("import sys\nsys.argv = ['thub', 'checkpoint', '--help']\nfrom thub.cli.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n")
    assert imported_heavy_modules(probe) == []
    done = thub("checkpoint", "--help")
    assert done.returncode == 0
    assert all(name in done.stdout for name in ("ls", "merge", "verify"))
    assert "checkpoint" in thub("--help").stdout
