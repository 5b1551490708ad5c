"""A checkpoint folder from anyone: nothing in its pickles runs (issue 35 item 1, and item 10's malicious
``.bin``/``optimizer.pt``).

Each hostile file here is made by the test: a pickle whose ``__reduce__`` would create a file (``os.system``
running ``touch``). Every command that reads such a folder (``thub checkpoint ls`` of the folder and of a run
holding it, ``consolidate --dry-run``, ``verify --source``, ``thub eval``, ``--resume``'s completeness check)
must leave no file behind and say "refused: this file asks to run code"; the legitimate files the libraries
write (DCP metadata, an optimizer state, the Trainer's RNG state) still read.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from thub.checkpoint.pickles import TORCH_SAFE_GLOBALS, archive_refusal, load_dcp_metadata
from thub.errors import UsageError

pytestmark = pytest.mark.needs_module("torch")

ROOT = Path(__file__).resolve().parents[1]
Run = Callable[..., subprocess.CompletedProcess[str]]


class Evil:
    """Unpickling it runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _dcp(folder: Path, state: dict[str, Any]) -> Path:
    import torch.distributed.checkpoint as dcp

    dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    return folder


def _small_state() -> dict[str, Any]:
    import torch

    return {"model": torch.nn.Linear(4, 3).state_dict()}


@pytest.fixture
def hostile_dcp(tmp_path: Path) -> tuple[Path, Path]:
    """(a real DCP folder whose ``.metadata`` was replaced by a hostile pickle, the marker it would create)."""
    folder = _dcp(tmp_path / "dcp", _small_state())
    marker = tmp_path / "pwned-by-metadata"
    (folder / ".metadata").write_bytes(pickle.dumps(Evil(marker)))
    return folder, marker


def _refused(text: str) -> bool:
    return "refused: this file asks to run code" in text and "system" in text


def test_a_real_dcp_metadata_reads(tmp_path: Path) -> None:
    import torch
    from torch.distributed.checkpoint import FileSystemReader

    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    # accelerate's and mini-trainer's shapes: a nested model, an optimizer, plain Python values
    folder = _dcp(tmp_path / "dcp", {"model": model.state_dict(), "optim": optimizer.state_dict(),
                                     "extra": {"step": 3, "name": "ünïcode", "list": [1, 2.5, None]}})
    ours = load_dcp_metadata(folder / ".metadata")
    # torch's own unguarded reader, on the file this test just wrote: the reference the guard must equal
    torchs = FileSystemReader(str(folder)).read_metadata()
    assert ours.state_dict_metadata == torchs.state_dict_metadata
    assert ours.storage_data == torchs.storage_data
    assert ours.planner_data == torchs.planner_data


def test_hostile_dcp_metadata_is_refused_by_name(hostile_dcp: tuple[Path, Path]) -> None:
    folder, marker = hostile_dcp
    with pytest.raises(UsageError) as refused:
        load_dcp_metadata(folder / ".metadata")
    assert _refused(str(refused.value)) and str(folder) in str(refused.value)
    assert not marker.exists()


def test_checkpoint_ls_of_the_folder_runs_nothing(hostile_dcp: tuple[Path, Path], thub: Run) -> None:
    folder, marker = hostile_dcp
    done = thub("checkpoint", "ls", str(folder), "--json")
    assert not marker.exists(), "thub checkpoint ls ran the .metadata pickle"
    assert "Traceback" not in done.stderr
    listed = json.loads(done.stdout)
    entry = listed[0] if isinstance(listed, list) else listed["checkpoints"][0]
    assert entry["complete"] is False and _refused(entry["problem"]), entry


def test_checkpoint_ls_of_a_run_holding_it_runs_nothing(tmp_path: Path, thub: Run) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    (run / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl"}))
    folder = _dcp(run / "checkpoints" / "checkpoint-3" / "pytorch_model_fsdp_0", _small_state())
    marker = tmp_path / "pwned-in-run"
    (folder / ".metadata").write_bytes(pickle.dumps(Evil(marker)))
    done = thub("checkpoint", "ls", str(run))
    assert not marker.exists(), "thub checkpoint ls RUN ran the .metadata pickle"
    assert "Traceback" not in done.stderr
    assert "refused" in done.stdout + done.stderr


def test_consolidate_dry_run_runs_nothing(hostile_dcp: tuple[Path, Path], tmp_path: Path, thub: Run) -> None:
    folder, marker = hostile_dcp
    done = thub("checkpoint", "consolidate", str(folder), "--out", str(tmp_path / "out"), "--dry-run")
    assert not marker.exists(), "consolidate --dry-run ran the .metadata pickle"
    assert done.returncode == 2, done.stdout + done.stderr
    assert _refused(done.stderr) and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_eval_of_the_folder_runs_nothing(hostile_dcp: tuple[Path, Path], thub: Run) -> None:
    folder, marker = hostile_dcp
    done = thub("eval", str(folder), "--tasks", str(ROOT / "examples" / "eval" / "capitals.jsonl"))
    assert not marker.exists(), "thub eval ran the .metadata pickle"
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.needs_module("transformers", "safetensors")
def test_verify_source_never_unpickles_the_checkpoints_extra_bytes(tiny_model: Path, tmp_path: Path,
                                                                   thub: Run) -> None:
    """DCP stores a non-tensor value as a ``torch.save`` blob, which torch's own whole-checkpoint loader
    reads with ``weights_only=False``; the comparison needs the weights only."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    marker = tmp_path / "pwned-by-bytes"
    folder = _dcp(tmp_path / "dcp", {"model": model.state_dict(), "extra": Evil(marker)})
    done = thub("checkpoint", "verify", str(tiny_model), "--source", str(folder), "--json")
    assert not marker.exists(), "verify --source unpickled the checkpoint's non-tensor entry"
    assert "Traceback" not in done.stderr
    logits = next(c for c in json.loads(done.stdout)["checks"] if c["check"] == "logits")
    assert logits["ok"] is True, logits


# --- torch.save archives: pytorch_model.bin, optimizer.pt, rng_state.pth -----------------------------------

def test_the_parent_allow_list_is_torchs_own() -> None:
    from torch import _weights_only_unpickler

    assert set(_weights_only_unpickler._get_allowed_globals()) == TORCH_SAFE_GLOBALS


def test_what_the_trainer_saves_is_admitted(tmp_path: Path) -> None:
    import numpy as np
    import torch
    from transformers import get_linear_schedule_with_warmup

    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    scheduler = get_linear_schedule_with_warmup(optimizer, 1, 10)
    # transformers' Trainer._save_rng_state on a CPU, and what its _save_optimizer_and_scheduler writes
    saved = {"rng_state.pth": {"python": random.getstate(), "numpy": np.random.get_state(),
                               "cpu": torch.random.get_rng_state()},
             "optimizer.pt": optimizer.state_dict(), "scheduler.pt": scheduler.state_dict(),
             "pytorch_model.bin": model.state_dict()}
    for name, value in saved.items():
        torch.save(value, tmp_path / name)
        assert archive_refusal(tmp_path / name) is None, name


def test_a_hostile_archive_is_named_without_running_it(tmp_path: Path) -> None:
    import torch

    marker = tmp_path / "pwned-by-archive"
    torch.save({"state": {}, "param_groups": [], "hook": Evil(marker)}, tmp_path / "optimizer.pt")
    assert archive_refusal(tmp_path / "optimizer.pt") == "posix.system"
    assert not marker.exists()
    # a protocol-4 pickle (STACK_GLOBAL) hidden in a torch archive's data.pkl is found the same way
    torch.save({"w": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    import zipfile

    with zipfile.ZipFile(tmp_path / "pytorch_model.bin") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    data_pkl = next(name for name in members if name.endswith("data.pkl"))
    members[data_pkl] = pickle.dumps({"w": Evil(marker)}, protocol=4)
    with zipfile.ZipFile(tmp_path / "pytorch_model.bin", "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    assert archive_refusal(tmp_path / "pytorch_model.bin") == "posix.system"
    assert not marker.exists()


def test_resume_check_names_and_skips_a_hostile_optimizer(tmp_path: Path) -> None:
    """``--resume`` takes the newest complete checkpoint: a checkpoint whose optimizer.pt asks to run code is
    not complete (said as a refusal), and the library-resume helper moves it aside for the older one."""
    import torch
    from safetensors.torch import save_file

    from thub.runner.checkpoints import checkpoint_problem, library_resume_point

    marker = tmp_path / "pwned-by-optimizer"
    root = tmp_path / "checkpoints"
    for step in (2, 4):
        folder = root / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
        torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"state": {}, "hook": Evil(marker)}, root / "checkpoint-4" / "optimizer.pt")
    problem = checkpoint_problem(root / "checkpoint-4")
    assert problem is not None and problem.startswith("optimizer.pt") and _refused(problem), problem
    assert checkpoint_problem(root / "checkpoint-2") is None
    found = library_resume_point(root, lambda n: int(n.split("-")[1]) if n.startswith("checkpoint-") else None,
                                 checkpoint_problem, "trl")
    assert found == (root / "checkpoint-2", 2)
    assert not marker.exists()


def test_zero_files_name_a_hostile_global_as_a_refusal(tmp_path: Path) -> None:
    import torch

    from thub.checkpoint.zero import _load

    marker = tmp_path / "pwned-by-zero"
    torch.save({"optimizer_state_dict": {}, "x": Evil(marker)}, tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(UsageError) as refused:
        _load(tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert _refused(str(refused.value)), refused.value
    assert not marker.exists()


# --- no unguarded unpickling anywhere ------------------------------------------------------------------------

#: the one module allowed to unpickle: it is the guard
_GUARD = ROOT / "core" / "thub" / "checkpoint" / "pickles.py"
_PICKLE_MODULES = {"pickle", "cloudpickle", "dill", "joblib", "_pickle"}


def _name(node: ast.expr) -> str:
    return f"{_name(node.value)}.{node.attr}" if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def unpickling_calls(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, call) of every call in ``source`` that unpickles without a guard: ``pickle.load(s)``,
    ``pickle.Unpickler``, ``joblib/dill/cloudpickle.load(s)``, ``numpy.load(allow_pickle=True)``, torch DCP's
    ``FileSystemReader`` (its ``read_metadata`` is ``pickle.load``) and ``torch.load`` without
    ``weights_only=True`` (torch's default has changed before; it must be said at the call)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        weights_only, allow_pickle = keywords.get("weights_only"), keywords.get("allow_pickle")
        pickling = name.split(".")[0] in _PICKLE_MODULES and name.split(".")[-1] in ("load", "loads", "Unpickler")
        dcp = name.endswith("FileSystemReader") or name.endswith("read_metadata")
        torch_load = name == "torch.load" and not (isinstance(weights_only, ast.Constant) and weights_only.value)
        numpy_load = (name.split(".")[-1] == "load" and isinstance(allow_pickle, ast.Constant)
                      and bool(allow_pickle.value))
        if pickling or dcp or torch_load or numpy_load:
            found.append((node.lineno, name))
    return found


def _sources() -> list[Path]:
    roots = [ROOT / "core", ROOT / "plugins", *sorted(ROOT.glob("thub-plugin-*/src")), ROOT / "examples",
             ROOT / "scripts", ROOT / "benchmarks"]
    return [path for root in roots for path in sorted(root.rglob("*.py"))]


def test_no_unguarded_unpickling_call_site() -> None:
    """Every place that unpickles a file goes through thub.checkpoint.pickles or torch's weights-only loader."""
    offenders = [f"{path.relative_to(ROOT)}:{line}: {call}(...)" for path in _sources() if path != _GUARD
                 for line, call in unpickling_calls(path.read_text(encoding="utf-8"), str(path))]
    assert not offenders, "unpickling outside the guard:\n" + "\n".join(offenders)


def test_the_call_site_check_finds_each_shape() -> None:
    """The call-site test can fail: each shape it forbids is recognised, the guarded ones are not."""
    for line in ("pickle.load(handle)", "x = FileSystemReader(str(folder)).read_metadata()", "torch.load(path)",
                 "np.load(f, allow_pickle=True)", "torch.load(v, weights_only=False)", "pickle.Unpickler(f).load()",
                 "reader.read_metadata()", "joblib.load(p)"):
        assert unpickling_calls(line), line
    for line in ("torch.load(p, map_location='cpu', weights_only=True)", "np.load(f)", "json.load(f)",
                 "x = 'torch.load(path)'"):
        assert not unpickling_calls(line), line


@pytest.mark.needs_module("transformers")
def test_a_model_folder_with_a_hostile_bin_is_refused_by_ls_verify_and_eval(tiny_model: Path, tmp_path: Path,
                                                                           thub: Run) -> None:
    """An HF model folder saved as ``pytorch_model.bin`` whose pickle names code: nothing of thub loads it."""
    import shutil

    import torch

    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder, ignore=shutil.ignore_patterns("*.safetensors*"))
    marker = tmp_path / "pwned-by-bin"
    torch.save({"model.embed_tokens.weight": torch.zeros(2), "x": Evil(marker)}, folder / "pytorch_model.bin")
    listed = thub("checkpoint", "ls", str(folder), "--json")
    verified = thub("checkpoint", "verify", str(folder), "--json")
    evaluated = thub("eval", str(folder), "--tasks", str(ROOT / "examples" / "eval" / "capitals.jsonl"), "--dry-run")
    assert not marker.exists(), "a hostile pytorch_model.bin ran"
    for done in (listed, verified, evaluated):
        assert "Traceback" not in done.stderr, done.stderr
    assert _refused(listed.stdout), listed.stdout
    report = json.loads(verified.stdout)
    assert verified.returncode == 1 and report["failed"]["check"] == "complete", report["failed"]
    assert _refused(report["failed"]["message"])
    assert evaluated.returncode == 2 and _refused(evaluated.stderr), evaluated.stderr
