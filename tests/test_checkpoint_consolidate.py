"""``thub checkpoint consolidate``: real sharded checkpoints written here by the libraries that write
them (FSDP2 + torch DCP over 2 gloo processes, accelerate's save_fsdp_model, DeepSpeed ZeRO-2/3 on
its CPU accelerator), consolidated, and compared tensor for tensor with each library's own converter
(torch ``dcp_to_torch_save``, accelerate ``merge_fsdp_weights``, DeepSpeed ``zero_to_fp32``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_module("torch", "safetensors", "transformers")]

ROOT = Path(__file__).resolve().parents[1]
DEEPSPEED = ROOT / "build" / "deepspeed-0.19.8"


#: a thub subprocess (the ``thub`` fixture of tests/conftest.py, which also writes the session's ``fsdp2_dcp``)
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def consolidate(thub: Run) -> Run:
    """``thub checkpoint consolidate ARGS`` in a subprocess."""
    return lambda *args: thub("checkpoint", "consolidate", *args)


def _write(script: str, *args: str, environ: dict[str, str] | None = None) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True,
                          env=environ, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]


def _dcp_to_torch_save(dcp: Path) -> dict:
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = dcp.parent / f"{dcp.name}.torch-save.pt"
    if not target.exists():
        dcp_to_torch_save(dcp, target)
    return torch.load(target, weights_only=True)


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
        else ["model.safetensors"]
    tensors: dict = {}
    for name in files:
        tensors.update(load_file(folder / name))
    return tensors


def _assert_equal(ours: dict, theirs: dict) -> None:
    import torch

    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype and ours[name].shape == tensor.shape, name
        assert torch.equal(ours[name], tensor.contiguous()), name


def _logits(model_dir: Path, dtype: str = "float32") -> object:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    assert model.dtype == getattr(torch, dtype)
    with torch.no_grad():
        return model(input_ids=torch.tensor([[1, 5, 9, 42, 7, 300, 2]])).logits


def test_fsdp2_dcp_equals_dcp_to_torch_save_and_loads(consolidate: Run, thub: Run, fsdp2_dcp: Path,
                                                      tiny_model: Path, tmp_path: Path) -> None:
    import torch

    out = tmp_path / "hf"
    done = consolidate(str(fsdp2_dcp), "--out", str(out), "--base", str(tiny_model), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["layout"] == "torch-dcp" and report["dtype"] == "float32" and report["index"] is None
    assert [s["file"] for s in report["shards"]] == ["model.safetensors"]
    _assert_equal(_tensors(out), _dcp_to_torch_save(fsdp2_dcp))
    assert torch.equal(_logits(out), _logits(tiny_model))  # the same weights: the same logits, exactly
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        assert (out / name).read_bytes() == (tiny_model / name).read_bytes(), name
    assert {c["file"] for c in report["copied"]} >= {"config.json", "tokenizer.json", "chat_template.jinja"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folder left behind"
    verified = thub("checkpoint", "verify", str(out), "--base", str(tiny_model), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    checks = {c["check"]: c["ok"] for c in json.loads(verified.stdout)["checks"]}
    assert checks["shapes"] and checks["finite"] and checks["tokenizer"]


def test_bfloat16_output_sharded_with_an_index(consolidate: Run, fsdp2_dcp: Path, tiny_model: Path,
                                               tmp_path: Path) -> None:
    import torch

    out = tmp_path / "hf"
    done = consolidate(str(fsdp2_dcp), "--out", str(out), "--base", str(tiny_model), "--dtype", "bfloat16",
                       "--max-shard-size", "100KB", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(files) == len(report["shards"]) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert sorted(set(index["weight_map"].values())) == files
    for shard in report["shards"]:  # past the limit only where one tensor alone is larger (transformers' rule)
        assert shard["bytes"] <= 100_000 or shard["tensors"] == 1
    reference = {k: v.to(torch.bfloat16) for k, v in _dcp_to_torch_save(fsdp2_dcp).items()}
    _assert_equal(_tensors(out), reference)
    assert index["metadata"]["total_size"] == sum(t.numel() * 2 for t in reference.values())
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    _logits(out, "bfloat16")  # transformers loads every shard through the index


def test_optimizer_state_is_left_out(consolidate: Run, tiny_model: Path, tmp_path: Path) -> None:
    """A training loop's checkpoint {"model": ..., "optim": ...}: the model subtree, its prefix taken off."""
    dcp = tmp_path / "dcp"
    _write("write_fsdp2_dcp.py", "--model", str(tiny_model), "--out", str(dcp), "--nest", "optimizer")
    done = consolidate(str(dcp), "--out", str(tmp_path / "hf"), "--base", str(tiny_model), "--json")
    assert done.returncode == 0, done.stderr
    reference = _dcp_to_torch_save(dcp)
    assert set(reference) == {"model", "optim"}
    assert json.loads(done.stdout)["skipped"] > 0
    _assert_equal(_tensors(tmp_path / "hf"), reference["model"])


def test_accelerate_sharded_state_dict_equals_merge_fsdp_weights(consolidate: Run, tiny_model: Path,
                                                                 tmp_path: Path) -> None:
    """accelerate's own save_fsdp_model (SHARDED_STATE_DICT) against its own merge_fsdp_weights."""
    from accelerate.utils import merge_fsdp_weights

    checkpoint = tmp_path / "checkpoint-1"
    _write("write_fsdp2_dcp.py", "--model", str(tiny_model), "--out", str(checkpoint), "--nest", "accelerate")
    assert (checkpoint / "pytorch_model_fsdp_0" / ".metadata").is_file()
    done = consolidate(str(checkpoint), "--out", str(tmp_path / "hf"), "--base", str(tiny_model), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["layout"] == "accelerate-fsdp"
    merge_fsdp_weights(str(checkpoint / "pytorch_model_fsdp_0"), str(tmp_path / "merged"), safe_serialization=True)
    _assert_equal(_tensors(tmp_path / "hf"), _tensors(tmp_path / "merged"))


DEEPSPEED_REFERENCE = """
import sys, torch
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
state = get_fp32_state_dict_from_zero_checkpoint(sys.argv[1])
torch.save({k: v.contiguous() for k, v in state.items()}, sys.argv[2])
"""


@pytest.mark.skipif(not (DEEPSPEED / "deepspeed").is_dir() or shutil.which("g++") is None,
                    reason="DeepSpeed 0.19.8 is not unpacked into build/deepspeed-0.19.8 (scripts/test-all.sh), "
                           "or no g++ for its CPU accelerator's op")
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_equals_zero_to_fp32(consolidate: Run, stage: int, tiny_model: Path, tmp_path: Path) -> None:
    import torch

    environ = {**os.environ, "PYTHONPATH": str(DEEPSPEED), "DS_ACCELERATOR": "cpu"}
    checkpoint = tmp_path / "zero"
    _write("write_deepspeed_zero.py", "--model", str(tiny_model), "--out", str(checkpoint), "--stage", str(stage),
           "--freeze-embeddings", environ=environ)  # frozen parameters are stored apart from the trained ones
    done = consolidate(str(checkpoint), "--out", str(tmp_path / "hf"), "--base", str(tiny_model), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["layout"] == "deepspeed-zero"
    reference = subprocess.run([sys.executable, "-c", DEEPSPEED_REFERENCE, str(checkpoint), str(tmp_path / "ref.pt")],
                               capture_output=True, text=True, env=environ, timeout=900)
    assert reference.returncode == 0, reference.stderr[-3000:]
    theirs = torch.load(tmp_path / "ref.pt", weights_only=True)
    ours = _tensors(tmp_path / "hf")
    _assert_equal(ours, theirs)
    before = _tensors(tiny_model)
    assert torch.equal(ours["model.embed_tokens.weight"], before["model.embed_tokens.weight"])  # frozen
    assert not torch.equal(ours["lm_head.weight"], before["lm_head.weight"])  # trained one step


def test_dry_run_writes_nothing(consolidate: Run, fsdp2_dcp: Path, tiny_model: Path, tmp_path: Path) -> None:
    done = consolidate(str(fsdp2_dcp), "--out", str(tmp_path / "hf"), "--base", str(tiny_model), "--dry-run",
                       "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dry_run"] and report["tensors"] == 21 and report["shards"][0]["file"] == "model.safetensors"
    assert list(tmp_path.iterdir()) == []
    text = consolidate(str(fsdp2_dcp), "--out", str(tmp_path / "hf"), "--base", str(tiny_model), "--dry-run")
    assert text.returncode == 0 and "would write" in text.stdout and list(tmp_path.iterdir()) == []


def test_base_found_from_the_run_and_serving_files_copied(consolidate: Run, fsdp2_dcp: Path, tiny_model: Path,
                                                          tmp_path: Path) -> None:
    """No --base: the model_path of the run's thub_run.json; a preprocessor_config.json the base has
    (LLaMA-Factory leaves it out; vLLM needs it) is copied too."""
    base = tmp_path / "base"
    shutil.copytree(tiny_model, base)
    (base / "preprocessor_config.json").write_text('{"processor_class": "X"}\n')
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "thub_run.json").write_text(json.dumps({"parameters": {"model_path": {"value": str(base)}}}))
    shutil.copytree(fsdp2_dcp, run / "checkpoints" / "step-1")
    done = consolidate(str(run / "checkpoints" / "step-1"), "--out", str(tmp_path / "hf"), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["base"] == str(base)
    assert (tmp_path / "hf" / "preprocessor_config.json").read_text() == '{"processor_class": "X"}\n'


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_bad_inputs_exit_2_and_write_nothing(consolidate: Run, fsdp2_dcp: Path, tiny_model: Path,
                                             tmp_path: Path) -> None:
    out = tmp_path / "out" / "hf"
    _refused(consolidate(str(tiny_model), "--out", str(out)), "hf-model", "already a Hugging Face model")
    (tmp_path / "empty").mkdir()
    _refused(consolidate(str(tmp_path / "empty"), "--out", str(out)), "not a checkpoint", "thub checkpoint ls")
    _refused(consolidate(str(tmp_path / "nowhere"), "--out", str(out)), "no such folder")
    run = tmp_path / "run"
    shutil.copytree(fsdp2_dcp, run / "checkpoints" / "step-1")
    _refused(consolidate(str(run), "--out", str(out)), "a folder of 1 checkpoint(s)",
             f"{run / 'checkpoints' / 'step-1'} (torch-dcp)")
    cut = tmp_path / "cut"
    shutil.copytree(fsdp2_dcp, cut)
    with (cut / "__1_0.distcp").open("r+b") as handle:
        handle.truncate(1000)
    _refused(consolidate(str(cut), "--out", str(out), "--base", str(tiny_model)), "torch-dcp", "incomplete",
             "__1_0.distcp")
    _refused(consolidate(str(fsdp2_dcp), "--out", str(out)), "no config.json", "--base")
    other = tmp_path / "other"
    shutil.copytree(tiny_model, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    _refused(consolidate(str(fsdp2_dcp), "--out", str(out), "--base", str(other)), "shapes differ", "mlp")
    _refused(consolidate(str(fsdp2_dcp), "--out", str(out), "--base", str(tiny_model), "--max-shard-size", "5 lots"),
             "--max-shard-size")
    assert not (tmp_path / "out").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    _refused(consolidate(str(fsdp2_dcp), "--out", str(tmp_path / "full"), "--base", str(tiny_model)),
             "not an empty folder")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["notes.txt"]


def test_a_failure_while_writing_leaves_nothing(fsdp2_dcp: Path, tiny_model: Path, tmp_path: Path) -> None:
    """The weights written, then a base file gone before it is copied: no --out, no temporary folder."""
    from thub.checkpoint import consolidate as engine

    base = tmp_path / "base"
    shutil.copytree(tiny_model, base)
    plan = engine.plan(fsdp2_dcp, tmp_path / "hf", base=str(base))
    (base / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError):
        engine.write(plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


def test_read_groups_stay_near_the_largest_tensor() -> None:
    """Weights are read a group at a time, each group no larger than the largest tensor (16 MiB at
    least), every tensor once and in order; output shards follow transformers' rule."""
    from thub.checkpoint.consolidate import OutTensor, _groups, _split
    from thub.checkpoint.sharded import TensorEntry

    sizes = [64 * 2**20, 4096, 4096, 40 * 2**20, 30 * 2**20, 8, 64 * 2**20 - 1, 2]
    tensors = [OutTensor(f"t{i}", TensorEntry(f"t{i}", (n,), "uint8"), "uint8", n) for i, n in enumerate(sizes)]
    groups = _groups(tensors)
    assert [t for group in groups for t in group] == tensors
    assert all(sum(t.nbytes for t in group) <= 64 * 2**20 for group in groups)
    assert [len(g) for g in groups] == [1, 3, 2, 1, 1]  # t0 | t1 t2 t3 | t4 t5 | t6 | t7 (t6 + t7 is 1 byte over)
    shards = _split(tensors, 50 * 2**20)
    assert [s.file for s in shards][0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert all(s.nbytes <= 50 * 2**20 or len(s.tensors) == 1 for s in shards)
